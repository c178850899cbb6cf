// The acceptance test of 3D parallelism: real `mpirun -np N mwb-train` processes on loopback. For a
// fixed seed and global batch, the losses of 20 iterations under each layout (tensor, sequence,
// pipeline with and without interleaving, data parallel, distributed optimizer, recomputation) must
// match the single-process run to 1e-5 relative (dropout on: masks are drawn by global index), and
// every rank's measured bytes per group and memory by category must equal layout_formulas.h.
// ctest runs it twice: with MPI's point-to-point semantics, and with NCCL's (MWB_P2P_SEMANTICS=nccl,
// test_parallel_equivalence_nccl_p2p), the message order the GPU path relies on.
#include "layout_checks.h"
#include "support/fixtures.h"

#include <QtTest>

namespace fs = std::filesystem;
using namespace mwb::test;

namespace {

const ModelSpec kModel{.layers = 4, .hidden = 32, .heads = 4, .ffn = 128, .seq = 16, .micro_batch = 2,
                       .vocab = 256, .max_positions = 16, .micro_batches = 0};
constexpr int kGlobalBatch = 8;
constexpr int kIterations = 20;

QStringList model_args(const fs::path& run_dir) {
    return {"--preset", "tiny-cpu-demo", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "255",
            "--make-vocab-size-divisible-by", "64", "--num-layers", "4", "--hidden-size", "32",
            "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size",
            QString::number(kGlobalBatch), "--train-iters", QString::number(kIterations), "--lr", "2e-3",
            "--lr-warmup-iters", "2", "--log-interval", "1", "--eval-interval", "10", "--eval-iters", "1",
            "--threads", "1", "--run-dir", QString::fromStdString(run_dir.string())};
}

}  // namespace

class TestEquivalence : public QObject {
    Q_OBJECT

    TempDir tmp_;
    std::vector<double> reference_;  // single-process losses
    double reference_eval_ = 0;

    /// Step losses equal the single process's: the same model trained on the same samples with the
    /// same dropout masks.
    void check_losses(const std::vector<nlohmann::json>& steps) {
        QCOMPARE(static_cast<int>(steps.size()), kIterations);
        for (int i = 0; i < kIterations; ++i) {
            const double got = steps[static_cast<std::size_t>(i)]["lm_loss"];
            QVERIFY2(std::abs(got - reference_[i]) <= 1e-5 * std::abs(reference_[i]),
                     qPrintable(QString("iteration %1: loss %2, single process %3").arg(i + 1).arg(got, 0, 'g', 12)
                                    .arg(reference_[i], 0, 'g', 12)));
        }
    }

private slots:
    void initTestCase() {
        QString log;
        QVERIFY2(run_train(1, model_args(tmp_ / "single"), log) == 0, qPrintable(log));
        for (const auto& r : records(tmp_ / "single", "step")) reference_.push_back(r["lm_loss"]);
        QCOMPARE(static_cast<int>(reference_.size()), kIterations);
        reference_eval_ = records(tmp_ / "single", "eval").back()["lm_loss"];
    }

    void layouts_match_single_process_data() {
        add_layout_columns();
        QTest::newRow("tp2_pp1_dp1") << 2 << 1 << 1 << 1 << false << false << "";
        QTest::newRow("tp1_pp2_dp1") << 1 << 2 << 1 << 1 << false << false << "";
        QTest::newRow("tp1_pp1_dp2") << 1 << 1 << 2 << 1 << false << false << "";
        QTest::newRow("tp2_pp2_dp2") << 2 << 2 << 2 << 1 << false << false << "";
        QTest::newRow("tp2_pp1_dp1_sp") << 2 << 1 << 1 << 1 << true << false << "";
        QTest::newRow("tp2_pp2_dp2_sp") << 2 << 2 << 2 << 1 << true << false << "";
        QTest::newRow("tp1_pp2_dp1_interleaved") << 1 << 2 << 1 << 2 << false << false << "";
        QTest::newRow("tp2_pp2_dp1_interleaved_sp") << 2 << 2 << 1 << 2 << true << false << "";
        QTest::newRow("tp1_pp1_dp2_distopt") << 1 << 1 << 2 << 1 << false << true << "";
        QTest::newRow("tp2_pp2_dp2_sp_distopt_selective") << 2 << 2 << 2 << 1 << true << true << "selective";
        QTest::newRow("tp2_pp2_dp2_full_recompute") << 2 << 2 << 2 << 1 << false << false << "full";
    }

    void layouts_match_single_process() {
        const LayoutSpec l = fetch_layout();
        const fs::path dir = tmp_ / QTest::currentDataTag();
        QString log;
        QVERIFY2(run_train(l.tp * l.pp * l.dp, model_args(dir) + layout_args(l, kModel.layers), log) == 0,
                 qPrintable(log));

        // Losses: the same model trained on the same samples with the same dropout masks.
        const auto steps = records(dir, "step");
        check_losses(steps);
        if (QTest::currentTestFailed()) return;
        const double eval = records(dir, "eval").back()["lm_loss"];
        QVERIFY2(std::abs(eval - reference_eval_) <= 1e-5 * reference_eval_, "validation loss");

        // Every rank's traffic per group and memory by category, against the formulas.
        ModelSpec m = kModel;
        m.micro_batches = kGlobalBatch / (m.micro_batch * l.dp);
        verify_ranks_against_formulas(dir, m, l);
    }

