#pragma once
// What test_gpt_reference.cpp and test_sixteen_bit_reference.cpp share: a fixture of
// tests/reference/make_{gpt,llama}_reference.py as a model configuration, its initial weights, one
// iteration's loss and gradients, and the comparison with make_sixteen_bit_reference.py's fixtures.
#include "support/fixtures.h"
#include "support/reference.h"

#include "backend/config/config.h"
#include "backend/model/gpt_model.h"
#include "mwb/kernels/precision.h"

#include <QtTest>

#include <string>

namespace mwb::test {

struct Case {
    GptDims dims;
    TrainingConfig training;
    int64_t micro_batches = 1;
};

inline Case make_case(const nlohmann::json& c) {
    Case k;
    k.dims.layers = c["num_layers"];
    k.dims.hidden = c["hidden_size"];
    k.dims.heads = c["num_attention_heads"];
    k.dims.ffn = c["ffn_hidden_size"];
    k.dims.seq = c["seq_length"];
    k.dims.micro_batch = c["micro_batch_size"];
    k.dims.vocab = c["padded_vocab"];
    k.dims.max_positions = c["seq_length"];
    k.dims.tied_output = !c["untie_embeddings_and_output_weights"].get<bool>();
    k.dims.rmsnorm = c["normalization"] == "RMSNorm";
    k.dims.norm_eps = c["layernorm_epsilon"];
    // Llama-family fields (absent from the GPT fixtures: GPT's values).
    k.dims.groups = c.value("num_query_groups", 0);
    k.dims.kv_channels = c.value("kv_channels", 0);
    k.dims.swiglu = c.value("swiglu", false);
    k.dims.linear_bias = c.value("add_bias_linear", true);
    k.dims.qkv_bias = c.value("add_qkv_bias", false);
    if (c.value("position_embedding_type", std::string("learned_absolute")) == "rope") {
        k.dims.positions = GptDims::Positions::Rope;
        k.dims.rotary_dim =
            static_cast<int64_t>(static_cast<double>(k.dims.head_dim()) * c["rotary_percent"].get<double>());
        k.dims.rotary_base = c["rotary_base"];
        k.dims.rope_scaling = c["use_rope_scaling"];
        k.dims.rope_scaling_factor = c["rope_scaling_factor"];
        k.dims.rotary_interleaved = c.value("rotary_interleaved", false);
    }
    k.training.lr = c["lr"];
    k.training.adam_beta1 = c["adam_beta1"];
    k.training.adam_beta2 = c["adam_beta2"];
    k.training.adam_eps = c["adam_eps"];
    k.training.weight_decay = c["weight_decay"];
    k.training.clip_grad = c["clip_grad"];
    k.micro_batches = c["global_batch_size"].get<int64_t>() / k.dims.micro_batch;
    return k;
}

/// The fixture's initial weights in the model's precision; in 16-bit runs the model's weights
/// are the fp32 master weights rounded to 16 bits (as the optimizer's copy makes them): the copy into
/// the 16-bit arena rounds.
inline void load_initial(const nlohmann::json& fx, GptModel& model, OpContext& ctx) {
    const ParamLayout& layout = model.layout();
    for (const auto& t : fx["tensors"]) {
        auto values = decode_array<float>(t["initial_f32"]);
        const TensorView v = layout.view(model.params(), layout.index_of(t["name"]));
        ops::copy(ctx, v, make_view(values.data(), DType::F32, {static_cast<int64_t>(values.size())}));
    }
}

/// The iteration's loss (mean of the micro-batches') with the gradients accumulated, each scaled by
/// `loss_scale` and unscaled here as the optimizer does.
inline double loss_and_grads(const nlohmann::json& fx, const Case& k, GptModel& model, double loss_scale) {
    const auto tokens = fx["tokens"].get<std::vector<int32_t>>();
    const int64_t per_micro = k.dims.micro_batch * (k.dims.seq + 1);
    double loss = 0;
    for (int64_t m = 0; m < k.micro_batches; ++m)
        loss += model.forward_backward(tokens.data() + m * per_micro,
                                       static_cast<float>(loss_scale / static_cast<double>(k.micro_batches)), 0, 0);
    // An f32 arena is unscaled in place; an f16 one stays scaled (an in-place division would round
    // where the loss scale underflows): gradient_values() divides as it reads.
    if (model.grads().dtype == DType::F32) {
        float* g = model.grads().f32();
        for (int64_t i = 0; i < model.grads().numel(); ++i) g[i] = static_cast<float>(g[i] / loss_scale);
    }
    return loss / static_cast<double>(k.micro_batches);
}

/// The values of a gradient view after loss_and_grads: f32 as they are, f16 widened and divided by the
/// loss scale (a power of two: exact).
inline std::vector<float> gradient_values(const TensorView& g, double loss_scale) {
    if (g.dtype == DType::F32) return {g.f32(), g.f32() + g.numel()};
    const auto* bits = static_cast<const uint16_t*>(g.data);
    std::vector<float> v(static_cast<std::size_t>(g.numel()));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(from_fp16_bits(bits[i]) / loss_scale);
    return v;
}

/// The fixtures make_sixteen_bit_reference.py writes: tests/fixtures/sixteen_bit_reference_<name>.json.
inline constexpr const char* sixteen_bit_fixtures[] = {"gpt_tied_layernorm", "gpt_untied_rmsnorm_accum",
                                                       "llama_gqa_rope_scaled", "llama_mqa_qkv_bias",
                                                       "llama_gqa_rope_interleaved"};
/// Those that also carry the recipe "fp16_f16_grads" (make_sixteen_bit_reference.py's F16_GRADS_CASES).
inline constexpr const char* f16_gradient_fixtures[] = {"gpt_tied_layernorm", "gpt_untied_rmsnorm_accum"};

// The same recipes against tests/reference/make_sixteen_bit_reference.py: PyTorch in float32 that
// rounds to 16 bits exactly where mwb stores (docs/numerics.md lists the points). The two then
// differ only where their fp32 arithmetic before a rounding (summation order, exp/tanh/rsqrt)
// differs enough to flip the 16-bit result: one ulp, 2u relative, on that element.
//
// How often: a flip needs a rounding midpoint between the two fp32 values, probability about
// (their difference) / (16-bit ulp). In bf16, products of 8-bit significands are exact in fp32
// and sums of 32-64 of them lose at most a few low bits, so GEMMs seed almost no flips (the
// reference's float64-accumulation rerun flips no forward rounding, moves gradients by
// <= 1.7e-5); seeds come from exp/tanh/rsqrt, about 2^-24 / 2^-8 = 6e-5 per rounding over ~1e4
// roundings a step: at most about one. A flip does not stay alone: it moves each consumer by about 2u /
// sqrt(fan-in), a fifth of its ulp, so about a fifth of them flip too, and the difference spreads to everything
// computed later (measured: one seed in layer 0's backward reaches 8.1e-4 = 0.2u normwise in the
// embedding's gradient; the other bf16 rows stay below 3.5e-5). In fp16 the GEMMs' sums are
// inexact (22-bit products), every step seeds dozens of flips and the spread saturates: the
// reference differs from its own float64-accumulation rerun by up to 1.5e-3 = 3u.
//
// Bounds (the reference's own accumulation noise, stored in the fixture, must fit too):
// bf16 loss u/1024 (measured <= 1.0e-7 = u/38000), gradients u/2 per tensor (measured <= 0.2u);
// fp16 loss u/8 (measured <= 1.8e-5 = u/27), gradients 6u (measured <= 3u). A rounding skipped
// or added moves every element of one tensor by up to u: bf16 rows then fail by 2.7x or more
// (loss 1.5e-5..4e-4, gradients 5e-3..2e-2; rounding the fp32 gradient arena only just: 2e-3..
// 3e-3), where the float64 comparison still passes (docs/numerics.md); in fp16 that stays inside
// the flip noise, so the fp16 rows hold the loss-scaled path 4x tighter than the float64
// comparison while the bf16 rows guard where rounding happens (both recipes use the same store
// calls).
//
// The bf16 bound assumes that mwb's GEMMs sum in the generator's order (the same BLAS kernels, so
// bit-identical fp32 sums before each rounding): with another kernel family the sums differ in their
// last bits, bf16 flips saturate like fp16's and the bf16 rows exceed u/2 (docs/numerics.md has the
// numbers). test_sixteen_bit_reference.cpp checks that premise first and skips the bf16 rows where
// it fails; the fp16 bounds hold with any summation order measured, so test_gpt_reference runs them
// everywhere.
//
// f16_grads (fp16 only): the gradient arena is f16 (--fp16 without accumulate_allreduce_grads_in_fp32),
// against the recipe "fp16_f16_grads" that rounds each op's contribution into fp16 main grads. Its
// rounding per call moves gradients by about u from the fp32 arena's (measured 1.0u and 1.6u normwise
// on the two fixtures that carry it), inside the fp16 flip noise: the same 6u bound holds, and the
// per-call rounding itself is checked bit-exactly per op (tests/kernels/test_f16_gradients.cpp).
inline void check_sixteen_bit_reference(const std::string& fixture, bool fp16, bool f16_grads = false) {
    const nlohmann::json ref = load_fixture("sixteen_bit_reference_" + fixture + ".json");
    const nlohmann::json fx = load_fixture(ref["fixture"]);
    const nlohmann::json& recipe = ref["recipes"][f16_grads ? "fp16_f16_grads" : fp16 ? "fp16" : "bf16"];
    const Case k = make_case(fx["config"]);
    const DType storage = fp16 ? DType::F16 : DType::BF16;
    const double u = fp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const double loss_bound = fp16 ? u / 8 : u / 1024, grad_bound = fp16 ? 6 * u : u / 2;
    const nlohmann::json& noise = recipe["accumulation_noise"];
    QVERIFY2(noise["loss"].get<double>() <= loss_bound && noise["worst_gradient"].get<double>() <= grad_bound,
             "the reference's own accumulation noise exceeds the bounds: regenerated with other rounding points?");

    OpContext ctx;
    Allocator alloc;
    GptModel model(k.dims, RecomputePolicy{}, storage, ctx, alloc, true, f16_grads ? DType::F16 : DType::F32);
    load_initial(fx, model, ctx);
    const double loss = loss_and_grads(fx, k, model, recipe["loss_scale"]);
    const double ref_loss = recipe["loss"];
    const double loss_err = std::abs(loss - ref_loss) / std::abs(ref_loss);
    // Every tensor's error first, then the checks: a failure reports the worst one and the loss together.
    double worst = 0;
    std::string worst_name;
    const ParamLayout& layout = model.layout();
    for (const auto& t : fx["tensors"]) {
        const auto want = to_double(decode_array<float>(recipe["grads"].at(t["name"].get<std::string>())));
        const std::vector<float> got =
            gradient_values(layout.view(model.grads(), layout.index_of(t["name"])), recipe["loss_scale"]);
        const double err = normwise_error(got, want);
        if (err >= worst) worst = err, worst_name = t["name"];
    }
    qInfo(
        "loss relative error %.2e (bound %.2e), worst gradient normwise error %.2e (bound %.2e, %s); the "
        "reference's accumulation noise %.2e, %.2e; u = %.2e",
        loss_err, loss_bound, worst, grad_bound, worst_name.c_str(), noise["loss"].get<double>(),
        noise["worst_gradient"].get<double>(), u);
    QVERIFY2(loss_err <= loss_bound,
             qPrintable(QString("loss %1 vs the 16-bit reference %2: relative error %3, bound %4")
                            .arg(loss, 0, 'g', 10)
                            .arg(ref_loss, 0, 'g', 10)
                            .arg(loss_err)
                            .arg(loss_bound)));
    QVERIFY2(worst <= grad_bound,
             qPrintable(QString("gradient of %1: normwise error %2 against the 16-bit reference, bound %3")
                            .arg(QString::fromStdString(worst_name))
                            .arg(worst)
                            .arg(grad_bound)));
}

}  // namespace mwb::test
