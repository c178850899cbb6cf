// LayerNorm and RMSNorm, forward and backward. Row statistics in float; parameter gradients are summed
// column-block-wise over rows in order (deterministic for any thread count). x, out and their
// gradients may be 16-bit (the residual stream and norm outputs of a 16-bit run): each op is a template
// on their storage, rows are widened into f32 scratch and the f32 arithmetic runs unchanged, the output
// rounded once (storage.h). 16-bit gamma/beta (the weights' working copy in bf16/fp16 runs) are widened
// once per call (H values, exact).
#include "cpu_ops.h"
#include "residual_row.h"
#include "storage.h"

#include <cmath>
#include <vector>

namespace mwb::cpu {

namespace {

constexpr int64_t kColBlock = 64;

/// Widens columns [c0, c1) of a row into buf (indexed from c0), or returns the f32 row itself.
template <DType T>
const float* widened_block(const typename Storage<T>::type* row, int64_t c0, int64_t c1, float* buf) {
    return widened_row<T>(row + c0, c1 - c0, buf) - c0;
}

/// A backward pass's per-thread f32 rows of x, dout and dx (empty where those are f32 already).
template <DType X, DType O>
struct BackwardRows {
    std::vector<float> x, d, dx;
    int64_t h;
    explicit BackwardRows(int64_t cols)
        : x(X == DType::F32 ? 0 : cols), d(O == DType::F32 ? 0 : cols), dx(X == DType::F32 ? 0 : cols), h(cols) {}
    /// The row to compute dx in: a 16-bit dx is accumulated in f32 (its current values widened) and
    /// rounded once by stored_row (the residual gradient's one rounding).
    float* dx_row(typename Storage<X>::type* row, bool accumulate) {
        return accumulate ? const_cast<float*>(widened_row<X>(row, h, dx.data())) : computed_row<X>(row, dx.data());
    }
};

/// One row of LayerNorm: mean and rstd of xr (f32 values), out_row (storage O) = (x - mean)·rstd·w + b,
/// computed in obuf when O is 16-bit and rounded once. The unfused op and the fused residual + norm.
template <DType O>
void layernorm_row(const float* xr, int64_t h, const float* pw, const float* pb, float eps,
                   typename Storage<O>::type* out_row, float* obuf, float& mean, float& rstd) {
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < h; ++c) sum += xr[c];
    const float mu = sum / static_cast<float>(h);
    float var = 0;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < h; ++c) var += (xr[c] - mu) * (xr[c] - mu);
    const float rs = 1.0f / std::sqrt(var / static_cast<float>(h) + eps);
    float* orow = computed_row<O>(out_row, obuf);
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) orow[c] = (xr[c] - mu) * rs * pw[c] + pb[c];
    stored_row<O>(out_row, orow, h);
    mean = mu;
    rstd = rs;
}

/// One row of RMSNorm: rstd of xr, out_row = x·rstd·w (as layernorm_row).
template <DType O>
void rmsnorm_row(const float* xr, int64_t h, const float* pw, float eps, typename Storage<O>::type* out_row,
                 float* obuf, float& rstd) {
    float ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < h; ++c) ss += xr[c] * xr[c];
    const float rs = 1.0f / std::sqrt(ss / static_cast<float>(h) + eps);
    float* orow = computed_row<O>(out_row, obuf);
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) orow[c] = xr[c] * rs * pw[c];
    stored_row<O>(out_row, orow, h);
    rstd = rs;
}

/// X: storage of x (and dx), O: of out (forward) or dout (backward).
template <DType X, DType O>
void layernorm_forward_as(TensorView out, TensorView mean, TensorView rstd, TensorView x, TensorView w, TensorView b,
                          float eps) {
    const int64_t rows = x.rows(), h = x.cols();
    const auto* px = elements<X>(x);
    auto* po = elements<O>(out);
    const float *pw = widened(w, Scratch::Weight).f32(), *pb = widened(b, Scratch::Bias).f32();
    float *pm = mean.f32(), *pr = rstd.f32();
#pragma omp parallel
    {
        std::vector<float> xbuf(X == DType::F32 ? 0 : h), obuf(O == DType::F32 ? 0 : h);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r)
            layernorm_row<O>(widened_row<X>(px + r * h, h, xbuf.data()), h, pw, pb, eps, po + r * h, obuf.data(),
                             pm[r], pr[r]);
    }
}

