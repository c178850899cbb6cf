#pragma once
// The row and column reductions of ops_elementwise.cu (contracts: ops.inc): LayerNorm and RMSNorm
// forward and backward (one block per row, a fixed tree over the row), the column sums of bias and
// norm-parameter gradients (fixed chunks of kRowChunk rows, then the chunks in order) and the bias
// add of the unfused linear layers. Activations (x, y, dy, dx) in storage S (the backward's dy in SD:
// S, or f32 beside 16-bit x under tensor parallelism), the norm's weights in W
// (storage.cuh), loaded and widened; statistics (mean, rstd) in fp32, parameter gradients in fp32 or
// f16 (k_sum_partials' SO); fp32 arithmetic and one rounding per stored element, where the CPU op
// rounds. No atomics: bit-identical run to run. Plain CUDA C++ without runtime calls, so that test_kernels_norm_emulated runs this
// source on CPU threads.
#include "elementwise_kernels.cuh"
#include "kernel_common.cuh"
#include "storage.cuh"

#include "mwb/kernels/philox.h"

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

// ---- row loops: V consecutive columns per access ------------------------------------------------------
// A row kernel's thread walks columns c = V·threadIdx.x, V·(threadIdx.x + blockDim.x), ...: V = 1 is one
// element at a time; V = storage::kPerAccess<S> (4 floats or 8 16-bit values) moves 16 bytes per access
// of each activation. The launcher picks V (row_width): the wide loop needs h % V == 0 and every row
// pointer 16-byte aligned. Each thread sums its V values in order, then the next access's: the row's
// fp32 sums are taken in another order than V = 1's (the emulated suite holds both to the float64-
// rounded CPU op, to rounding).

/// One row of LayerNorm: orow (S) = (x − mean)·rstd·w + b from xr (S), *mean and *rstd written by
/// thread 0. The body of k_layernorm_fwd and of the fused residual + norm (k_residual_norm_fwd).
template <int V, class S, class W>
__device__ __forceinline__ void layernorm_row(typename S::type* orow, float* mean, float* rstd,
                                              const typename S::type* xr, const typename W::type* w,
                                              const typename W::type* b, int64_t h, float eps, float* sh) {
    float s = 0;
    for (int64_t c = V * static_cast<int64_t>(threadIdx.x); c < h; c += V * static_cast<int64_t>(blockDim.x)) {
        const kernel::Floats<V> xv = storage::load_n<S, V>(xr + c);
#pragma unroll
        for (int k = 0; k < V; ++k) s += xv.v[k];
    }
    const float mu = block_sum(s, sh) / static_cast<float>(h);
    float v = 0;
    for (int64_t c = V * static_cast<int64_t>(threadIdx.x); c < h; c += V * static_cast<int64_t>(blockDim.x)) {
        const kernel::Floats<V> xv = storage::load_n<S, V>(xr + c);
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const float d = xv.v[k] - mu;
            v += d * d;
        }
    }
    const float rs = 1.0f / sqrtf(block_sum(v, sh) / static_cast<float>(h) + eps);
    for (int64_t c = V * static_cast<int64_t>(threadIdx.x); c < h; c += V * static_cast<int64_t>(blockDim.x)) {
        const kernel::Floats<V> xv = storage::load_n<S, V>(xr + c), wv = storage::load_n<W, V>(w + c),
                                bv = storage::load_n<W, V>(b + c);
        kernel::Floats<V> o;
#pragma unroll
        for (int k = 0; k < V; ++k) o.v[k] = (xv.v[k] - mu) * rs * wv.v[k] + bv.v[k];
        storage::store_n<S, V>(orow + c, o);
    }
    if (threadIdx.x == 0) {
        *mean = mu;
        *rstd = rs;
    }
}

/// One row of RMSNorm: orow = x·rstd·w, *rstd written by thread 0 (as layernorm_row).
template <int V, class S, class W>
__device__ __forceinline__ void rmsnorm_row(typename S::type* orow, float* rstd, const typename S::type* xr,
                                            const typename W::type* w, int64_t h, float eps, float* sh) {
    float s = 0;
    for (int64_t c = V * static_cast<int64_t>(threadIdx.x); c < h; c += V * static_cast<int64_t>(blockDim.x)) {
        const kernel::Floats<V> xv = storage::load_n<S, V>(xr + c);
#pragma unroll
        for (int k = 0; k < V; ++k) s += xv.v[k] * xv.v[k];
    }
    const float rs = 1.0f / sqrtf(block_sum(s, sh) / static_cast<float>(h) + eps);
    for (int64_t c = V * static_cast<int64_t>(threadIdx.x); c < h; c += V * static_cast<int64_t>(blockDim.x)) {
        const kernel::Floats<V> xv = storage::load_n<S, V>(xr + c), wv = storage::load_n<W, V>(w + c);
        kernel::Floats<V> o;
#pragma unroll
        for (int k = 0; k < V; ++k) o.v[k] = xv.v[k] * rs * wv.v[k];
        storage::store_n<S, V>(orow + c, o);
    }
    if (threadIdx.x == 0) *rstd = rs;
}

