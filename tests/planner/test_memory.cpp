// Memory per rank: Korthikanti et al. 2022's activation formulas (Table 2, first-stage memory, the
// interleaving factor) and hand-computed parameter, gradient and optimizer bytes of multi-rank layouts.
#include "published.h"

#include "mwb/ipc/schema.h"
#include "mwb/kernels/ops.h"
#include "mwb/planner/plan.h"
#include "mwb/planner/report.h"

#include "support/suite.h"

#include <QtTest>

namespace test_planner_memory {

using namespace mwb;
using namespace mwb::planner;

namespace {

constexpr int W = static_cast<int>(MemCategory::Weights), G = static_cast<int>(MemCategory::Gradients),
              O = static_cast<int>(MemCategory::Optimizer), A = static_cast<int>(MemCategory::Activations);

Plan plan_on(const Config& c, int gpus, Accounting accounting = Accounting::Engine) {
    PlanOptions o;
    o.accounting = accounting;
    Cluster cluster = test::dgx_a100(gpus);
    if (gpus < 8) cluster.gpus_per_node = gpus;
    Plan p = plan(c, cluster, o);
    if (!p.estimated)
        for (const auto& i : p.issues) qWarning("%s: %s", i.field.c_str(), i.message.c_str());
    return p;
}

/// Bytes one layer keeps on one rank, Megatron-LM accounting, from the planner's tensor table.
int64_t megatron_layer(const test::KorthikantiRow& r, bool sp, const char* recompute) {
    Config c = test::paper_gpt(r.layers, r.hidden, r.heads, r.tp, r.pp, r.batch, 1);
    c.parallel.sequence_parallel = sp;
    c.training.recompute_granularity = recompute;
    const Plan p = plan_on(c, r.gpus, Accounting::MegatronLM);
    const LayerBytes b = layer_bytes(p.model, p.layout, p.precision, Accounting::MegatronLM);
    return kept_layer_bytes(b, p.layout.recompute, true);
}

/// test::small_gpt with or without the distributed optimizer, in bf16 or fp32.
Config tiny(int tp, int pp, bool distributed_optimizer, bool bf16) {
    Config c = test::small_gpt(tp, pp);
    c.parallel.use_distributed_optimizer = distributed_optimizer;
    c.training.bf16 = bf16;
    return c;
}

}  // namespace

class TestPlannerMemory : public QObject {
    Q_OBJECT
private slots:
    // Table 2 of Korthikanti et al. 2022, bytes per layer per rank, for the models of their Table 3.
    void activation_bytes_per_layer_are_table2() {
        for (const auto& r : test::kKorthikanti) {
            const int64_t s = 2048, b = 1, h = r.hidden, a = r.heads, t = r.tp;
            const int64_t sbh = s * b * h, core = 5 * a * s * s * b;                     // 5as/h · sbh
            QCOMPARE(megatron_layer(r, false, ""), 10 * sbh + 24 * sbh / t + core / t);  // TP
            QCOMPARE(megatron_layer(r, true, ""), 34 * sbh / t + core / t);              // TP + SP
            QCOMPARE(megatron_layer(r, false, "selective"), 10 * sbh + 24 * sbh / t);    // TP + selective
            QCOMPARE(megatron_layer(r, true, "selective"), 34 * sbh / t);                // TP + SP + selective
            qInfo("| %s | %.1f | %.1f | %.1f | %.1f | %.1f |", r.name, (34.0 * sbh + 5.0 * a * s * s) / 1e6,
                  megatron_layer(r, false, "") / 1e6, megatron_layer(r, true, "") / 1e6,
                  megatron_layer(r, false, "selective") / 1e6, megatron_layer(r, true, "selective") / 1e6);
            // Full recomputation keeps each layer's input: 2sbh.
            Config c = test::paper_gpt(r.layers, r.hidden, r.heads, r.tp, r.pp, r.batch, 1);
            test::full_recompute(c);
            const Plan p = plan_on(c, r.gpus, Accounting::MegatronLM);
            QCOMPARE(kept_layer_bytes(layer_bytes(p.model, p.layout, p.precision, Accounting::MegatronLM),
                                      Recompute::FullUniform, true),
                     2 * sbh);
        }
        // Without any parallelism: sbh(34 + 5as/h).
        const auto& r = test::kKorthikanti[1];
        Config c = test::paper_gpt(r.layers, r.hidden, r.heads, 1, 1, 1, 1);
        const Plan p = plan_on(c, 1, Accounting::MegatronLM);
        const int64_t sbh = 2048LL * r.hidden;
        QCOMPARE(layer_bytes(p.model, p.layout, p.precision, Accounting::MegatronLM).all(),
                 34 * sbh + 5LL * r.heads * 2048 * 2048);
    }

