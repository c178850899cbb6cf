// GEMM on OpenBLAS and the linear layer built on it.
#include "cpu_ops.h"

#include "mwb/kernels/error.h"

#include <cblas.h>

namespace mwb::cpu {

namespace {

/// Σ over rows of a row-major (rows, cols) matrix, added to out (cols). Columns are split across
/// threads and every column is summed top to bottom, so the order is fixed.
void add_column_sums(float* out, const float* m, int64_t rows, int64_t cols) {
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t c0 = blk * kBlock, c1 = std::min(cols, c0 + kBlock);
        float acc[kBlock] = {};
        for (int64_t r = 0; r < rows; ++r) {
            const float* row = m + r * cols;
#pragma omp simd
            for (int64_t c = c0; c < c1; ++c) acc[c - c0] += row[c];
        }
        for (int64_t c = c0; c < c1; ++c) out[c] += acc[c - c0];
    }
}

}  // namespace

void matmul(OpContext&, TensorView c, TensorView a, TensorView b, bool trans_a, bool trans_b, float alpha,
            float beta) {
    MWB_CHECK(a.ndim == 2 && b.ndim == 2 && c.ndim == 2, "matmul: expected 2-D tensors, got c={} a={} b={}",
              c.describe(), a.describe(), b.describe());
    const int64_t m = trans_a ? a.dim(1) : a.dim(0);
    const int64_t k = trans_a ? a.dim(0) : a.dim(1);
    const int64_t kb = trans_b ? b.dim(1) : b.dim(0);
    const int64_t n = trans_b ? b.dim(0) : b.dim(1);
    MWB_CHECK(k == kb && c.dim(0) == m && c.dim(1) == n, "matmul: shapes do not agree: c={} a{}={} b{}={}",
              c.describe(), trans_a ? "ᵀ" : "", a.describe(), trans_b ? "ᵀ" : "", b.describe());
    if (m == 0 || n == 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a.f32(),
                static_cast<blasint>(a.dim(1)), b.f32(), static_cast<blasint>(b.dim(1)), beta, c.f32(),
                static_cast<blasint>(n));
}

void linear_forward(OpContext& ctx, TensorView y, TensorView x, TensorView w, TensorView bias) {
    const int64_t rows = x.rows(), in = x.cols(), out = w.dim(0);
    MWB_CHECK(w.ndim == 2 && w.dim(1) == in && y.rows() == rows && y.cols() == out,
              "linear_forward: y={} x={} w={}", y.describe(), x.describe(), w.describe());
    MWB_CHECK(bias.empty() || bias.numel() == out, "linear_forward: bias {} for {} outputs", bias.describe(), out);
    TensorView y2 = reshaped(y, {rows, out});
    if (!bias.empty()) {
        // Start from the bias and let the GEMM accumulate onto it: one pass over y instead of two.
        float* py = y2.f32();
        const float* pb = bias.f32();
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
            for (int64_t c = 0; c < out; ++c) py[r * out + c] = pb[c];
        }
    }
    matmul(ctx, y2, reshaped(x, {rows, in}), w, false, true, 1.0f, bias.empty() ? 0.0f : 1.0f);
}

void linear_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dbias, TensorView dy, TensorView x,
                     TensorView w, bool accumulate_dx) {
    const int64_t rows = x.rows(), in = x.cols(), out = w.dim(0);
    MWB_CHECK(dy.rows() == rows && dy.cols() == out && same_shape(dw, w),
              "linear_backward: dy={} x={} w={} dw={}", dy.describe(), x.describe(), w.describe(), dw.describe());
    const TensorView dy2 = reshaped(dy, {rows, out});
    if (!dx.empty()) {
        MWB_CHECK(dx.numel() == rows * in, "linear_backward: dx={} for x={}", dx.describe(), x.describe());
        matmul(ctx, reshaped(dx, {rows, in}), dy2, w, false, false, 1.0f, accumulate_dx ? 1.0f : 0.0f);
    }
    matmul(ctx, dw, dy2, reshaped(x, {rows, in}), true, false, 1.0f, 1.0f);
    if (!dbias.empty()) {
        MWB_CHECK(dbias.numel() == out, "linear_backward: dbias {} for {} outputs", dbias.describe(), out);
        add_column_sums(dbias.f32(), dy2.f32(), rows, out);
    }
}

}  // namespace mwb::cpu
