// Dropout (mask regenerated from Philox, never stored) and the dropout + residual add. The residual
// stream (out, residual) and a dropout's input or output may be 16-bit: each op is a template on the
// storage of out (and residual) and of x, loads widen, out is rounded once (storage.h).
#include "cpu_ops.h"
#include "dropout_mask.h"
#include "residual_row.h"
#include "storage.h"

namespace mwb::cpu {

namespace {

/// out[i] = base[i] + x[i]·mask[i] (base may be null: no residual), over fixed chunks of elements.
/// O: storage of out and base, X: of x.
template <DType O, DType X>
void apply_dropout(const TensorView& out_v, const TensorView* base_v, const TensorView& x_v, float p, RngStream rng,
                   int64_t element_offset) {
    auto* out = elements<O>(out_v);
    const auto* base = base_v ? elements<O>(*base_v) : nullptr;
    const auto* x = elements<X>(x_v);
    const int64_t n = x_v.numel();
    using SO = Storage<O>;
    using SX = Storage<X>;
    if (p <= 0.0f) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; ++i) out[i] = SO::store((base ? SO::load(base[i]) : 0.0f) + SX::load(x[i]));
        return;
    }
    const DropoutDraw draw(rng, p);
    const int64_t chunks = (n + kDropoutChunk - 1) / kDropoutChunk;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t i0 = c * kDropoutChunk, len = std::min(kDropoutChunk, n - i0);
        float mult[kDropoutChunk];
        draw.multipliers(static_cast<uint64_t>(element_offset + i0), len, mult);
        if (base) {
#pragma omp simd
            for (int64_t k = 0; k < len; ++k)
                out[i0 + k] = SO::store(SO::load(base[i0 + k]) + SX::load(x[i0 + k]) * mult[k]);
        } else {
#pragma omp simd
            for (int64_t k = 0; k < len; ++k) out[i0 + k] = SO::store(SX::load(x[i0 + k]) * mult[k]);
        }
    }
}

void dropout_into(const TensorView& out, const TensorView* base, const TensorView& x, float p, RngStream rng,
                  int64_t element_offset) {
    with_storages(out.dtype, x.dtype, [&](auto ot, auto xt) {
        apply_dropout<decltype(ot)::value, decltype(xt)::value>(out, base, x, p, rng, element_offset);
    });
}

template <DType O, DType X>
void bias_dropout_add_as(const TensorView& out, const TensorView& residual, const TensorView& x, const TensorView& bias,
                         float p, RngStream rng, int64_t element_offset) {
    const int64_t cols = x.cols(), rows = x.rows();
    const auto* px = elements<X>(x);
    const auto* pr = elements<O>(residual);
    auto* po = elements<O>(out);
    const float* pb = widened(bias, Scratch::Bias).f32();  // a 16-bit bias (bf16/fp16 runs): widened once
    const DropoutDraw draw(rng, p);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
        residual_row<O, X>(po + r * cols, pr + r * cols, px + r * cols, pb, cols,
                           static_cast<uint64_t>(element_offset + r * cols), draw, p);
}

}  // namespace

void dropout_forward(OpContext&, TensorView out, TensorView x, float p, RngStream rng, int64_t element_offset) {
    dropout_into(out, nullptr, x, p, rng, element_offset);
}

void dropout_backward(OpContext&, TensorView dx, TensorView dout, float p, RngStream rng, int64_t element_offset) {
    dropout_into(dx, nullptr, dout, p, rng, element_offset);
}

void dropout_add_forward(OpContext&, TensorView out, TensorView residual, TensorView x, float p, RngStream rng,
                         int64_t element_offset) {
    dropout_into(out, &residual, x, p, rng, element_offset);
}

void bias_dropout_add_forward(OpContext&, TensorView out, TensorView residual, TensorView x, TensorView bias,
                              float p, RngStream rng, int64_t element_offset) {
    with_storages(out.dtype, x.dtype, [&](auto ot, auto xt) {
        bias_dropout_add_as<decltype(ot)::value, decltype(xt)::value>(out, residual, x, bias, p, rng, element_offset);
    });
}

}  // namespace mwb::cpu