    // "Reduces activation memory by 5x": TP baseline over TP + SP + selective, per layer. For their
    // models the ratio is (10 + 3 + 5as/(8h)) / 4.25: 6.2 (22B), 5.4 (175B), 4.9 (530B, 1T).
    void sequence_parallel_and_selective_save_about_5x() {
        for (const auto& r : test::kKorthikanti) {
            const double expected = (10 + 24.0 / r.tp + 5.0 * r.heads * 2048 / (r.hidden * r.tp)) / (34.0 / r.tp);
            const double ratio = static_cast<double>(megatron_layer(r, false, "")) /
                                 static_cast<double>(megatron_layer(r, true, "selective"));
            QVERIFY2(std::fabs(ratio - expected) < 1e-9, qPrintable(QString("%1: %2").arg(r.name).arg(ratio)));
            QVERIFY(ratio > 4.5 && ratio < 6.5);
        }
    }

    // First pipeline stage under 1F1B: p micro-batches in flight × L/p layers = all L layers' worth,
    // sbhL/t·(34 + 5as/h) with TP + SP (their section 4.2.3), and 34·sbhL/t with selective recompute. The
    // planner adds the first stage's embedding-dropout masks (sbh/t per micro-batch in flight).
    void first_stage_holds_all_layers_worth() {
        for (const auto& r : test::kKorthikanti) {
            Config c = test::paper_gpt(r.layers, r.hidden, r.heads, r.tp, r.pp, r.batch, 1);
            test::selective_sp(c);
            const Plan p = plan_on(c, r.gpus, Accounting::MegatronLM);
            const StageMemory& first = p.memory.front();
            QCOMPARE(first.in_flight, std::min(r.pp, r.batch));
            const double sbh = 2048.0 * r.hidden, L = r.layers, t = r.tp;
            const double formula = 34 * sbh * L / t;
            const double kept = static_cast<double>(first.in_flight) * static_cast<double>(first.kept_per_microbatch);
            const double masks = first.in_flight * sbh / t;
            QVERIFY2(std::fabs(kept - masks - formula) < 1, r.name);
            // The masks are 1/(34·L/p) of the formula: 0.06% (22B) to 1.5% (1T, 2 layers per stage).
            QVERIFY2(kept / formula - 1 <= 1.0 / (34.0 * r.layers / r.pp) + 1e-9, r.name);
            // Our engine keeps less (masks regenerated: 32sbh bytes + 8sb of fp32 statistics instead of
            // 34sbh, in 16-bit): what the planner predicts for mwb-train on these GPUs.
            const Plan engine = plan_on(c, r.gpus);
            const StageMemory& e = engine.memory.front();
            const double engine_kept = static_cast<double>(e.in_flight) * static_cast<double>(e.kept_per_microbatch);
            qInfo("| %s | %d | %.2f | %.2f (%+.2f%%) | %.2f (%+.1f%%) |", r.name, first.in_flight, formula / 1e9,
                  kept / 1e9, 100 * (kept / formula - 1), engine_kept / 1e9, 100 * (engine_kept / formula - 1));
        }
    }

    // Interleaved schedule (v chunks per rank): the first stage holds L·(1 + (p − 1)/(pv)) layers' worth.
    void interleaving_factor() {
        for (const auto& [pp, v] : {std::pair{4, 2}, std::pair{8, 3}, std::pair{2, 4}}) {
            Config c = test::paper_gpt(pp * v * 2, 1024, 16, 1, pp, 64, 1);
            c.parallel.num_layers_per_virtual_pipeline_stage = 2;
            const Plan p = plan_on(c, pp);
            QCOMPARE(p.layout.vp, v);
            const double layers_held = p.memory.front().in_flight * p.layout.layers_per_chunk;
            const double expected = c.model.num_layers * (1 + static_cast<double>(pp - 1) / (pp * v));
            QCOMPARE(layers_held, expected);
            QCOMPARE(p.memory.back().in_flight, (v - 1) * pp + 1);
        }
    }

