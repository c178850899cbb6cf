// GELU (tanh approximation, as GPT-2 and Megatron-LM's bias_gelu).
#include "cpu_ops.h"
#include "vec_math.h"

#include "mwb/kernels/error.h"

namespace mwb::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
}  // namespace

void gelu_forward(OpContext&, TensorView out, TensorView x) {
    MWB_CHECK(out.numel() == x.numel(), "gelu_forward: out={} x={}", out.describe(), x.describe());
    const float* px = x.f32();
    float* po = out.f32();
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const float v = px[i];
        const float t = tanh_approx(kSqrt2OverPi * (v + kCubic * v * v * v));
        po[i] = 0.5f * v * (1.0f + t);
    }
}

void gelu_backward(OpContext&, TensorView dx, TensorView dout, TensorView x) {
    MWB_CHECK(dx.numel() == x.numel() && dout.numel() == x.numel(), "gelu_backward: dx={} dout={} x={}",
              dx.describe(), dout.describe(), x.describe());
    const float *px = x.f32(), *pd = dout.f32();
    float* pdx = dx.f32();
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const float v = px[i];
        const float t = tanh_approx(kSqrt2OverPi * (v + kCubic * v * v * v));
        const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
        pdx[i] = pd[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
}

}  // namespace mwb::cpu