template <DType X, DType O>
void layernorm_backward_as(TensorView dx, TensorView dw, TensorView db, TensorView dout, TensorView x, TensorView mean,
                           TensorView rstd, TensorView w, bool accumulate_dx) {
    const int64_t rows = x.rows(), h = x.cols();
    const auto* px = elements<X>(x);
    const auto* pd = elements<O>(dout);
    auto* pdx = elements<X>(dx);
    const float *pw = widened(w, Scratch::Weight).f32(), *pm = mean.f32(), *pr = rstd.f32();
    float *pdw = dw.f32(), *pdb = db.f32();

    // Parameter gradients first (dx may alias dout).
    const int64_t blocks = (h + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t c0 = blk * kColBlock, c1 = std::min(h, c0 + kColBlock);
        float gw[kColBlock] = {}, gb[kColBlock] = {}, xbuf[kColBlock], dbuf[kColBlock];
        for (int64_t r = 0; r < rows; ++r) {
            const float* xr = widened_block<X>(px + r * h, c0, c1, xbuf);
            const float* dr = widened_block<O>(pd + r * h, c0, c1, dbuf);
            const float mu = pm[r], rs = pr[r];
#pragma omp simd
            for (int64_t c = c0; c < c1; ++c) {
                gw[c - c0] += dr[c] * (xr[c] - mu) * rs;
                gb[c - c0] += dr[c];
            }
        }
        for (int64_t c = c0; c < c1; ++c) {
            pdw[c] += gw[c - c0];
            pdb[c] += gb[c - c0];
        }
    }

#pragma omp parallel
    {
        BackwardRows<X, O> buf(h);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const float* xr = widened_row<X>(px + r * h, h, buf.x.data());
            const float* dr = widened_row<O>(pd + r * h, h, buf.d.data());
            const float mu = pm[r], rs = pr[r];
            float mean_g = 0, mean_gx = 0;
#pragma omp simd reduction(+ : mean_g, mean_gx)
            for (int64_t c = 0; c < h; ++c) {
                const float g = dr[c] * pw[c];
                mean_g += g;
                mean_gx += g * (xr[c] - mu) * rs;
            }
            mean_g /= static_cast<float>(h);
            mean_gx /= static_cast<float>(h);
            float* dxr = buf.dx_row(pdx + r * h, accumulate_dx);
            if (accumulate_dx) {
#pragma omp simd
                for (int64_t c = 0; c < h; ++c) dxr[c] += rs * (dr[c] * pw[c] - mean_g - (xr[c] - mu) * rs * mean_gx);
            } else {
#pragma omp simd
                for (int64_t c = 0; c < h; ++c) dxr[c] = rs * (dr[c] * pw[c] - mean_g - (xr[c] - mu) * rs * mean_gx);
            }
            stored_row<X>(pdx + r * h, dxr, h);
        }
    }
}

template <DType X, DType O>
void rmsnorm_forward_as(TensorView out, TensorView rstd, TensorView x, TensorView w, float eps) {
    const int64_t rows = x.rows(), h = x.cols();
    const auto* px = elements<X>(x);
    auto* po = elements<O>(out);
    const float* pw = widened(w, Scratch::Weight).f32();
    float* pr = rstd.f32();
#pragma omp parallel
    {
        std::vector<float> xbuf(X == DType::F32 ? 0 : h), obuf(O == DType::F32 ? 0 : h);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r)
            rmsnorm_row<O>(widened_row<X>(px + r * h, h, xbuf.data()), h, pw, eps, po + r * h, obuf.data(), pr[r]);
    }
}

/// The residual connection and the next norm, row by row: out's row as bias_dropout_add_forward writes
/// it (residual_row), then the norm of that stored row as layernorm_row / rmsnorm_row (mean null:
/// RMSNorm). O: storage of out, residual and norm_out; X: of x.
template <DType O, DType X>
void residual_norm_forward_as(TensorView out, TensorView norm_out, TensorView mean, TensorView rstd,
                              TensorView residual, TensorView x, TensorView bias, TensorView w, TensorView b, float p,
                              RngStream rng, int64_t element_offset, float eps) {
    const int64_t rows = x.rows(), h = x.cols();
    const auto* px = elements<X>(x);
    const auto* pres = elements<O>(residual);
    auto* po = elements<O>(out);
    auto* pn = elements<O>(norm_out);
    // 16-bit weights widened once each, into three slots (the residual's bias into one this op uses for
    // nothing else).
    const float* pbias = bias.empty() ? nullptr : widened(bias, Scratch::Out).f32();
    const float* pw = widened(w, Scratch::Weight).f32();
    const float* pb = b.empty() ? nullptr : widened(b, Scratch::Bias).f32();
    float* pm = mean.empty() ? nullptr : mean.f32();
    float* pr = rstd.f32();
    const DropoutDraw draw(rng, p);
#pragma omp parallel
    {
        std::vector<float> xbuf(O == DType::F32 ? 0 : h), obuf(O == DType::F32 ? 0 : h);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            auto* orow = po + r * h;
            residual_row<O, X>(orow, pres + r * h, px + r * h, pbias, h, static_cast<uint64_t>(element_offset + r * h),
                               draw, p);
            const float* xr = widened_row<O>(orow, h, xbuf.data());  // the row as stored
            if (pm)
                layernorm_row<O>(xr, h, pw, pb, eps, pn + r * h, obuf.data(), pm[r], pr[r]);
            else
                rmsnorm_row<O>(xr, h, pw, eps, pn + r * h, obuf.data(), pr[r]);
        }
    }
}

