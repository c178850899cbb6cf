// AdamW on fp32 master weights from f32 or 16-bit gradients, with the optional rounded copy for
// 16-bit model weights (written into the 16-bit arena directly, or as f32 values).
#include "cpu_ops.h"
#include "storage.h"

#include "mwb/kernels/precision.h"

#include <cmath>

namespace mwb {

AdamWConstants adamw_constants(const AdamWParams& p) {
    const float bc1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step)));
    const float bc2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step)));
    AdamWConstants c;
    c.step_size = p.lr / bc1;
    c.inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
    c.decay = 1.0f - p.lr * p.weight_decay;
    return c;
}

}  // namespace mwb

namespace mwb::cpu {

void adamw_update(OpContext&, TensorView param, TensorView grad, TensorView exp_avg, TensorView exp_avg_sq,
                  const AdamWParams& p, TensorView param_copy, DType copy_dtype, TensorView scale, TensorView step) {
    // A step whose gradients are not finite (gradient_scale's found_inf) writes nothing.
    if (!scale.empty() && scale.f32()[1] != 0.0f) return;
    const int64_t n = param.numel();
    float *w = param.f32(), *m = exp_avg.f32(), *v = exp_avg_sq.f32();
    const float b1 = p.beta1, b2 = p.beta2;
    // From the step's block (what the CUDA kernel reads) or from p: the same floats either way.
    AdamWConstants k = step.empty() ? adamw_constants(p) : AdamWConstants{};
    if (!step.empty()) {
        const double* s = step.f64();
        k.step_size = static_cast<float>(s[step_params::StepSize]);
        k.inv_sqrt_bc2 = static_cast<float>(s[step_params::InvSqrtBc2]);
        k.decay = p.weight_decay != 0.0f ? static_cast<float>(s[step_params::Decay]) : 1.0f;
    }
    const float step_size = k.step_size, inv_sqrt_bc2 = k.inv_sqrt_bc2, decay = k.decay;
    const float gs = scale.empty() ? p.grad_scale : p.grad_scale * scale.f32()[0];
    // The gradient as stored: fp32 main grads, or a 16-bit gradient arena widened exactly (the same
    // arithmetic on the same values as an f32 arena holding them).
    const auto update = [&]<DType G, bool zero_grad>() {
        using SG = Storage<G>;
        typename SG::type* g = elements<G>(grad);
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; ++i) {
            const float gi = SG::load(g[i]) * gs;
            const float mi = b1 * m[i] + (1.0f - b1) * gi;
            const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
            m[i] = mi;
            v[i] = vi;
            // torch.optim.AdamW: p ← p·(1 − lr·wd) − lr/bc1 · m / (sqrt(v)/sqrt(bc2) + eps)
            w[i] = w[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + p.eps);
            // The gradient's cache line is here already: zeroing it now (zeros of its dtype) saves the
            // next step a pass over the whole gradient arena.
            if constexpr (zero_grad) g[i] = SG::store(0.0f);
        }
    };
    with_storage(grad.dtype, [&](auto tag) {
        constexpr DType G = decltype(tag)::value;
        if (p.zero_grad)
            update.template operator()<G, true>();
        else
            update.template operator()<G, false>();
    });
    if (param_copy.empty()) return;
    // The model's working copy: the 16-bit arena itself (bf16/fp16 runs), or f32 holding the rounding.
    with_storage(param_copy.dtype, [&](auto tag) {
        auto* out = elements<decltype(tag)::value>(param_copy);
        if constexpr (decltype(tag)::value == DType::F32) {
            if (copy_dtype == DType::BF16) {
#pragma omp parallel for simd schedule(static)
                for (int64_t i = 0; i < n; ++i) out[i] = round_to_bf16(w[i]);
            } else if (copy_dtype == DType::F16) {
#pragma omp parallel for simd schedule(static)
                for (int64_t i = 0; i < n; ++i) out[i] = round_to_fp16(w[i]);
            } else {
#pragma omp parallel for simd schedule(static)
                for (int64_t i = 0; i < n; ++i) out[i] = w[i];
            }
        } else {
            using S = Storage<decltype(tag)::value>;
#pragma omp parallel for simd schedule(static)
            for (int64_t i = 0; i < n; ++i) out[i] = S::store(w[i]);
        }
    });
}

}  // namespace mwb::cpu
