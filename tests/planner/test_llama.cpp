// Llama-family models (RoPE, SwiGLU, grouped-query attention, RMSNorm, no biases) in the planner:
//  - every preset has the shape of the model's published config.json and the planner counts exactly
//    the published number of parameters (the Hub's count of the released safetensors);
//  - FLOPs are Megatron-LM's num_floating_point_operations (megatron/training/training.py: GQA's
//    K/V projections of G heads, SwiGLU's three MLP matrices) with the attention core over the full
//    s×s matrix, the project's definition (Megatron-LM halves it for the causal mask);
//  - GPT's FLOPs are unchanged: 8h² + 4hf + 4sh per token and layer, to the last bit;
//  - activation bytes per layer equal closed forms derived from Korthikanti et al. 2022's tensor-by-
//    tensor count (Megatron-LM accounting) and from docs/planner.md's engine table;
//  - communication: no position-table gradient with RoPE, RMSNorm's single weight vector.
#include "published.h"

#include "backend/config/validate.h"
#include "mwb/planner/plan.h"
#include "mwb/planner/presets.h"

#include "support/suite.h"

#include <QtTest>

#include <cmath>

namespace test_planner_llama {

using namespace mwb;
using namespace mwb::planner;

namespace {

Plan plan_preset(const test::LlamaRow& r, const char* device = "H100", int tp_override = 0) {
    Config c = load_preset(r.preset);
    if (tp_override > 0) {
        c.parallel.tensor_model_parallel_size = tp_override;
        c.parallel.pipeline_model_parallel_size = 1;
        c.parallel.num_layers_per_virtual_pipeline_stage = 0;
    }
    const auto& d = find_device(device_catalogue(), device);
    Plan p = plan(c, tp_override > 0 ? make_cluster(d, tp_override, 1) : make_cluster(d, 8, r.nodes));
    for (const auto& i : p.issues)
        if (i.field != "memory") qWarning("%s %s: %s", r.preset, i.field.c_str(), i.message.c_str());
    return p;
}

/// test::small_gpt as a Llama: a = 4 heads in G = 2 groups, SwiGLU f = 64, RoPE, RMSNorm, no biases,
/// untied (L = 4, h = 32, s = 16, b = 2, global batch 8, bf16, vocabulary 128 ids).
Config tiny_llama(int tp, bool sp) {
    Config c = test::small_gpt(tp, 1);
    c.model.group_query_attention = true;
    c.model.num_query_groups = 2;
    c.model.ffn_hidden_size = 64;
    c.model.swiglu = true;
    c.model.normalization = "RMSNorm";
    c.model.add_bias_linear = false;
    c.model.position_embedding_type = "rope";
    c.model.untie_embeddings_and_output_weights = true;
    c.parallel.sequence_parallel = sp;
    return c;
}

}  // namespace

class TestPlannerLlama : public QObject {
    Q_OBJECT
private slots:
    // Each preset is the published model: its config.json fields, read back from the preset file.
    void presets_have_the_published_shapes() {
        for (const test::LlamaRow& r : test::kLlamaFamily) {
            const Config c = load_preset(r.preset);
            const ModelConfig& m = c.model;
            QCOMPARE(m.num_layers, r.layers);
            QCOMPARE(m.hidden_size, r.hidden);
            QCOMPARE(m.num_attention_heads, r.heads);
            QCOMPARE(m.group_query_attention ? m.num_query_groups : m.num_attention_heads, r.groups);
            QCOMPARE(m.ffn_hidden_size, r.ffn);
            QCOMPARE(model_vocab_size(c), int64_t{r.vocab});
            QCOMPARE(!m.untie_embeddings_and_output_weights, r.tied);
            QCOMPARE(static_cast<double>(m.rotary_base), r.rope_theta);
            QCOMPARE(m.use_rope_scaling ? m.rope_scaling_factor : 0.0, r.rope_scaling);
            QCOMPARE(m.max_position_embeddings, r.context);
            QCOMPARE(m.layernorm_epsilon, r.eps);
            QCOMPARE(m.add_qkv_bias, r.qkv_bias);
            QVERIFY2(m.swiglu && !m.add_bias_linear && m.normalization == "RMSNorm" &&
                         m.position_embedding_type == "rope" && m.hidden_dropout == 0 && m.attention_dropout == 0,
                     r.preset);
        }
    }

