// LayerNorm and RMSNorm, forward and backward. Row statistics in float; parameter gradients are summed
// column-block-wise over rows in order (deterministic for any thread count). 16-bit gamma/beta (the
// weights' working copy in bf16/fp16 runs) are widened once per call (H values, exact), so the row
// loops are the fp32 ones.
#include "cpu_ops.h"
#include "storage.h"

#include <cmath>

namespace mwb::cpu {

namespace {

constexpr int64_t kColBlock = 64;

}  // namespace

void layernorm_forward(OpContext&, TensorView out, TensorView mean, TensorView rstd, TensorView x, TensorView w,
                       TensorView b, float eps) {
    const int64_t rows = x.rows(), h = x.cols();
    const float *px = x.f32(), *pw = widened(w, Scratch::Weight).f32(), *pb = widened(b, Scratch::Bias).f32();
    float *po = out.f32(), *pm = mean.f32(), *pr = rstd.f32();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = px + r * h;
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < h; ++c) sum += xr[c];
        const float mu = sum / static_cast<float>(h);
        float var = 0;
#pragma omp simd reduction(+ : var)
        for (int64_t c = 0; c < h; ++c) var += (xr[c] - mu) * (xr[c] - mu);
        const float rs = 1.0f / std::sqrt(var / static_cast<float>(h) + eps);
        float* orow = po + r * h;
#pragma omp simd
        for (int64_t c = 0; c < h; ++c) orow[c] = (xr[c] - mu) * rs * pw[c] + pb[c];
        pm[r] = mu;
        pr[r] = rs;
    }
}

void layernorm_backward(OpContext&, TensorView dx, TensorView dw, TensorView db, TensorView dout, TensorView x,
                        TensorView mean, TensorView rstd, TensorView w, bool accumulate_dx) {
    const int64_t rows = x.rows(), h = x.cols();
    const float *px = x.f32(), *pd = dout.f32(), *pw = widened(w, Scratch::Weight).f32(), *pm = mean.f32(),
                *pr = rstd.f32();
    float *pdx = dx.f32(), *pdw = dw.f32(), *pdb = db.f32();

    // Parameter gradients first (dx may alias dout).
    const int64_t blocks = (h + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t c0 = blk * kColBlock, c1 = std::min(h, c0 + kColBlock);
        float gw[kColBlock] = {}, gb[kColBlock] = {};
        for (int64_t r = 0; r < rows; ++r) {
            const float *xr = px + r * h, *dr = pd + r * h;
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

#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = px + r * h, *dr = pd + r * h;
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
        float* dxr = pdx + r * h;
        if (accumulate_dx) {
#pragma omp simd
            for (int64_t c = 0; c < h; ++c) dxr[c] += rs * (dr[c] * pw[c] - mean_g - (xr[c] - mu) * rs * mean_gx);
        } else {
#pragma omp simd
            for (int64_t c = 0; c < h; ++c) dxr[c] = rs * (dr[c] * pw[c] - mean_g - (xr[c] - mu) * rs * mean_gx);
        }
    }
}

void rmsnorm_forward(OpContext&, TensorView out, TensorView rstd, TensorView x, TensorView w, float eps) {
    const int64_t rows = x.rows(), h = x.cols();
    const float *px = x.f32(), *pw = widened(w, Scratch::Weight).f32();
    float *po = out.f32(), *pr = rstd.f32();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = px + r * h;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int64_t c = 0; c < h; ++c) ss += xr[c] * xr[c];
        const float rs = 1.0f / std::sqrt(ss / static_cast<float>(h) + eps);
        float* orow = po + r * h;
#pragma omp simd
        for (int64_t c = 0; c < h; ++c) orow[c] = xr[c] * rs * pw[c];
        pr[r] = rs;
    }
}

void rmsnorm_backward(OpContext&, TensorView dx, TensorView dw, TensorView dout, TensorView x, TensorView rstd,
                      TensorView w, bool accumulate_dx) {
    const int64_t rows = x.rows(), h = x.cols();
    const float *px = x.f32(), *pd = dout.f32(), *pw = widened(w, Scratch::Weight).f32(), *pr = rstd.f32();
    float *pdx = dx.f32(), *pdw = dw.f32();

    const int64_t blocks = (h + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t c0 = blk * kColBlock, c1 = std::min(h, c0 + kColBlock);
        float gw[kColBlock] = {};
        for (int64_t r = 0; r < rows; ++r) {
            const float *xr = px + r * h, *dr = pd + r * h;
            const float rs = pr[r];
#pragma omp simd
            for (int64_t c = c0; c < c1; ++c) gw[c - c0] += dr[c] * xr[c] * rs;
        }
        for (int64_t c = c0; c < c1; ++c) pdw[c] += gw[c - c0];
    }

#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = px + r * h, *dr = pd + r * h;
        const float rs = pr[r];
        float mean_gx = 0;
#pragma omp simd reduction(+ : mean_gx)
        for (int64_t c = 0; c < h; ++c) mean_gx += dr[c] * pw[c] * xr[c] * rs;
        mean_gx /= static_cast<float>(h);
        float* dxr = pdx + r * h;
        if (accumulate_dx) {
#pragma omp simd
            for (int64_t c = 0; c < h; ++c) dxr[c] += rs * (dr[c] * pw[c] - xr[c] * rs * mean_gx);
        } else {
#pragma omp simd
            for (int64_t c = 0; c < h; ++c) dxr[c] = rs * (dr[c] * pw[c] - xr[c] * rs * mean_gx);
        }
    }
}

}  // namespace mwb::cpu
