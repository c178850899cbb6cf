// 3D parallelism for a Llama-family model (RoPE with Llama 3.1 scaling on half of each head, SwiGLU,
// grouped-query attention with 2 key/value groups of 4 heads, RMSNorm, no biases, untied output): real
// `mpirun -np N mwb-train` processes on loopback. Under each layout the losses AND the gradient norms of
// 20 iterations must match the single process to 1e-5 relative (a gradient summed where it should be
// averaged, or a key/value head split wrongly, changes the norm even where Adam hides it from the
// loss), every tensor of the final checkpoint (weights, Adam moments) must be within 1e-5 relative L2
// of the single process's (final_state.h), every rank's bytes per group and memory by category equal
// layout_formulas.h for the Llama choices, and a checkpoint resharded TP2×PP2 -> TP1×PP1 -> TP2×PP2
// continues with the same losses. (TP 4 is not a layout of this model: 2 key/value groups.)
#include "final_state.h"
#include "layout_checks.h"
#include "support/fixtures.h"
#include "support/suite.h"

#include <QtTest>

namespace test_parallel_llama_equivalence {

namespace fs = std::filesystem;
using namespace mwb::test;

namespace {

constexpr int kIterations = 20;
constexpr int kGlobalBatch = 8;
// The model of model_args() for layout_formulas.h (vocabulary 255 padded to 256).
const ModelSpec kModel{.layers = 4, .hidden = 32, .heads = 4, .ffn = 48, .seq = 16, .micro_batch = 2,
                       .vocab = 256, .max_positions = 16, .micro_batches = 0, .groups = 2, .swiglu = true,
                       .rmsnorm = true, .linear_bias = false, .learned_positions = false, .tied_output = false};

QStringList model_args(const fs::path& run_dir) {
    return {"--mock-data",
            "--tokenizer-type",
            "NullTokenizer",
            "--vocab-size",
            "256",
            "--make-vocab-size-divisible-by",
            "64",
            "--num-layers",
            "4",
            "--hidden-size",
            "32",
            "--num-attention-heads",
            "4",
            "--group-query-attention",
            "--num-query-groups",
            "2",
            "--swiglu",
            "--ffn-hidden-size",
            "48",
            "--position-embedding-type",
            "rope",
            "--rotary-percent",
            "0.5",
            "--use-rope-scaling",
            "--rotary-base",
            "500000",
            "--normalization",
            "RMSNorm",
            "--untie-embeddings-and-output-weights",
            "--add-bias-linear",
            "false",
            "--seq-length",
            "16",
            "--micro-batch-size",
            "2",
            "--global-batch-size",
            QString::number(kGlobalBatch),
            "--train-iters",
            QString::number(kIterations),
            "--lr",
            "2e-3",
            "--lr-warmup-iters",
            "2",
            "--log-interval",
            "1",
            "--eval-interval",
            "0",
            "--threads",
            "1",
            "--run-dir",
            QString::fromStdString(run_dir.string())};
}

}  // namespace

class TestLlamaEquivalence : public QObject {
    Q_OBJECT

    TempDir tmp_;
    std::vector<Step> reference_;  // the single process
    GlobalTensors reference_state_;

    /// steps[i] against reference_[first + i]: loss, and the gradient norm unless only losses are kept.
    void check(const std::vector<Step>& steps, std::size_t first, std::size_t count, const QString& what) {
        QCOMPARE(steps.size(), count);
        for (std::size_t i = 0; i < count; ++i) {
            const Step& want = reference_[first + i];
            QVERIFY2(std::abs(steps[i].loss - want.loss) <= 1e-5 * std::abs(want.loss),
                     qPrintable(QString("%1, iteration %2: loss %3, single process %4")
                                    .arg(what)
                                    .arg(first + i + 1)
                                    .arg(steps[i].loss, 0, 'g', 12)
                                    .arg(want.loss, 0, 'g', 12)));
            QVERIFY2(std::abs(steps[i].grad_norm - want.grad_norm) <= 1e-5 * std::abs(want.grad_norm),
                     qPrintable(QString("%1, iteration %2: gradient norm %3, single process %4")
                                    .arg(what)
                                    .arg(first + i + 1)
                                    .arg(steps[i].grad_norm, 0, 'g', 12)
                                    .arg(want.grad_norm, 0, 'g', 12)));
        }
    }

private slots:
    void initTestCase() {
        QString log;
        QVERIFY2(run_train(1, model_args(tmp_ / "single") + save_args(tmp_ / "single"), log) == 0, qPrintable(log));
        reference_ = steps_of(tmp_ / "single");
        reference_state_ = final_state(tmp_ / "single" / "ckpt");
        QVERIFY(reference_state_.contains("param/output_layer.weight"));  // untied
        QCOMPARE(static_cast<int>(reference_.size()), kIterations);
    }