    // The published count, exactly. The presets keep the published vocabulary unpadded
    // (make_vocab_size_divisible_by 1, as Megatron-LM's own configurations of these checkpoints:
    // the published vocabularies are multiples of 128 already), so the count the engine holds is the
    // published one at the preset's layout and at TP 8 (or G when G < 8).
    void parameter_counts_are_the_published_ones() {
        for (const test::LlamaRow& r : test::kLlamaFamily) {
            const Plan p = plan_preset(r);
            QVERIFY2(p.estimated && p.fits, r.preset);
            QCOMPARE(p.parameters.total, r.parameters);
            QCOMPARE(p.parameters.unpadded(), r.parameters);
            const Plan wide = plan_preset(r, "H100", std::min(8, r.groups));
            QVERIFY2(wide.estimated, r.preset);
            QCOMPARE(wide.parameters.total, r.parameters);
        }
    }

    // Megatron-LM's default padding (128 × TP) grows Llama 3's 128256 ids to 129024 at TP 8: the
    // engine then holds (129024 − 128256)·h more rows in each of the two matrices; the planner reports
    // them and the published count beside them.
    void padded_vocabulary_is_reported_beside_the_published_count() {
        const test::LlamaRow& r = test::kLlamaFamily[2];  // llama-3.1-8b
        Config c = load_preset(r.preset);
        c.model.make_vocab_size_divisible_by = 128;
        c.parallel.tensor_model_parallel_size = 8;
        const Plan p = plan(c, make_cluster(find_device(device_catalogue(), "H100"), 8, 1));
        QVERIFY(p.estimated);
        QCOMPARE(p.model.V, int64_t{129024});
        QCOMPARE(p.parameters.total, r.parameters + 2 * (129024 - 128256) * int64_t{r.hidden});
        QCOMPARE(p.parameters.unpadded(), r.parameters);
    }

    // Megatron-LM's num_floating_point_operations for a dense GQA/SwiGLU model (BSHD, no MoE/MTP):
    //   T·3·2·[ h·f·3·L + (h·(q + 2k) + q·h)·L + h·V ] + B·s²·(3·2·q/2·2)·L,  q = a·d, k = G·d;
    // that is the default (causal) reading; the full reading counts the attention core over the whole
    // matrix: B·s²·3·2·q·L more.
    void flops_are_megatron_lms_in_both_attention_readings() {
        for (const test::LlamaRow& r : test::kLlamaFamily) {
            const Plan current = plan_preset(r);
            Config c = load_preset(r.preset);
            c.telemetry.mfu_attention_flops = "full";
            const Plan p = plan(c, make_cluster(find_device(device_catalogue(), "H100"), 8, r.nodes));
            const double B = static_cast<double>(p.layout.global_batch), s = static_cast<double>(p.model.s);
            const double T = B * s, L = r.layers, h = r.hidden, f = r.ffn, V = static_cast<double>(p.model.V);
            const double q = static_cast<double>(r.heads) * (h / r.heads), k = r.groups * (h / r.heads);
            const double megatron =
                T * (3 * 2 * h * f * 3 * L + 3 * 2 * (h * (q + 2 * k) + q * h) * L + 3 * 2 * h * V) +
                B * s * s * (3 * 2 * q / 2 * 2) * L;
            const double causal_half = B * s * s * 3 * 2 * q * L / 2 * 2;
            QVERIFY2(std::fabs(current.flops.model / megatron - 1) < 1e-12,
                     qPrintable(QString("%1: %2 vs %3").arg(r.preset).arg(current.flops.model).arg(megatron)));
            QVERIFY2(std::fabs(p.flops.model / (megatron + causal_half) - 1) < 1e-12,
                     qPrintable(QString("%1: %2 vs %3").arg(r.preset).arg(p.flops.model).arg(megatron + causal_half)));
            // Selective recomputation adds the attention core's forward: 4·s·a·d per token and layer.
            if (p.layout.recompute == Recompute::Selective) {
                QVERIFY(std::fabs(p.flops.hardware / (p.flops.model + T * L * 4 * s * q) - 1) < 1e-12);
                QVERIFY(std::fabs(current.flops.hardware / (current.flops.model + T * L * 2 * s * q) - 1) < 1e-12);
            }
        }
    }

