// The acceptance test of 3D parallelism: real `mpirun -np N mwb-train` processes on loopback. For a
// fixed seed and global batch, the losses and gradient norms of 20 iterations under each layout
// (tensor, sequence, pipeline with and without interleaving, data parallel, distributed optimizer,
// recomputation; TP 4 and DP 4) must match the single-process run to 1e-5 relative (dropout on: masks
// are drawn by global index), every tensor of the final checkpoint (weights and Adam moments) must be
// within 1e-5 relative L2 of the single process's (final_state.h), and every rank's measured bytes per
// group and memory by category must equal layout_formulas.h. An untied-output RMSNorm GPT repeats the
// comparison under TP and PP against its own single process.
// ctest runs it twice: with MPI's point-to-point semantics, and with NCCL's (MWB_P2P_SEMANTICS=nccl,
// test_parallel_equivalence_nccl_p2p), the message order the GPU path relies on.
#include "final_state.h"
#include "layout_checks.h"
#include "support/fixtures.h"
#include "support/suite.h"

#include <QtTest>

namespace test_parallel_equivalence {

namespace fs = std::filesystem;
using namespace mwb::test;

namespace {

const ModelSpec kModel{.layers = 4, .hidden = 32, .heads = 4, .ffn = 128, .seq = 16, .micro_batch = 2,
                       .vocab = 256, .max_positions = 16, .micro_batches = 0};
constexpr int kGlobalBatch = 8;
constexpr int kIterations = 20;

QStringList model_args(const fs::path& run_dir) {
    return {"--preset", "tiny-cpu-demo", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "256",
            "--make-vocab-size-divisible-by", "64", "--num-layers", "4", "--hidden-size", "32",
            "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size",
            QString::number(kGlobalBatch), "--train-iters", QString::number(kIterations), "--lr", "2e-3",
            "--lr-warmup-iters", "2", "--log-interval", "1", "--eval-interval", "10", "--eval-iters", "1",
            "--threads", "1", "--run-dir", QString::fromStdString(run_dir.string())};
}

/// Weights and Adam moments after 20 iterations: reduction-order rounding, amplified where Adam divides
/// by a small second moment, stays below 1e-5 relative L2 (measured: up to ~1e-6); a wrong reduction
/// is O(1).
constexpr double kStateTolerance = 1e-5;

}  // namespace

class TestEquivalence : public QObject {
    Q_OBJECT

    TempDir tmp_;
    std::vector<double> reference_;  // single-process losses
    std::vector<Step> reference_steps_;
    GlobalTensors reference_state_;
    std::vector<Step> untied_steps_;  // the untied RMSNorm model's single process
    GlobalTensors untied_state_;
    double reference_eval_ = 0;

    /// Step losses equal the single process's: the same model trained on the same samples with the
    /// same dropout masks.
    void check_losses(const std::vector<nlohmann::json>& steps) {
        QCOMPARE(static_cast<int>(steps.size()), kIterations);
        for (int i = 0; i < kIterations; ++i) {
            const double got = steps[static_cast<std::size_t>(i)]["lm_loss"];
            QVERIFY2(std::abs(got - reference_[i]) <= 1e-5 * std::abs(reference_[i]),
                     qPrintable(QString("iteration %1: loss %2, single process %3")
                                    .arg(i + 1)
                                    .arg(got, 0, 'g', 12)
                                    .arg(reference_[i], 0, 'g', 12)));
        }
    }

