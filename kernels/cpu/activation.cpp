// GELU (tanh approximation, as GPT-2 and Megatron-LM's bias_gelu).
#include "cpu_ops.h"
#include "storage.h"
#include "vec_math.h"

#include <algorithm>

namespace mwb::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

/// 1 + tanh(u) = 2 / (1 + e^{-2u}), without the cancellation of 1 + tanh for negative u.
inline float one_plus_tanh(float u) {
    return 2.0f / (1.0f + exp_approx(-2.0f * u));
}
}  // namespace

namespace {
// Each op is a template on the storage of its stored tensors (fc1's output x, the activation's
// output out): loads widen, the output is rounded once, as the emulated store did.
template <DType X, DType O>
void gelu_forward_as(const TensorView& out, const TensorView& x) {
    const auto* px = elements<X>(x);
    auto* po = elements<O>(out);
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) simdlen(16)
    for (int64_t i = 0; i < n; ++i) {
        const float v = Storage<X>::load(px[i]);
        po[i] = Storage<O>::store(0.5f * v * one_plus_tanh(kSqrt2OverPi * (v + kCubic * v * v * v)));
    }
}

/// dx may alias dout (the model runs it in place).
template <DType X, DType G>
void gelu_backward_as(const TensorView& dx, const TensorView& dout, const TensorView& x) {
    const auto* px = elements<X>(x);
    const auto* pd = elements<G>(dout);
    auto* pdx = elements<G>(dx);
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) simdlen(16)
    for (int64_t i = 0; i < n; ++i) {
        const float v = Storage<X>::load(px[i]);
        const float e = exp_approx(-2.0f * kSqrt2OverPi * (v + kCubic * v * v * v));
        const float opt = 2.0f / (1.0f + e);         // 1 + tanh(u)
        const float omt = 2.0f / (1.0f + 1.0f / e);  // 1 - tanh(u) = 2e / (1 + e), also for e = 0 or inf
        // 1 - t² is exactly 0 in float for |v| > ~10; clamping v in that term keeps v·du finite there
        // (else x² overflows from |x| ~ 1.8e19 and 0·inf = NaN) without changing any finite result.
        const float vc = std::min(std::max(v, -16.0f), 16.0f);
        const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * vc * vc);
        pdx[i] = Storage<G>::store(Storage<G>::load(pd[i]) * (0.5f * opt + 0.5f * vc * (opt * omt) * du));
    }
}
}  // namespace

void gelu_forward(OpContext&, TensorView out, TensorView x) {
    with_storages(x.dtype, out.dtype,
                  [&](auto xt, auto ot) { gelu_forward_as<decltype(xt)::value, decltype(ot)::value>(out, x); });
}

void gelu_backward(OpContext&, TensorView dx, TensorView dout, TensorView x) {
    // dx and dout share a dtype (the checks): the gradient of fc1's output, stored like it.
    with_storages(x.dtype, dx.dtype,
                  [&](auto xt, auto gt) { gelu_backward_as<decltype(xt)::value, decltype(gt)::value>(dx, dout, x); });
}

}  // namespace mwb::cpu

// SwiGLU (Shazeer 2020): rows of x are [gate (F) | up (F)], out = silu(gate)·up.
namespace mwb::cpu {

namespace {
inline float sigmoid(float g) {
    return 1.0f / (1.0f + exp_approx(-g));
}

template <DType X, DType O>
void swiglu_forward_as(const TensorView& out, const TensorView& x) {
    const int64_t F = out.cols(), rows = out.numel() / F;
    const auto* px = elements<X>(x);
    auto* po = elements<O>(out);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < rows; ++n) {
        const auto *gate = px + n * 2 * F, *up = gate + F;
        auto* o = po + n * F;
#pragma omp simd simdlen(16)
        for (int64_t i = 0; i < F; ++i) {
            const float g = Storage<X>::load(gate[i]);
            o[i] = Storage<O>::store(g * sigmoid(g) * Storage<X>::load(up[i]));
        }
    }
}

template <DType X, DType G>
void swiglu_backward_as(const TensorView& dx, const TensorView& dout, const TensorView& x) {
    const int64_t F = dout.cols(), rows = dout.numel() / F;
    const auto* px = elements<X>(x);
    const auto* pd = elements<G>(dout);
    auto* pdx = elements<G>(dx);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < rows; ++n) {
        const auto *gate = px + n * 2 * F, *up = gate + F;
        const auto* d = pd + n * F;
        auto *dgate = pdx + n * 2 * F, *dup = dgate + F;
#pragma omp simd simdlen(16)
        for (int64_t i = 0; i < F; ++i) {
            const float g = Storage<X>::load(gate[i]), s = sigmoid(g), silu = g * s, dv = Storage<G>::load(d[i]);
            // silu'(g) = s·(1 + g·(1 - s))
            dgate[i] = Storage<G>::store(dv * Storage<X>::load(up[i]) * (s * (1.0f + g * (1.0f - s))));
            dup[i] = Storage<G>::store(dv * silu);
        }
    }
}
}  // namespace

void swiglu_forward(OpContext&, TensorView out, TensorView x) {
    with_storages(x.dtype, out.dtype,
                  [&](auto xt, auto ot) { swiglu_forward_as<decltype(xt)::value, decltype(ot)::value>(out, x); });
}

void swiglu_backward(OpContext&, TensorView dx, TensorView dout, TensorView x) {
    with_storages(x.dtype, dx.dtype,
                  [&](auto xt, auto gt) { swiglu_backward_as<decltype(xt)::value, decltype(gt)::value>(dx, dout, x); });
}

}  // namespace mwb::cpu