    // GPT's layers (G = a, a·d = h, GELU) count 8h² + 4hf + 4sh, bit for bit as before.
    void gpt_flops_are_unchanged() {
        for (const auto& r : test::kNarayananTable1) {
            Config c = test::paper_gpt(r.layers, r.hidden, r.heads, r.tp, r.pp, r.batch, 1);
            resolve(c, r.gpus, 0);
            const double h = r.hidden, f = 4 * h, s = 2048;
            QCOMPARE(layer_forward_flops(c.model, "full").total(), 8 * h * h + 4 * h * f + 4 * s * h);
            QCOMPARE(layer_forward_flops(c.model, "full").attention, 4 * s * h);
            QCOMPARE(layer_forward_flops(c.model, "causal").attention, 2 * s * h);
        }
    }

    // Megatron-LM accounting (16-bit, 1-byte masks), per layer, from Korthikanti et al.'s tensor list
    // with Llama's tensors: replicated input, norm outputs, residual and masks 10sbh (/t with SP); Q, K,
    // V 2sb(a + 2G)d/t; context 2sb·ad/t; fc1 (gate and up) 4sbf/t and the SwiGLU output 2sbf/t;
    // probabilities, mask and dropped probabilities 5as²b/t unless recomputed.
    void megatron_activation_bytes_closed_form() {
        for (const test::LlamaRow& r : test::kLlamaFamily)
            for (int t : {1, std::min(8, r.groups)})
                for (bool sp : {false, true})
                    for (const char* recompute : {"", "selective"}) {
                        if (sp && t == 1) continue;
                        Config c = load_preset(r.preset);
                        c.parallel.tensor_model_parallel_size = t;
                        c.parallel.pipeline_model_parallel_size = 1;
                        c.parallel.num_layers_per_virtual_pipeline_stage = 0;
                        c.parallel.sequence_parallel = sp;
                        c.training.recompute_granularity = recompute;
                        c.training.recompute_method = TrainingConfig{}.recompute_method;
                        c.training.recompute_num_layers = TrainingConfig{}.recompute_num_layers;
                        c.training.micro_batch_size = 1;
                        PlanOptions o;
                        o.accounting = Accounting::MegatronLM;
                        const Plan p = plan(c, make_cluster(find_device(device_catalogue(), "H100"), t, 64), o);
                        for (const auto& i : p.issues) qWarning("%s: %s", i.field.c_str(), i.message.c_str());
                        QVERIFY2(p.estimated, r.preset);
                        const int64_t s = p.model.s, b = 1, h = r.hidden, a = r.heads, G = r.groups, d = h / a;
                        const int64_t f = r.ffn;
                        int64_t expected = 10 * s * b * h / (sp ? t : 1) +
                                           (2 * s * b * (a + 2 * G) * d + 2 * s * b * a * d + 6 * s * b * f) / t;
                        if (std::string(recompute).empty()) expected += 5 * a * s * s * b / t;
                        const LayerBytes lb = layer_bytes(p.model, p.layout, p.precision, Accounting::MegatronLM);
                        QCOMPARE(kept_layer_bytes(lb, p.layout.recompute, true), expected);
                    }
    }