    /// Losses and gradient norms of every iteration, and the final weights and Adam moments, equal
    /// `want`'s (a gradient summed where it should be averaged changes the norm even where Adam's
    /// normalisation hides it from the loss; a shard updated with another shard's gradient shows in the
    /// weights).
    static void check_run(const fs::path& dir, const std::vector<Step>& want, const GlobalTensors& want_state,
                          const QString& what) {
        const auto steps = steps_of(dir);
        QCOMPARE(steps.size(), want.size());
        for (std::size_t i = 0; i < steps.size(); ++i) {
            QVERIFY2(std::abs(steps[i].loss - want[i].loss) <= 1e-5 * std::abs(want[i].loss),
                     qPrintable(QString("%1, iteration %2: loss %3, single process %4")
                                    .arg(what)
                                    .arg(i + 1)
                                    .arg(steps[i].loss, 0, 'g', 12)
                                    .arg(want[i].loss, 0, 'g', 12)));
            QVERIFY2(std::abs(steps[i].grad_norm - want[i].grad_norm) <= 1e-5 * std::abs(want[i].grad_norm),
                     qPrintable(QString("%1, iteration %2: gradient norm %3, single process %4")
                                    .arg(what)
                                    .arg(i + 1)
                                    .arg(steps[i].grad_norm, 0, 'g', 12)
                                    .arg(want[i].grad_norm, 0, 'g', 12)));
        }
        GlobalTensors state = final_state(dir / "ckpt");
        drop_key_bias(state, kModel.heads, 1, kModel.hidden / kModel.heads);
        const std::string diff = compare_states(state, want_state, kStateTolerance);
        QVERIFY2(diff.empty(), qPrintable(what + ": " + QString::fromStdString(diff)));
        qInfo("%s: final weights and Adam moments within %.2g relative L2 of the single process", qPrintable(what),
              max_distance(state, want_state));
    }

private slots:
    void initTestCase() {
        QString log;
        QVERIFY2(run_train(1, model_args(tmp_ / "single") + save_args(tmp_ / "single"), log) == 0, qPrintable(log));
        for (const auto& r : records(tmp_ / "single", "step")) reference_.push_back(r["lm_loss"]);
        QCOMPARE(static_cast<int>(reference_.size()), kIterations);
        reference_steps_ = steps_of(tmp_ / "single");
        reference_state_ = final_state(tmp_ / "single" / "ckpt");
        drop_key_bias(reference_state_, kModel.heads, 1, kModel.hidden / kModel.heads);
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
        QTest::newRow("tp4_pp1_dp1_sp") << 4 << 1 << 1 << 1 << true << false << "";
        QTest::newRow("tp1_pp1_dp4") << 1 << 1 << 4 << 1 << false << false << "";
        QTest::newRow("tp1_pp1_dp4_distopt") << 1 << 1 << 4 << 1 << false << true << "";
        QTest::newRow("tp1_pp2_dp2_interleaved_distopt") << 1 << 2 << 2 << 2 << false << true << "";
    }

    void layouts_match_single_process() {
        const LayoutSpec l = fetch_layout();
        const fs::path dir = tmp_ / QTest::currentDataTag();
        QString log;
        QVERIFY2(run_train(l.tp * l.pp * l.dp, model_args(dir) + layout_args(l, kModel.layers) + save_args(dir), log) == 0,
                 qPrintable(log));

        // Losses, gradient norms and the final state: the same model trained on the same samples with
        // the same dropout masks.
        check_run(dir, reference_steps_, reference_state_, QTest::currentDataTag());
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

    void untied_rmsnorm_gpt_matches_its_single_process_data() {
        QTest::addColumn<int>("ranks");
        QTest::addColumn<QStringList>("layout");
        QTest::newRow("tp2_sp") << 2 << QStringList{"--tensor-model-parallel-size", "2", "--sequence-parallel"};
        QTest::newRow("tp4") << 4 << QStringList{"--tensor-model-parallel-size", "4"};
        // The classifier in chunks of 5 rows (128 words a rank): the vocabulary-parallel statistics
        // reduced over the tensor group chunk by chunk, against the single process's one chunk.
        QTest::newRow("tp2_sp_logits_in_chunks") << 2 << QStringList{"--tensor-model-parallel-size", "2",
                                                                     "--sequence-parallel", "--logits-chunk-bytes",
                                                                     "2560"};
        QTest::newRow("pp2") << 2 << QStringList{"--pipeline-model-parallel-size", "2"};
        QTest::newRow("pp2_interleaved") << 2 << QStringList{"--pipeline-model-parallel-size", "2",
                                                             "--num-layers-per-virtual-pipeline-stage", "1"};
    }

    void untied_rmsnorm_gpt_matches_its_single_process() {
        // RMSNorm (no norm biases) and a separate output layer: the output layer's gradient is reduced
        // on the last stage only, the embedding's on the first, and neither with the other.
        QFETCH(int, ranks);
        QFETCH(QStringList, layout);
        const QStringList model{"--normalization", "RMSNorm", "--untie-embeddings-and-output-weights"};
        if (untied_steps_.empty()) {
            const fs::path single = tmp_ / "untied_single";
            QString log;
            QVERIFY2(run_train(1, model_args(single) + model + save_args(single), log) == 0, qPrintable(log));
            untied_steps_ = steps_of(single);
            untied_state_ = final_state(single / "ckpt");
            drop_key_bias(untied_state_, kModel.heads, 1, kModel.hidden / kModel.heads);
            QVERIFY(untied_state_.contains("param/output_layer.weight"));
            QVERIFY(!untied_state_.contains("param/decoder.final_layernorm.bias"));
        }
        const fs::path dir = tmp_ / (std::string("untied_") + QTest::currentDataTag());
        QString log;
        QVERIFY2(run_train(ranks, model_args(dir) + model + layout + save_args(dir), log) == 0, qPrintable(log));
        check_run(dir, untied_steps_, untied_state_, QString("untied RMSNorm ") + QTest::currentDataTag());
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

MWB_TEST_SUITE_GUILESS(test_parallel_equivalence, TestEquivalence)
}  // namespace test_parallel_equivalence
#include "test_equivalence.moc"
