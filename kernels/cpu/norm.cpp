// LayerNorm and RMSNorm, forward and backward. Row statistics in float; parameter gradients are summed
// column-block-wise over rows in order (deterministic for any thread count). x, out and their
// gradients may be 16-bit (the residual stream and norm outputs of a 16-bit run): each op is a template
// on their storage, rows are widened into f32 scratch and the f32 arithmetic runs unchanged, the output
// rounded once (storage.h). 16-bit gamma/beta (the weights' working copy in bf16/fp16 runs) are widened
// once per call (H values, exact).
#include "cpu_ops.h"
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
        for (int64_t r = 0; r < rows; ++r) {
            const float* xr = widened_row<X>(px + r * h, h, xbuf.data());
            float sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int64_t c = 0; c < h; ++c) sum += xr[c];
            const float mu = sum / static_cast<float>(h);
            float var = 0;
#pragma omp simd reduction(+ : var)
            for (int64_t c = 0; c < h; ++c) var += (xr[c] - mu) * (xr[c] - mu);
            const float rs = 1.0f / std::sqrt(var / static_cast<float>(h) + eps);
            float* orow = computed_row<O>(po + r * h, obuf.data());
#pragma omp simd
            for (int64_t c = 0; c < h; ++c) orow[c] = (xr[c] - mu) * rs * pw[c] + pb[c];
            stored_row<O>(po + r * h, orow, h);
            pm[r] = mu;
            pr[r] = rs;
        }
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
        for (int64_t r = 0; r < rows; ++r) {
            const float* xr = widened_row<X>(px + r * h, h, xbuf.data());
            float ss = 0;
#pragma omp simd reduction(+ : ss)
            for (int64_t c = 0; c < h; ++c) ss += xr[c] * xr[c];
            const float rs = 1.0f / std::sqrt(ss / static_cast<float>(h) + eps);
            float* orow = computed_row<O>(po + r * h, obuf.data());
#pragma omp simd
            for (int64_t c = 0; c < h; ++c) orow[c] = xr[c] * rs * pw[c];
            stored_row<O>(po + r * h, orow, h);
            pr[r] = rs;
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

}  // namespace mwb::cpu