    // tp2_pp2_dp2, hand-computed. Per layer on a TP rank (every tensor padded to a multiple of 64
    // elements): norms 4·64 (32 each), QKV 48·32 + 64 (48), proj 32·16 + 64 (32), fc1 64·32 + 64,
    // fc2 32·64 + 64 (32) = 6656 elements.
    // Vocabulary 128 ids padded to 256 (128 × TP): word embedding shard 128·32 = 4096, positions 16·32.
    // Stage 0: 4096 + 512 + 2·6656 = 17920; stage 1: 2·6656 + final norm 2·64 + the tied copy of the word
    // embedding 4096 = 17536. bf16 on a GPU: weights 2 bytes, fp32 main grads 4, optimizer 12 (fp32
    // master + 2 moments), or 12/DP with the distributed optimizer (each rank its ceil(n/2) elements).
    void tp2_pp2_dp2_static_memory() {
        for (const bool distopt : {false, true}) {
            const Plan p = plan_on(tiny(2, 2, distopt, true), 8);
            QVERIFY(p.estimated);
            QCOMPARE(p.layout.dp, 2);
            QCOMPARE(p.parameters.stages[0].arena_elements, 17920);
            QCOMPARE(p.parameters.stages[1].arena_elements, 17536);
            QCOMPARE(p.memory[0].peak[W], 17920 * 2);
            QCOMPARE(p.memory[0].peak[G], 17920 * 4);
            QCOMPARE(p.memory[0].peak[O], (distopt ? 8960 : 17920) * 12);
            QCOMPARE(p.memory[1].peak[O], (distopt ? 8768 : 17536) * 12);
        }
        // fp32: no master copy, 8 bytes of moments per element; all buffers 4 bytes.
        const Plan f = plan_on(tiny(2, 2, false, false), 8);
        QCOMPARE(f.memory[0].peak[W], 17920 * 4);
        QCOMPARE(f.memory[0].peak[O], 17920 * 8);
        // The CPU backend's weights are a 16-bit arena too (its activations outside the layers' stored
        // intermediates are fp32 buffers holding 16-bit values); main grads fp32.
        const auto& cpu = find_device(device_catalogue(), "cpu");
        const Plan c = plan(tiny(2, 2, false, true), make_cluster(cpu, 8, 1));
        QCOMPARE(c.memory[0].peak[W], 17920 * 2);
        QCOMPARE(c.memory[0].peak[G], 17920 * 4);
        QCOMPARE(c.memory[0].peak[O], 17920 * 12);
        // Plain fp16 (no fp32 accumulation asked): 2-byte main grads, the engine's f16 arena on the CPU and
        // on a GPU alike (gradient_dtype, as Megatron-LM keeps them); with the flag 4 everywhere.
        Config fp16 = tiny(2, 2, false, true);
        fp16.training.bf16 = false;
        fp16.training.fp16 = true;
        fp16.training.accumulate_allreduce_grads_in_fp32 = false;
        const Plan h = plan_on(fp16, 8);
        QCOMPARE(h.memory[0].peak[W], 17920 * 2);
        QCOMPARE(h.memory[0].peak[G], 17920 * 2);
        const Plan hc = plan(fp16, make_cluster(cpu, 8, 1));
        QCOMPARE(hc.memory[0].peak[G], 17920 * 2);
        fp16.training.accumulate_allreduce_grads_in_fp32 = true;
        QCOMPARE(plan(fp16, make_cluster(cpu, 8, 1)).memory[0].peak[G], 17920 * 4);
        QCOMPARE(plan_on(fp16, 8).memory[0].peak[G], 17920 * 4);
    }

    // Activations kept per micro-batch on a TP rank (engine accounting, bf16 on a GPU, N = s·b = 32 rows):
    // replicated input, norm outputs, residual: 4·N·h·2 bytes; norm statistics 4·N·4; sharded QKV, context
    // and MLP: (3h + h + 2f)/t·N·2; attention's saved state, one fp32 log-sum-exp per score row on a
    // GPU, (a/t)·s·b·4. With SP the replicated part is /t.
    void tp2_pp2_activations_kept_per_microbatch() {
        const int64_t N = 32, h = 32, f = 128, t = 2, s = 16, b = 2, a = 4;
        const int64_t sharded = (3 * h + h + 2 * f) / t * N * 2 + (a / t) * s * b * 4;
        for (const bool sp : {false, true}) {
            Config c = tiny(2, 2, false, true);
            c.parallel.sequence_parallel = sp;
            const Plan p = plan_on(c, 8);
            const int64_t replicated = (4 * N * h * 2 + 4 * N * 4) / (sp ? t : 1);
            // Stage 0 keeps its 2 layers per micro-batch; its output went to stage 1. Two in flight (m = 2).
            QCOMPARE(p.memory[0].kept_per_microbatch, 2 * (replicated + sharded));
            QCOMPARE(p.memory[0].in_flight, 2);
            QCOMPARE(p.memory[1].in_flight, 1);
            QVERIFY(p.memory[0].peak[A] >= 2 * p.memory[0].kept_per_microbatch);
        }
    }