    void layouts_match_single_process_data() {
        add_layout_columns();
        QTest::newRow("tp2_sp") << 2 << 1 << 1 << 1 << true << false << "";
        QTest::newRow("tp2_full_recompute") << 2 << 1 << 1 << 1 << false << false << "full";
        QTest::newRow("pp2_1f1b") << 1 << 2 << 1 << 1 << false << false << "";
        QTest::newRow("pp2_interleaved") << 1 << 2 << 1 << 2 << false << false << "";
        QTest::newRow("dp2_distopt") << 1 << 1 << 2 << 1 << false << true << "";
        QTest::newRow("dp4") << 1 << 1 << 4 << 1 << false << false << "";
        QTest::newRow("pp2_dp2_interleaved_distopt") << 1 << 2 << 2 << 2 << false << true << "";
        QTest::newRow("tp2_pp2_dp2_sp_distopt_selective") << 2 << 2 << 2 << 1 << true << true << "selective";
    }
    void layouts_match_single_process() {
        const LayoutSpec l = fetch_layout();
        const fs::path dir = tmp_ / QTest::currentDataTag();
        QString log;
        QVERIFY2(run_train(l.tp * l.pp * l.dp, model_args(dir) + layout_args(l, kModel.layers) + save_args(dir), log) == 0,
                 qPrintable(log));
        check(steps_of(dir), 0, kIterations, QTest::currentDataTag());
        if (QTest::currentTestFailed()) return;
        const GlobalTensors state = final_state(dir / "ckpt");
        const std::string diff = compare_states(state, reference_state_, 1e-5);  // no biases: no key bias to drop
        QVERIFY2(diff.empty(), qPrintable(QString::fromStdString(diff)));
        qInfo("final weights and Adam moments within %.2g relative L2", max_distance(state, reference_state_));

        // Every rank's traffic per group and memory by category, against the formulas.
        ModelSpec m = kModel;
        m.micro_batches = kGlobalBatch / (m.micro_batch * l.dp);
        verify_ranks_against_formulas(dir, m, l);
    }

    void checkpoints_reshard_there_and_back() {
        // TP2×PP2 trains 10 iterations and saves; TP1×PP1 loads it, trains 5 more and saves; TP2×PP2 loads
        // that and finishes: every continued iteration equals the uninterrupted single process (the
        // learning-rate schedule decays over 20 iterations throughout).
        const QStringList tp2pp2{"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"};
        const auto q = [](const fs::path& p) { return QString::fromStdString(p.string()); };
        const fs::path a = tmp_ / "ckpt_tp2pp2", b = tmp_ / "ckpt_tp1pp1";
        QString log;
        QStringList first = model_args(tmp_ / "save") + tp2pp2;
        first << "--train-iters"
              << "10"
              << "--lr-decay-iters"
              << "20"
              << "--save" << q(a);
        QVERIFY2(run_train(4, first, log) == 0, qPrintable(log));
        QVERIFY(fs::exists(a / "iter_0000010" / "tp01_pp01.bin"));

        QStringList second = model_args(tmp_ / "resume_tp1pp1");
        second << "--train-iters"
               << "15"
               << "--lr-decay-iters"
               << "20"
               << "--load" << q(a) << "--save" << q(b);
        QVERIFY2(run_train(1, second, log) == 0, qPrintable(log));
        check(steps_of(tmp_ / "resume_tp1pp1"), 10, 5, "TP2×PP2 -> TP1×PP1");

        QStringList third = model_args(tmp_ / "resume_tp2pp2") + tp2pp2;
        third << "--load" << q(b);
        QVERIFY2(run_train(4, third, log) == 0, qPrintable(log));
        check(steps_of(tmp_ / "resume_tp2pp2"), 15, 5, "TP1×PP1 -> TP2×PP2");
    }
};

MWB_TEST_SUITE_GUILESS(test_parallel_llama_equivalence, TestLlamaEquivalence)
}  // namespace test_parallel_llama_equivalence
#include "test_llama_equivalence.moc"