    void deeper_and_interleaved_pipelines_match_single_process_data() {
        QTest::addColumn<int>("pp");
        QTest::addColumn<int>("dp");
        QTest::addColumn<int>("chunks");
        QTest::newRow("pp4") << 4 << 1 << 1;
        QTest::newRow("pp2_dp2_interleaved") << 2 << 2 << 2;
    }

    void deeper_and_interleaved_pipelines_match_single_process() {
        // More pipeline message patterns for the NCCL-semantics run of this suite (ctest
        // test_parallel_equivalence_nccl_p2p, MWB_P2P_SEMANTICS=nccl): no tags, sends that complete only
        // when received, one call at a time per group. A schedule whose messages would deadlock or pair
        // up wrongly on GPUs hangs or trains a different model there.
        QFETCH(int, pp);
        QFETCH(int, dp);
        QFETCH(int, chunks);
        const LayoutSpec l{.tp = 1, .pp = pp, .dp = dp, .chunks = chunks};
        const fs::path dir = tmp_ / (std::string("more_") + QTest::currentDataTag());
        QString log;
        QVERIFY2(run_train(pp * dp, model_args(dir) + layout_args(l, kModel.layers), log) == 0, qPrintable(log));
        check_losses(records(dir, "step"));
    }

    void pipeline_stages_hold_the_1f1b_micro_batches() {
        // 1F1B keeps up to P - r micro-batches in flight on stage r: the first stage's activations peak
        // above the last stage's (PP 4, 8 micro-batches, one layer per stage).
        const LayoutSpec l{.tp = 1, .pp = 4, .dp = 1};
        const fs::path dir = tmp_ / "pp4";
        QString log;
        QStringList args = model_args(dir);
        args << "--pipeline-model-parallel-size" << "4" << "--global-batch-size" << "16" << "--train-iters" << "3";
        QVERIFY2(run_train(4, args, log) == 0, qPrintable(log));
        const auto memory_records = records(dir, "memory");
        const auto& memory = memory_records.back()["ranks"];
        ModelSpec m = kModel;
        const int64_t layer = layer_activations(m, l) * 4;
        for (int r = 0; r < 3; ++r) {
            const int64_t peak = memory[r]["by_category"]["activations"]["peak"];
            // Stage r holds P - r micro-batches' layer activations at its peak, plus outputs whose
            // non-blocking sends to the next stage have not completed yet (at most P of them).
            const int64_t held = (4 - r) * layer;
            QVERIFY2(peak >= held && peak <= held + 4 * m.seq * m.micro_batch * m.hidden * 4,
                     qPrintable(QString("stage %1: activation peak %2, expected %3 micro-batches = %4")
                                    .arg(r).arg(peak).arg(4 - r).arg(held)));
        }
    }

    void wrong_world_size_stops_every_rank_with_one_message() {
        QString log;
        const int code = run_train(3, model_args(tmp_ / "wrong") + QStringList{"--tensor-model-parallel-size", "2"}, log);
        QVERIFY2(code != 0, qPrintable(log));
        QCOMPARE(log.count("must divide the number of ranks (3)"), 1);
        QVERIFY(!fs::exists(tmp_ / "wrong" / "metrics.jsonl"));
    }

    void checkpoints_reshard_across_layouts() {
        // Save under TP 2 x PP 2 x DP 2 with the distributed optimizer, resume under other layouts:
        // the continued losses equal the uninterrupted single-process run's.
        const fs::path save = tmp_ / "ckpt";
        QString log;
        QStringList first = model_args(tmp_ / "save") +
                            layout_args({.tp = 2, .pp = 2, .dp = 2, .distributed_optimizer = true}, kModel.layers);
        // Stop at 10 of the reference's 20 iterations (same learning-rate schedule: decay over 20).
        first << "--train-iters" << "10" << "--lr-decay-iters" << "20" << "--save" << QString::fromStdString(save.string());
        QVERIFY2(run_train(8, first, log) == 0, qPrintable(log));
        QVERIFY(fs::exists(save / "iter_0000010" / "tp01_pp01.bin"));
        const LayoutSpec targets[] = {{}, {.tp = 1, .pp = 2, .dp = 2}, {.tp = 2, .pp = 1, .dp = 1, .sp = true},
                                      {.tp = 1, .pp = 1, .dp = 2, .distributed_optimizer = true}};
        for (const LayoutSpec& l : targets) {
            const fs::path dir = tmp_ / fmt_layout(l);
            QStringList args = model_args(dir) + layout_args(l, kModel.layers);
            args << "--load" << QString::fromStdString(save.string());
            QVERIFY2(run_train(l.tp * l.pp * l.dp, args, log) == 0, qPrintable(log));
            const auto steps = records(dir, "step");
            QCOMPARE(static_cast<int>(steps.size()), kIterations - 10);
            for (std::size_t i = 0; i < steps.size(); ++i) {
                const double got = steps[i]["lm_loss"], want = reference_[10 + i];
                QVERIFY2(std::abs(got - want) <= 1e-5 * want,
                         qPrintable(QString("%1, iteration %2: %3 vs %4").arg(QString::fromStdString(fmt_layout(l)))
                                        .arg(11 + i).arg(got, 0, 'g', 12).arg(want, 0, 'g', 12)));
            }
        }
    }

private:
    static std::string fmt_layout(const LayoutSpec& l) {
        return "resume_tp" + std::to_string(l.tp) + "_pp" + std::to_string(l.pp) + "_dp" + std::to_string(l.dp) +
               (l.sp ? "_sp" : "") + (l.distributed_optimizer ? "_distopt" : "");
    }
};

QTEST_GUILESS_MAIN(TestEquivalence)
#include "test_equivalence.moc"
