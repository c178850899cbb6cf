// How often a training step hands device results to the host (docs/gpu.md, "No host synchronisation
// inside a step"): OpContext::host_reads counts every op that returns a value, and a whole TrainStep
// (pipeline schedule with gradient accumulation, gradient reduction, gradient norm, clipping, the fp16
// inf/NaN check, AdamW) must count one per iteration on every rank: the end of the step's read of
// the global Σ x² (the norm for telemetry, the skip for the loss scaler) together with the loss sum
// the pipeline accumulated on the device (the last stage's micro-batch losses). The CPU path runs the
// same calls as the GPU path, so the count is the GPU's number of such synchronisations. Single
// process here, and TP2 × PP2 as four real mpirun ranks (this binary again, with --ranks-child).
#include "parallel/mpi_runs.h"
#include "support/fixtures.h"

#include "backend/config/validate.h"
#include "backend/data/mock_data.h"
#include "backend/train/interval_stats.h"
#include "backend/train/progress.h"
#include "backend/train/run_objects.h"
#include "backend/train/train_step.h"

#include <QProcess>
#include <QtTest>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace mwb;

namespace {

constexpr int kIterations = 3;
constexpr int kMicroBatches = 2;  // global batch 4 / micro batch 2, no data parallelism

/// test_training's tiny GPT with two micro-batches per iteration (gradient accumulation) and clipping
/// tight enough that it applies.
Config tiny_config(const std::string& precision, double initial_loss_scale, int tp, int pp) {
    Config c;
    c.model.num_layers = 4;
    c.model.hidden_size = 32;
    c.model.num_attention_heads = 4;
    c.model.seq_length = 16;
    c.model.make_vocab_size_divisible_by = 64;
    c.model.vocab_size = 128;
    c.data.tokenizer_type = "NullTokenizer";
    c.data.mock_data = true;
    c.training.micro_batch_size = 2;
    c.training.global_batch_size = 4;
    c.training.train_iters = kIterations;
    c.training.lr = 1e-3;
    c.training.clip_grad = 0.05;
    c.training.fp16 = precision == "fp16";
    c.training.bf16 = precision == "bf16";
    c.training.initial_loss_scale = initial_loss_scale;
    c.parallel.tensor_model_parallel_size = tp;
    c.parallel.pipeline_model_parallel_size = pp;
    resolve(c, tp * pp, 128);
    check_config(c, tp * pp);
    return c;
}

struct StepReads {
    std::vector<int64_t> reads;  // per iteration
    Progress progress;
    std::vector<double> losses;  // per iteration: the mean loss that one read brought back
};

/// kIterations training steps of `c` on this process's ranks; the host reads of each.
StepReads run_steps(const Config& c) {
    int argc = 1;
    char name[] = "test_parallel_host_reads";
    char* args[] = {name, nullptr};
    char** argv = args;
    static World world(&argc, &argv);  // MPI is initialised once per process
    ParallelContext par(world, c.parallel);
    RunObjects o(c, par);
    const data::MockSampleSource train(c.model.seq_length, c.model.vocab_size, 1234, 0);
    IntervalLog log(c, par, o.alloc, o.flops, o.dims.seq, nullptr, false);
    TrainStep step(o, train, log, nullptr);
    StepReads r;
    for (int i = 0; i < kIterations; ++i) {
        const int64_t before = o.ctx.host_reads;
        const double loss_before = log.stats().loss;
        step.run(r.progress);
        r.reads.push_back(o.ctx.host_reads - before);
        r.losses.push_back(log.stats().loss - loss_before);
    }
    return r;
}

/// The rows both modes know: precision, initial loss scale (2^40 overflows fp16: skipped steps).
struct Row {
    const char* name;
    const char* precision;
    double initial_loss_scale;
};
constexpr Row kRows[] = {{"fp16, overflowing: skipped", "fp16", 1099511627776.0},
                         {"fp16, clipped", "fp16", 1024.0},
                         {"bf16, clipped", "bf16", 1.0},
                         {"fp32, clipped", "fp32", 1.0}};

/// Under mpirun: every row on TP2 × PP2, one line per rank and row ("reads r1 r2 r3 skipped s"), exit
/// status 0 when every step read as often as its stage should.
int ranks_child() {
    bool ok = true;
    for (const Row& row : kRows) {
        const StepReads r = run_steps(tiny_config(row.precision, row.initial_loss_scale, 2, 2));
        std::string line = std::string(row.name) + ": reads";
        for (int64_t n : r.reads) {
            line += " " + std::to_string(n);
            ok = ok && n == 1;
        }
        // Every rank logs the iteration's mean loss (a tiny GPT on 128 words starts near ln 128).
        for (double l : r.losses) ok = ok && std::isfinite(l) && l > 3.0 && l < 6.0;
        std::printf("%s; skipped %lld\n", line.c_str(), static_cast<long long>(r.progress.skipped));
    }
    std::fflush(stdout);
    return ok ? 0 : 1;
}

}  // namespace

class TestHostReads : public QObject {
    Q_OBJECT
private slots:
    void a_training_step_reads_its_results_once_data() {
        QTest::addColumn<int>("row");
        for (int i = 0; i < static_cast<int>(std::size(kRows)); ++i) QTest::newRow(kRows[i].name) << i;
    }
    void a_training_step_reads_its_results_once() {
        QFETCH(int, row);
        const Row& r = kRows[row];
        const StepReads s = run_steps(tiny_config(r.precision, r.initial_loss_scale, 1, 1));
        QCOMPARE(s.reads, std::vector<int64_t>(kIterations, 1));
        // The loss came back with it: the mean over the micro-batches, near ln 128 for a fresh model.
        for (double l : s.losses) QVERIFY2(l > 3.0 && l < 6.0, qPrintable(QString::number(l)));
        const bool overflowing = r.initial_loss_scale > 1e9;
        // The device's decisions reached the host through that one read: the skips, and the clip.
        QCOMPARE(s.progress.skipped, overflowing ? int64_t{kIterations} : int64_t{0});
        if (!overflowing) QVERIFY2(s.progress.last_grad_norm > 0.05, "the clip applies (norm above clip_grad)");
    }

    void tp2_pp2_ranks_read_their_results_once() {
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        test::start_ranks(p, 4, QCoreApplication::applicationFilePath(), {"--ranks-child"});
        QVERIFY(p.waitForFinished(240000));
        const QString out = p.readAll();
        QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0, qPrintable(out));
        for (const Row& row : kRows)  // every step, on all four ranks: once
            QCOMPARE(out.count(QString("%1: reads 1 1 1;").arg(row.name)), 4);
        QCOMPARE(out.count(QString("fp16, overflowing: skipped: reads 1 1 1; skipped 3")), 4);
    }
};

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "--ranks-child") == 0) return ranks_child();
    QCoreApplication app(argc, argv);
    TestHostReads t;
    return QTest::qExec(&t, argc, argv);
}

#include "test_host_reads.moc"