template <class S, class W, int V = 1>
__global__ void k_layernorm_fwd(typename S::type* out, float* mean, float* rstd, const typename S::type* x,
                                const typename W::type* w, const typename W::type* b, int64_t h, float eps) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    layernorm_row<V, S, W>(out + r * h, mean + r, rstd + r, x + r * h, w, b, h, eps, sh);
}

template <class S, class W, int V = 1>
__global__ void k_rmsnorm_fwd(typename S::type* out, float* rstd, const typename S::type* x, const typename W::type* w,
                              int64_t h, float eps) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    rmsnorm_row<V, S, W>(out + r * h, rstd + r, x + r * h, w, h, eps, sh);
}

/// The dropout multipliers of global indices first … first + V − 1: 1 when dropout is off, else 0 or
/// 1/(1 − p) from one Philox draw per group of four indices, as k_dropout and the CPU draw them
/// (V % 4 == 0 needs first % 4 == 0: one draw per four).
template <int V>
__device__ __forceinline__ void dropout_multipliers(const RngStream& rng, const elementwise::DropoutArgs& a,
                                                    int64_t first, float (&m)[V]) {
    if (!a.enabled) {
#pragma unroll
        for (int k = 0; k < V; ++k) m[k] = 1.0f;
    } else if constexpr (V % 4 == 0) {
#pragma unroll
        for (int j = 0; j < V; j += 4) {
            const Philox4 d = philox_draw(rng, static_cast<uint64_t>(first + j) >> 2);
#pragma unroll
            for (int k = 0; k < 4; ++k) m[j + k] = d.v[k] < a.threshold ? a.scale : 0.0f;
        }
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const uint64_t i = static_cast<uint64_t>(first + k);
            m[k] = philox_draw(rng, i >> 2).v[i & 3] < a.threshold ? a.scale : 0.0f;
        }
    }
}

/// out[r] = residual[r] + dropout(x[r] + bias) over row r's columns, VR at a time (k_dropout's
/// arithmetic: one rounding into S per element).
template <int VR, class S, class SX, class W>
__device__ __forceinline__ void residual_row(typename S::type* out, const typename S::type* residual,
                                             const typename SX::type* x, const typename W::type* bias, int64_t r,
                                             int64_t h, const RngStream& rng, const elementwise::DropoutArgs& a) {
    for (int64_t c = VR * static_cast<int64_t>(threadIdx.x); c < h; c += VR * static_cast<int64_t>(blockDim.x)) {
        const int64_t i = r * h + c;
        kernel::Floats<VR> v = storage::load_n<SX, VR>(x + i);
        if (bias) {
            const kernel::Floats<VR> bv = storage::load_n<W, VR>(bias + c);
#pragma unroll
            for (int k = 0; k < VR; ++k) v.v[k] += bv.v[k];
        }
        const kernel::Floats<VR> res = storage::load_n<S, VR>(residual + i);
        float m[VR];
        dropout_multipliers<VR>(rng, a, a.offset + i, m);
        kernel::Floats<VR> o;
#pragma unroll
        for (int k = 0; k < VR; ++k) o.v[k] = res.v[k] + v.v[k] * m[k];
        storage::store_n<S, VR>(out + i, o);
    }
}