    // A cluster without devices is an issue, not a division by zero.
    void empty_cluster_is_an_issue() {
        Cluster c = test::dgx_a100(8);
        c.nodes = 0;
        const Plan p = plan(tiny(1, 1, false, false), c);
        QVERIFY(!p.estimated && !p.runnable());
        QCOMPARE(p.issues.at(0).field, std::string("cluster"));
    }

    // A layout that does not fit says by how much, naming the stage and the categories.
    void exceeding_memory_is_an_issue_with_the_excess() {
        Config c = test::paper_gpt(96, 12288, 96, 8, 1, 64, 1);
        const Plan p = plan_on(c, 8);
        QVERIFY(p.estimated && !p.fits && !p.runnable());
        const auto it =
            std::find_if(p.issues.begin(), p.issues.end(), [](const ConfigIssue& i) { return i.field == "memory"; });
        QVERIFY(it != p.issues.end());
        QVERIFY2(
            it->message.find("too much") != std::string::npos && it->message.find("optimizer") != std::string::npos,
            it->message.c_str());
    }

    void attention_saved_state_is_what_the_op_saves() {
        // The engine accounting's attention core is the op's `probs` (fp32): on a GPU one log-sum-exp
        // per score row (own kernels and cuDNN alike), on the CPU the S×S probabilities.
        for (const bool bf16 : {false, true}) {
            Config c = tiny(2, 1, false, bf16);
            for (const char* device : {"A100-80GB", "cpu"}) {
                const bool gpu = std::string(device) != "cpu";
                const Cluster cluster = make_cluster(find_device(device_catalogue(), device), 2, 1);
                const Plan p = plan(c, cluster, PlanOptions{});
                const LayerBytes b = layer_bytes(p.model, p.layout, p.precision, Accounting::Engine);
                AttentionParams ap;
                ap.num_heads = static_cast<int>(p.model.a / p.layout.tp);
                ap.batch = static_cast<int>(p.model.b);
                for (const AttentionBackend backend : {AttentionBackend::Own, AttentionBackend::Cudnn}) {
                    ap.backend = backend;
                    const int64_t saved = ops::attention_saved_elements(gpu ? Device::CUDA : Device::CPU, ap, p.model.s);
                    QCOMPARE(b.probs, saved * 4);
                }
            }
        }
    }

    // The planner's categories are the wire's: a prediction's by_category names each category as
    // mwb-train's mem.by_category does (ipc's list), so predicted and measured compare key by key.
    void categories_are_the_wires() {
        StageMemory s;
        for (int c = 0; c < kMemCategories; ++c) {
            s.current[static_cast<std::size_t>(c)] = 100 + c;
            s.peak[static_cast<std::size_t>(c)] = 200 + c;
        }
        const nlohmann::json by = memory_json(s)["by_category"];
        QCOMPARE(by.size(), ipc::kMemoryCategoryCount);
        ipc::MemoryStats wire;
        for (std::size_t c = 0; c < ipc::kMemoryCategoryCount; ++c) {
            const std::string name(ipc::kMemoryCategories[c]);
            QCOMPARE(std::string(category_name(static_cast<MemCategory>(c))), name);
            QCOMPARE(by[name]["current"].get<int64_t>(), int64_t(100 + c));
            QCOMPARE(by[name]["peak"].get<int64_t>(), int64_t(200 + c));
            wire.by_category[c] = {int64_t(100 + c), int64_t(200 + c)};
        }
        QCOMPARE(by.dump(), nlohmann::json(wire)["by_category"].dump());
    }
};

MWB_TEST_SUITE_APPLESS(test_planner_memory, TestPlannerMemory)
}  // namespace test_planner_memory
#include "test_memory.moc"
