// --fp16 without --accumulate-allreduce-grads-in-fp32 under mpirun: the gradient arena is f16 (each op's
// fp32 sum rounded into it once per call), the data-parallel all-reduce and the distributed optimizer's
// reduce-scatter move f16 (2 bytes an element; each pairwise combine an fp32 add rounded once), the
// sequence-parallel norm gradients are summed in f16 too. Each layout's losses and gradient norms must
// match the single process's within kTolerance: the layouts round the f16 sums at other points (a rank's
// micro-batches, then the ranks' sum; the single process every micro-batch in turn), u = 2^-11 relative
// per element, which moves the norm by a fraction of u and the loss, through Adam, by less. A reduction
// that drops, doubles or mis-scales a rank's contribution moves the norm by O(1). The loss scale is
// 2^12, clear of fp16's range: near its edge (where dynamic scaling settles) whether a step overflows
// depends on the layout, as in Megatron-LM (a rank's arena holds its own micro-batches' mean, which may
// exceed the global one), so no step may be skipped here; test_optim covers an overflow in the arena.
#include "mpi_runs.h"
#include "support/fixtures.h"
#include "support/suite.h"

#include <QtTest>

#include <cmath>

namespace test_parallel_f16_gradients {

namespace fs = std::filesystem;
using namespace mwb::test;

namespace {

constexpr int kIterations = 12;
/// Relative tolerance of losses and gradient norms against the single process (measured: see the
/// qInfo of each row; the worst was 7.1e-5 for the norm, 1.7e-6 for the loss, on all three rows).
constexpr double kTolerance = 5e-4;

QStringList args(const fs::path& run_dir) {
    return {"--preset", "tiny-cpu-demo", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "256",
            "--make-vocab-size-divisible-by", "64", "--num-layers", "2", "--hidden-size", "32",
            "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "8",
            "--train-iters", QString::number(kIterations), "--lr", "2e-3", "--lr-warmup-iters", "2",
            "--log-interval", "1", "--eval-interval", "100", "--eval-iters", "1", "--threads", "1", "--fp16",
            "--initial-loss-scale", "4096", "--run-dir",
            QString::fromStdString(run_dir.string())};
}

/// Each step's loss and gradient norm; a skipped step's norm (not finite) is written as null: NaN here.
std::vector<Step> steps_with_skips(const fs::path& dir) {
    std::vector<Step> s;
    for (const auto& r : records(dir, "step"))
        s.push_back({r["lm_loss"], r["grad_norm"].is_null() ? std::nan("") : r["grad_norm"].get<double>()});
    return s;
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
        single_ = steps_with_skips(tmp_ / "single");
        QCOMPARE(static_cast<int>(single_.size()), kIterations);
        for (const Step& s : single_) QVERIFY2(std::isfinite(s.grad_norm), "a step of the single process was skipped");
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
        const std::vector<Step> steps = steps_with_skips(dir);
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

MWB_TEST_SUITE_GUILESS(test_parallel_f16_gradients, TestF16Gradients)
}  // namespace test_parallel_f16_gradients
#include "test_f16_gradients.moc"
