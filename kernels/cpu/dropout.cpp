// Dropout (mask regenerated from Philox, never stored) and the dropout + residual add.
#include "cpu_ops.h"
#include "dropout_mask.h"
#include "storage.h"

namespace mwb::cpu {

namespace {

constexpr int64_t kChunk = 1024;

/// out[i] = base[i] + x[i]·mask[i] (base may be null: no residual), over fixed chunks of elements.
void apply_dropout(float* out, const float* base, const float* x, int64_t n, float p, RngStream rng,
                   int64_t element_offset) {
    if (p <= 0.0f) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; ++i) out[i] = (base ? base[i] : 0.0f) + x[i];
        return;
    }
    const DropoutDraw draw(rng, p);
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t i0 = c * kChunk, len = std::min(kChunk, n - i0);
        float mult[kChunk];
        draw.multipliers(static_cast<uint64_t>(element_offset + i0), len, mult);
        if (base) {
#pragma omp simd
            for (int64_t k = 0; k < len; ++k) out[i0 + k] = base[i0 + k] + x[i0 + k] * mult[k];
        } else {
#pragma omp simd
            for (int64_t k = 0; k < len; ++k) out[i0 + k] = x[i0 + k] * mult[k];
        }
    }
}

}  // namespace

void dropout_forward(OpContext&, TensorView out, TensorView x, float p, RngStream rng, int64_t element_offset) {
    apply_dropout(out.f32(), nullptr, x.f32(), x.numel(), p, rng, element_offset);
}

void dropout_backward(OpContext&, TensorView dx, TensorView dout, float p, RngStream rng, int64_t element_offset) {
    apply_dropout(dx.f32(), nullptr, dout.f32(), dout.numel(), p, rng, element_offset);
}

void dropout_add_forward(OpContext&, TensorView out, TensorView residual, TensorView x, float p, RngStream rng,
                         int64_t element_offset) {
    apply_dropout(out.f32(), residual.f32(), x.f32(), x.numel(), p, rng, element_offset);
}

void bias_dropout_add_forward(OpContext&, TensorView out, TensorView residual, TensorView x, TensorView bias,
                              float p, RngStream rng, int64_t element_offset) {
    const int64_t cols = x.cols(), rows = x.rows();
    // A 16-bit bias (the weights' working copy in bf16/fp16 runs) is widened once (exact).
    const float *px = x.f32(), *pr = residual.f32(), *pb = widened(bias, Scratch::Bias).f32();
    float* po = out.f32();
    const DropoutDraw draw(rng, p);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        float mult[kChunk];
        const float* xr = px + r * cols;
        const float* rr = pr + r * cols;
        float* orow = po + r * cols;
        for (int64_t c0 = 0; c0 < cols; c0 += kChunk) {
            const int64_t len = std::min(kChunk, cols - c0);
            if (p > 0.0f) {
                draw.multipliers(static_cast<uint64_t>(element_offset + r * cols + c0), len, mult);
            } else {
                for (int64_t k = 0; k < len; ++k) mult[k] = 1.0f;
            }
#pragma omp simd
            for (int64_t k = 0; k < len; ++k) orow[c0 + k] = rr[c0 + k] + (xr[c0 + k] + pb[c0 + k]) * mult[k];
        }
    }
}

}  // namespace mwb::cpu