template <DType X, DType O>
void rmsnorm_backward_as(TensorView dx, TensorView dw, TensorView dout, TensorView x, TensorView rstd, TensorView w,
                         bool accumulate_dx) {
    const int64_t rows = x.rows(), h = x.cols();
    const auto* px = elements<X>(x);
    const auto* pd = elements<O>(dout);
    auto* pdx = elements<X>(dx);
    const float *pw = widened(w, Scratch::Weight).f32(), *pr = rstd.f32();
    float* pdw = dw.f32();

    const int64_t blocks = (h + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t c0 = blk * kColBlock, c1 = std::min(h, c0 + kColBlock);
        float gw[kColBlock] = {}, xbuf[kColBlock], dbuf[kColBlock];
        for (int64_t r = 0; r < rows; ++r) {
            const float* xr = widened_block<X>(px + r * h, c0, c1, xbuf);
            const float* dr = widened_block<O>(pd + r * h, c0, c1, dbuf);
            const float rs = pr[r];
#pragma omp simd
            for (int64_t c = c0; c < c1; ++c) gw[c - c0] += dr[c] * xr[c] * rs;
        }
        for (int64_t c = c0; c < c1; ++c) pdw[c] += gw[c - c0];
    }

#pragma omp parallel
    {
        BackwardRows<X, O> buf(h);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const float* xr = widened_row<X>(px + r * h, h, buf.x.data());
            const float* dr = widened_row<O>(pd + r * h, h, buf.d.data());
            const float rs = pr[r];
            float mean_gx = 0;
#pragma omp simd reduction(+ : mean_gx)
            for (int64_t c = 0; c < h; ++c) mean_gx += dr[c] * pw[c] * xr[c] * rs;
            mean_gx /= static_cast<float>(h);
            float* dxr = buf.dx_row(pdx + r * h, accumulate_dx);
            if (accumulate_dx) {
#pragma omp simd
                for (int64_t c = 0; c < h; ++c) dxr[c] += rs * (dr[c] * pw[c] - xr[c] * rs * mean_gx);
            } else {
#pragma omp simd
                for (int64_t c = 0; c < h; ++c) dxr[c] = rs * (dr[c] * pw[c] - xr[c] * rs * mean_gx);
            }
            stored_row<X>(pdx + r * h, dxr, h);
        }
    }
}

}  // namespace

// One dispatch per op on (x's storage, out's or dout's storage); dx is stored like x (the checks).
void layernorm_forward(OpContext&, TensorView out, TensorView mean, TensorView rstd, TensorView x, TensorView w,
                       TensorView b, float eps) {
    with_storages(x.dtype, out.dtype, [&](auto xt, auto ot) {
        layernorm_forward_as<decltype(xt)::value, decltype(ot)::value>(out, mean, rstd, x, w, b, eps);
    });
}

// dw and db may be f16 (the f16 gradient arena): accumulated in fp32 scratch and rounded once.
void layernorm_backward(OpContext&, TensorView dx, TensorView dw, TensorView db, TensorView dout, TensorView x,
                        TensorView mean, TensorView rstd, TensorView w, bool accumulate_dx) {
    const TensorView dw32 = widened(dw, Scratch::Grad), db32 = widened(db, Scratch::GradBias);
    with_storages(x.dtype, dout.dtype, [&](auto xt, auto ot) {
        layernorm_backward_as<decltype(xt)::value, decltype(ot)::value>(dx, dw32, db32, dout, x, mean, rstd, w,
                                                                        accumulate_dx);
    });
    narrow(dw, dw32);
    narrow(db, db32);
}

void rmsnorm_forward(OpContext&, TensorView out, TensorView rstd, TensorView x, TensorView w, float eps) {
    with_storages(x.dtype, out.dtype, [&](auto xt, auto ot) {
        rmsnorm_forward_as<decltype(xt)::value, decltype(ot)::value>(out, rstd, x, w, eps);
    });
}

void rmsnorm_backward(OpContext&, TensorView dx, TensorView dw, TensorView dout, TensorView x, TensorView rstd,
                      TensorView w, bool accumulate_dx) {
    const TensorView dw32 = widened(dw, Scratch::Grad);
    with_storages(x.dtype, dout.dtype, [&](auto xt, auto ot) {
        rmsnorm_backward_as<decltype(xt)::value, decltype(ot)::value>(dx, dw32, dout, x, rstd, w, accumulate_dx);
    });
    narrow(dw, dw32);
}

// The norm's output is stored like out (the checks), so one dispatch on (out's storage, x's storage).
void bias_dropout_add_norm_forward(OpContext&, TensorView out, TensorView norm_out, TensorView mean, TensorView rstd,
                                   TensorView residual, TensorView x, TensorView bias, TensorView w, TensorView b,
                                   float p, RngStream rng, int64_t element_offset, float eps) {
    with_storages(out.dtype, x.dtype, [&](auto ot, auto xt) {
        residual_norm_forward_as<decltype(ot)::value, decltype(xt)::value>(out, norm_out, mean, rstd, residual, x, bias,
                                                                           w, b, p, rng, element_offset, eps);
    });
}

}  // namespace mwb::cpu