/// bias_dropout_add_norm_forward, one block per row: out's row = residual + dropout(x + bias) (bias may
/// be null), rounded into S, then the next norm of that row as stored: LayerNorm (mean non-null) or
/// RMSNorm, the body of k_layernorm_fwd / k_rmsnorm_fwd with the same V (the launcher picks V as the
/// unfused norm's launcher would for out, norm_out, w, b: the same bits). The residual pass moves V
/// columns per access when `wide_residual` (residual, x, bias aligned too), else one. out, residual and
/// norm_out in S, x in SX, bias, w, b in W.
template <class S, class SX, class W, int V = 1>
__global__ void k_residual_norm_fwd(typename S::type* out, typename S::type* norm_out, float* mean, float* rstd,
                                    const typename S::type* residual, const typename SX::type* x,
                                    const typename W::type* bias, const typename W::type* w,
                                    const typename W::type* b, int64_t h, float eps, elementwise::DropoutArgs a,
                                    int wide_residual) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const RngStream rng = a.enabled ? resolved(a.rng) : a.rng;
    if (V > 1 && wide_residual)
        residual_row<V, S, SX, W>(out, residual, x, bias, r, h, rng, a);
    else
        residual_row<1, S, SX, W>(out, residual, x, bias, r, h, rng, a);
    __syncthreads();  // the row as stored, each column written by one thread, read by another
    if (mean)
        layernorm_row<V, S, W>(norm_out + r * h, mean + r, rstd + r, out + r * h, w, b, h, eps, sh);
    else
        rmsnorm_row<V, S, W>(norm_out + r * h, rstd + r, out + r * h, w, h, eps, sh);
}

/// dx of LayerNorm (mean == nullptr: RMSNorm), one block per row; `accumulate`: dx += the gradient
/// (rounded once). dout in storage SD: x's (S), or f32 beside 16-bit x (under tensor parallelism the
/// norm-input gradient is the f32 reduction buffer); V columns per access of every tensor, an f32 dout
/// beside 16-bit x (V = 8) in two 16-byte accesses (load_n). Each thread reads dout[c] before it
/// writes dx[c], so dx may alias dout when SD is S (the launcher refuses an alias of another dtype).
template <class S, class W, int V = 1, class SD = S>
__global__ void k_norm_bwd_dx(typename S::type* dx, const typename SD::type* dout, const typename S::type* x,
                              const float* mean, const float* rstd, const typename W::type* w, int64_t h,
                              int accumulate) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const typename S::type* xr = x + r * h;
    const typename SD::type* dr = dout + r * h;
    const float mu = mean ? mean[r] : 0.0f, rs = rstd[r];
    float sg = 0, sgx = 0;
    for (int64_t c = V * static_cast<int64_t>(threadIdx.x); c < h; c += V * static_cast<int64_t>(blockDim.x)) {
        const kernel::Floats<V> dv = storage::load_n<SD, V>(dr + c), wv = storage::load_n<W, V>(w + c),
                                xv = storage::load_n<S, V>(xr + c);
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const float g = dv.v[k] * wv.v[k];
            sg += g;
            sgx += g * (xv.v[k] - mu) * rs;
        }
    }
    const float mean_g = mean ? block_sum(sg, sh) / static_cast<float>(h) : 0.0f;
    const float mean_gx = block_sum(sgx, sh) / static_cast<float>(h);
    typename S::type* dxr = dx + r * h;
    for (int64_t c = V * static_cast<int64_t>(threadIdx.x); c < h; c += V * static_cast<int64_t>(blockDim.x)) {
        const kernel::Floats<V> dv = storage::load_n<SD, V>(dr + c), wv = storage::load_n<W, V>(w + c),
                                xv = storage::load_n<S, V>(xr + c);
        kernel::Floats<V> o;
        if (accumulate) o = storage::load_n<S, V>(dxr + c);
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const float v = rs * (dv.v[k] * wv.v[k] - mean_g - (xv.v[k] - mu) * rs * mean_gx);
            o.v[k] = accumulate ? o.v[k] + v : v;
        }
        storage::store_n<S, V>(dxr + c, o);
    }
}

/// Partials of dw (Σ dout·x̂) and db (Σ dout) over one chunk of rows; mean == nullptr: RMSNorm. x in
/// S, dout in SD (S, or f32 beside 16-bit x: as k_norm_bwd_dx).
template <class S, class SD = S>
__global__ void k_norm_bwd_partials(float* pw, float* pb, const typename SD::type* dout, const typename S::type* x,
                                    const float* mean, const float* rstd, int64_t rows, int64_t h) {
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= h) return;
    const int64_t r0 = blockIdx.y * kRowChunk, r1 = min(rows, r0 + kRowChunk);
    float gw = 0, gb = 0;
    for (int64_t r = r0; r < r1; ++r) {
        const float d = SD::load(dout[r * h + c]);
        gw += d * (S::load(x[r * h + c]) - (mean ? mean[r] : 0.0f)) * rstd[r];
        gb += d;
    }
    pw[blockIdx.y * h + c] = gw;
    if (pb) pb[blockIdx.y * h + c] = gb;
}

}  // namespace mwb::cuda::norm