    // What mwb-train keeps per layer (docs/planner.md's engine table): the layer input, both norm
    // outputs and the residual (R rows of h), Q, K and V after RoPE ((a + 2G)·d/t), the context (a·d/t),
    // gate and up (2f/t) and the SwiGLU output (f/t) at e bytes; RMSNorm's rstd (fp32) twice; the
    // attention's saved state unless selective recomputation drops it: on a GPU (this plan's A100) the
    // b·(a/t)·s row log-sum-exps in fp32 (ops::attention_saved_elements), not the s² probabilities.
    void engine_activation_bytes_closed_form() {
        for (int t : {1, 2})
            for (bool sp : {false, true})
                for (const char* recompute : {"", "selective"}) {
                    if (sp && t == 1) continue;
                    Config c = tiny_llama(t, sp);
                    c.training.recompute_granularity = recompute;
                    const Plan p = plan(c, make_cluster(find_device(device_catalogue(), "A100-80GB"), t, 1));
                    QVERIFY(p.estimated);
                    const int64_t s = 16, b = 2, h = 32, a = 4, G = 2, d = 8, f = 64, e = 2, N = s * b;
                    const int64_t R = sp ? N / t : N;
                    int64_t expected = e * (4 * R * h + N * ((a + 2 * G) * d + a * d + 3 * f) / t) + 2 * R * 4;
                    if (std::string(recompute).empty()) expected += 4 * b * (a / t) * s;
                    const LayerBytes lb = layer_bytes(p.model, p.layout, p.precision, Accounting::Engine);
                    QCOMPARE(kept_layer_bytes(lb, p.layout.recompute, true), expected);
                }
    }

    // Per layer and TP rank: QKV ((a + 2G)·d/t, h), projection (h, a·d/t), fc1 (2f/t, h), fc2 (h, f/t),
    // two RMSNorm weights; no biases (Qwen2: the QKV bias (a + 2G)·d/t). No position table with RoPE.
    void per_rank_parameters_closed_form() {
        for (bool qkv_bias : {false, true}) {
            Config c = tiny_llama(2, false);
            c.model.add_qkv_bias = qkv_bias;
            const Plan p = plan(c, make_cluster(find_device(device_catalogue(), "A100-80GB"), 2, 1));
            QVERIFY(p.estimated);
            const int64_t h = 32, a = 4, G = 2, d = 8, f = 64, t = 2, V = 256, L = 4;  // 128 ids padded to 128·t
            const int64_t layer = (a + 2 * G) * d / t * h + (qkv_bias ? (a + 2 * G) * d / t : 0) + h * a * d / t +
                                  2 * f / t * h + h * f / t + 2 * h;
            QCOMPARE(p.parameters.stages[0].parameters, L * layer + 2 * (V / t) * h + h);
            QCOMPARE(p.parameters.embedding, V * h);
        }
    }

    // tp2_sp for the small Llama (X = s·b·h·2 = 2048 bytes): the same activation collectives as GPT's
    // (all-gathers 104 X, reduce-scatters 72 X, each sending half), RMSNorm's one weight vector per norm
    // (2 per layer + the final one: 9 of h fp32), and no position-embedding gradient.
    void sp_communication_without_position_table() {
        const Plan p = plan(tiny_llama(2, true), make_cluster(find_device(device_catalogue(), "A100-80GB"), 2, 1));
        QVERIFY(p.estimated);
        const int64_t X = 2048;
        const auto& s = p.communication[0];
        QCOMPARE(s.bytes_sent[static_cast<int>(Group::SP)], (104 + 72) * X / 2 + 9 * 32 * 4);
        for (const Collective& col : s.collectives)
            QVERIFY(std::string(col.what).find("position") == std::string::npos);
    }
};

MWB_TEST_SUITE_APPLESS(test_planner_llama, TestPlannerLlama)
}  // namespace test_planner_llama
#include "test_llama.moc"
