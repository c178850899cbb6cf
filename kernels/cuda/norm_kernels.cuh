#pragma once
// The row and column reductions of ops_elementwise.cu (contracts: ops.inc): LayerNorm and RMSNorm
// forward and backward (one block per row, a fixed tree over the row), the column sums of bias and
// norm-parameter gradients (fixed chunks of kRowChunk rows, then the chunks in order) and the bias
// add of the unfused linear layers. Activations (x, y, dy, dx) in storage S, the norm's weights in W
// (storage.cuh), loaded and widened; statistics (mean, rstd) in fp32, parameter gradients in fp32 or
// f16 (k_sum_partials' SO); fp32 arithmetic and one rounding per stored element, where the CPU op
// rounds. No atomics: bit-identical run to run. Plain CUDA C++ without runtime calls, so that test_kernels_norm_emulated runs this
// source on CPU threads.
#include "kernel_common.cuh"
#include "storage.cuh"

#include <cmath>
#include <cstdint>

namespace mwb::cuda::norm {

using kernel::block_sum;
using kernel::first_index;
using kernel::grid_stride;

constexpr int64_t kRowChunk = 256;  // rows per partial of a column reduction
constexpr int kNormThreads = 256;

/// partial[chunk, c] = Σ x[r, c] over the chunk's rows; grid (cols / 128, chunks) of 128 threads.
template <class S>
__global__ void k_column_partials(const typename S::type* x, int64_t rows, int64_t cols, float* partial) {
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= cols) return;
    const int64_t r0 = blockIdx.y * kRowChunk, r1 = min(rows, r0 + kRowChunk);
    float s = 0;
    for (int64_t r = r0; r < r1; ++r) s += S::load(x[r * cols + c]);
    partial[blockIdx.y * cols + c] = s;
}

/// out[c] += Σ_k partial[k, c] for the `chunks` partials in order; out in storage SO: f32, or an f16
/// parameter gradient (the f16 gradient arena: widened, the fp32 sum added, rounded once per call).
template <class SO = storage::F32>
__global__ void k_sum_partials(typename SO::type* out, const float* partial, int64_t chunks, int64_t cols) {
    for (int64_t c = first_index<int64_t>(); c < cols; c += grid_stride<int64_t>()) {
        float s = 0;
        for (int64_t k = 0; k < chunks; ++k) s += partial[k * cols + c];
        out[c] = SO::store(SO::load(out[c]) + s);
    }
}

/// out[r, c] = in[r, c] + bias[c] (out may be in: an f32 GEMM result, or its f32 staging before the
/// one rounding into a 16-bit out).
template <class SO, class SI, class W>
__global__ void k_add_bias_rows(typename SO::type* out, const typename SI::type* in, const typename W::type* bias,
                                int64_t rows, int64_t cols) {
    for (int64_t i = first_index<int64_t>(); i < rows * cols; i += grid_stride<int64_t>())
        out[i] = SO::store(SI::load(in[i]) + W::load(bias[i % cols]));
}

template <class S, class W>
__global__ void k_layernorm_fwd(typename S::type* out, float* mean, float* rstd, const typename S::type* x,
                                const typename W::type* w, const typename W::type* b, int64_t h, float eps) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const typename S::type* xr = x + r * h;
    float s = 0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) s += S::load(xr[c]);
    const float mu = block_sum(s, sh) / static_cast<float>(h);
    float v = 0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
        const float d = S::load(xr[c]) - mu;
        v += d * d;
    }
    const float rs = 1.0f / sqrtf(block_sum(v, sh) / static_cast<float>(h) + eps);
    typename S::type* orow = out + r * h;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x)
        orow[c] = S::store((S::load(xr[c]) - mu) * rs * W::load(w[c]) + W::load(b[c]));
    if (threadIdx.x == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

template <class S, class W>
__global__ void k_rmsnorm_fwd(typename S::type* out, float* rstd, const typename S::type* x, const typename W::type* w,
                              int64_t h, float eps) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const typename S::type* xr = x + r * h;
    float s = 0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
        const float v = S::load(xr[c]);
        s += v * v;
    }
    const float rs = 1.0f / sqrtf(block_sum(s, sh) / static_cast<float>(h) + eps);
    typename S::type* orow = out + r * h;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) orow[c] = S::store(S::load(xr[c]) * rs * W::load(w[c]));
    if (threadIdx.x == 0) rstd[r] = rs;
}

/// dx of LayerNorm (mean == nullptr: RMSNorm), one block per row; `accumulate`: dx += the gradient
/// (rounded once). Each thread reads dout[c] before it writes dx[c], so dx may alias dout.
template <class S, class W>
__global__ void k_norm_bwd_dx(typename S::type* dx, const typename S::type* dout, const typename S::type* x,
                              const float* mean, const float* rstd, const typename W::type* w, int64_t h,
                              int accumulate) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const typename S::type *xr = x + r * h, *dr = dout + r * h;
    const float mu = mean ? mean[r] : 0.0f, rs = rstd[r];
    float sg = 0, sgx = 0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
        const float g = S::load(dr[c]) * W::load(w[c]);
        sg += g;
        sgx += g * (S::load(xr[c]) - mu) * rs;
    }
    const float mean_g = mean ? block_sum(sg, sh) / static_cast<float>(h) : 0.0f;
    const float mean_gx = block_sum(sgx, sh) / static_cast<float>(h);
    typename S::type* dxr = dx + r * h;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
        const float v = rs * (S::load(dr[c]) * W::load(w[c]) - mean_g - (S::load(xr[c]) - mu) * rs * mean_gx);
        dxr[c] = S::store(accumulate ? S::load(dxr[c]) + v : v);
    }
}

/// Partials of dw (Σ dout·x̂) and db (Σ dout) over one chunk of rows; mean == nullptr: RMSNorm.
template <class S>
__global__ void k_norm_bwd_partials(float* pw, float* pb, const typename S::type* dout, const typename S::type* x,
                                    const float* mean, const float* rstd, int64_t rows, int64_t h) {
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= h) return;
    const int64_t r0 = blockIdx.y * kRowChunk, r1 = min(rows, r0 + kRowChunk);
    float gw = 0, gb = 0;
    for (int64_t r = r0; r < r1; ++r) {
        const float d = S::load(dout[r * h + c]);
        gw += d * (S::load(x[r * h + c]) - (mean ? mean[r] : 0.0f)) * rstd[r];
        gb += d;
    }
    pw[blockIdx.y * h + c] = gw;
    if (pb) pb[blockIdx.y * h + c] = gb;
}

}  // namespace mwb::cuda::norm
