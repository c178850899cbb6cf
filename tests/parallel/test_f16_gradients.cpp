// --fp16 without --accumulate-allreduce-grads-in-fp32 under mpirun: the gradient arena is f16 (each op's
// fp32 sum rounded into it once per call), the data-parallel all-reduce and the distributed optimizer's
// reduce-scatter move f16 (2 bytes an element; each pairwise combine an fp32 add rounded once), the
// sequence-parallel norm gradients are summed in f16 too. Each layout's losses and gradient norms must
// match the single process's within kTolerance: the layouts round the f16 sums at other points (a rank's
// micro-batches, then the ranks' sum; the single process every micro-batch in turn), u = 2^-11 relative
// per element, which moves the norm by a fraction of u and the loss, through Adam, by less. A reduction
// that drops, doubles or mis-scales a rank's contribution moves the norm by O(1). The loss scale starts
// at 2^20, where the scaled gradients overflow fp16 (inf in the arena): those steps must be skipped on
// every layout alike (the loss scaler backs off) before training proceeds.
#include "mpi_runs.h"
#include "support/fixtures.h"

#include <QtTest>

#include <cmath>

namespace fs = std::filesystem;
using namespace mwb::test;

namespace {

constexpr int kIterations = 12;
/// Relative tolerance of losses and gradient norms against the single process (measured: see the
/// qInfo of each row; the worst was 3.5e-4 for the norm, 2.3e-5 for the loss).
constexpr double kTolerance = 2e-3;

QStringList args(const fs::path& run_dir) {
    return {"--preset", "tiny-cpu-demo", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "256",
            "--make-vocab-size-divisible-by", "64", "--num-layers", "2", "--hidden-size", "32",
            "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "8",
            "--train-iters", QString::number(kIterations), "--lr", "2e-3", "--lr-warmup-iters", "2",
            "--log-interval", "1", "--eval-interval", "100", "--eval-iters", "1", "--threads", "1", "--fp16",
            "--initial-loss-scale", "1048576", "--hysteresis", "1", "--run-dir",
            QString::fromStdString(run_dir.string())};
}

}  // namespace

class TestF16Gradients : public QObject {
    Q_OBJECT

    TempDir tmp_;
    std::vector<Step> single_;

private slots:
    void initTestCase() {
        QString log;
        QVERIFY2(run_train(1, args(tmp_ / "single"), log) == 0, qPrintable(log));
        single_ = steps_of(tmp_ / "single");
        QCOMPARE(static_cast<int>(single_.size()), kIterations);
        int skipped = 0;
        for (const Step& s : single_) skipped += !std::isfinite(s.grad_norm);
        // The first steps overflow fp16 and are skipped; most of the run trains.
        QVERIFY2(skipped >= 1 && skipped <= kIterations / 2, qPrintable(QString("%1 steps skipped").arg(skipped)));
    }

    void layouts_match_single_process_data() {
        QTest::addColumn<int>("ranks");
        QTest::addColumn<QStringList>("layout");
        QTest::newRow("dp2") << 2 << QStringList{};
        QTest::newRow("tp2_sp") << 2 << QStringList{"--tensor-model-parallel-size", "2", "--sequence-parallel"};
        QTest::newRow("dp2_distopt") << 2 << QStringList{"--use-distributed-optimizer"};
    }

    void layouts_match_single_process() {
        QFETCH(int, ranks);
        QFETCH(QStringList, layout);
        const fs::path dir = tmp_ / QTest::currentDataTag();
        QString log;
        QVERIFY2(run_train(ranks, args(dir) + layout, log) == 0, qPrintable(log));
        const std::vector<Step> steps = steps_of(dir);
        QCOMPARE(steps.size(), single_.size());
        double worst_loss = 0, worst_norm = 0;
        for (std::size_t i = 0; i < steps.size(); ++i) {
            const Step &got = steps[i], &want = single_[i];
            QVERIFY2(std::isfinite(got.grad_norm) == std::isfinite(want.grad_norm),
                     qPrintable(QString("iteration %1: gradient norm %2, single process %3 (one skipped, one not)")
                                    .arg(i + 1)
                                    .arg(got.grad_norm)
                                    .arg(want.grad_norm)));
            const double dl = std::abs(got.loss - want.loss) / std::abs(want.loss);
            worst_loss = std::max(worst_loss, dl);
            QVERIFY2(dl <= kTolerance, qPrintable(QString("iteration %1: loss %2, single process %3")
                                                       .arg(i + 1)
                                                       .arg(got.loss, 0, 'g', 12)
                                                       .arg(want.loss, 0, 'g', 12)));
            if (!std::isfinite(want.grad_norm)) continue;
            const double dn = std::abs(got.grad_norm - want.grad_norm) / std::abs(want.grad_norm);
            worst_norm = std::max(worst_norm, dn);
            QVERIFY2(dn <= kTolerance, qPrintable(QString("iteration %1: gradient norm %2, single process %3")
                                                       .arg(i + 1)
                                                       .arg(got.grad_norm, 0, 'g', 12)
                                                       .arg(want.grad_norm, 0, 'g', 12)));
        }
        qInfo("%s: worst relative difference of the loss %.2e, of the gradient norm %.2e (tolerance %.1e)",
              QTest::currentDataTag(), worst_loss, worst_norm, kTolerance);
    }
};

QTEST_GUILESS_MAIN(TestF16Gradients)
#include "test_f16_gradients.moc"
