#pragma once
// The causal attention kernels of ops_attention.cu, flash-attention style (see there). Plain CUDA C++
// without runtime calls, so that the same source also runs on the CPU: the test
// test_kernels_attention_emulated executes these kernels with host threads for CUDA threads and a
// barrier for __syncthreads (tests/kernels/cuda_emulation.h) and compares them with the CPU op, in CI,
// where there is no GPU. Every kernel is templated on the storage element T of qkv, the output and
// their gradients (float, bf16 or fp16): fp32 arithmetic, each output rounded once (load_value,
// store_value), the log-sum-exps and deltas fp32.
#include "mwb/kernels/ops.h"
#include "mwb/kernels/philox.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace mwb::cuda::attention {

constexpr int kRows = 64;  // query (or key) rows per block, one per thread
constexpr int kTile = 32;  // keys (or queries) per shared-memory tile

/// One call's shapes: S positions, B sequences, A query heads in G key/value groups of A/G (G = A:
/// multi-head attention), head dim D. A qkv row (s, b) holds per group [q_g0 … q_g(A/G−1) | k_g | v_g].
struct Geometry {
    int64_t S, B, A, G, D;
    int64_t ld_qkv, ld_out;  // floats from position s to s + 1: B·(A + 2G)·D and B·A·D
    int per_group;           // A/G (head indices in 32-bit arithmetic: no 64-bit divisions on the device)
    int total_heads, head_offset;
    float scale;
    RngStream rng;
    uint32_t threshold;
    float keep_scale;
    int dropout;
};

/// The kernels' geometry of one call (ops_attention.cu has validated the tensors); host code.
inline Geometry make_geometry(int64_t S, int64_t D, const AttentionParams& p) {
    Geometry g{};
    g.S = S;
    g.B = p.batch;
    g.A = p.num_heads;
    g.G = p.groups();
    g.D = D;
    g.ld_qkv = g.B * (g.A + 2 * g.G) * D;
    g.ld_out = g.B * g.A * D;
    g.per_group = static_cast<int>(g.A / g.G);
    g.total_heads = p.total_heads;
    g.head_offset = p.head_offset;
    g.scale = p.softmax_scale;
    g.rng = p.rng;
    g.threshold = dropout_keep_threshold(p.dropout_p);
    g.keep_scale = p.dropout_p < 1.0f ? 1.0f / (1.0f - p.dropout_p) : 0.0f;
    g.dropout = p.dropout_p > 0.0f;
    return g;
}

/// The storage element T of qkv, the output and their gradients (float, __nv_bfloat16 or __half):
/// loaded to fp32 for the arithmetic, each output rounded once when stored (the CPU op's narrow).
__device__ __forceinline__ float load_value(float x) { return x; }
__device__ __forceinline__ float load_value(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float load_value(__half x) { return __half2float(x); }
template <class T>
__device__ __forceinline__ T store_value(float x) {
    if constexpr (std::is_same_v<T, float>) return x;
    else if constexpr (std::is_same_v<T, __half>) return __float2half(x);
    else return __float2bfloat16(x);
}

/// 16 bytes from src to dst, both 16-byte aligned: one 128-bit load and store on the device.
__device__ __forceinline__ void copy16(void* dst, const void* src) {
#if defined(__CUDACC__)
    *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
#else
    std::memcpy(dst, src, 16);  // the CPU emulation: the same bytes, without type punning
#endif
}

__device__ __forceinline__ int tile_len(int64_t remaining) {
    return static_cast<int>(remaining < kTile ? remaining : kTile);
}
/// The key/value group of query head h.
__device__ __forceinline__ int group_of(const Geometry& g, int64_t h) { return static_cast<int>(h) / g.per_group; }
/// Offsets in position 0 of qkv (add s·ld_qkv for position s) of sequence b's query head h and of
/// group grp's key and value heads.
__device__ __forceinline__ int64_t q_column(const Geometry& g, int64_t b, int64_t h) {
    const int q = static_cast<int>(h), head = (q / g.per_group) * (g.per_group + 2) + q % g.per_group;
    return (b * (g.A + 2 * g.G) + head) * g.D;
}
__device__ __forceinline__ int64_t k_column(const Geometry& g, int64_t b, int64_t grp) {
    const int head = static_cast<int>(grp) * (g.per_group + 2) + g.per_group;
    return (b * (g.A + 2 * g.G) + head) * g.D;
}
__device__ __forceinline__ int64_t v_column(const Geometry& g, int64_t b, int64_t grp) {
    return k_column(g, b, grp) + g.D;
}
/// The same for head h of the (S, B, A·D) output (and its gradient).
__device__ __forceinline__ int64_t out_column(const Geometry& g, int64_t b, int64_t h) { return (b * g.A + h) * g.D; }
/// Rows [first, first + kTile) of two D-wide heads, a (row stride lda) and b (ldb), into shared tiles
/// (zeros past S), by the block's kRows threads.
template <int D, class T>
__device__ __forceinline__ void stage_tiles(float (*ta)[D], const T* a, int64_t lda, float (*tb)[D], const T* b,
                                            int64_t ldb, int64_t first, int64_t S) {
    for (int e = threadIdx.x; e < kTile * D; e += kRows) {
        const int r = e / D, d = e % D;
        const int64_t row = first + r;
        ta[r][d] = row < S ? load_value(a[row * lda + d]) : 0.0f;
        tb[r][d] = row < S ? load_value(b[row * ldb + d]) : 0.0f;
    }
}
__device__ __forceinline__ float mask_mult(const Geometry& g, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!g.dropout) return 1.0f;
    const uint64_t idx = static_cast<uint64_t>(((b * g.total_heads + g.head_offset + h) * g.S + i) * g.S + j);
    return dropout_keep(g.rng, idx, g.threshold) ? g.keep_scale : 0.0f;
}

/// Per query row i of head h: out_i = Σ_j softmax_j(scale·q_i·k_j)·mask_ij·v_j over j <= i, with the
/// group's K/V tiles staged in shared memory; lse_i saved for backward.
template <int D, class T>
__global__ void __launch_bounds__(kRows) k_attn_fwd(T* out, float* lse, const T* qkv, Geometry g) {
    g.rng = resolved(g.rng);  // the dropout stream of this step (RngStream)
    __shared__ float ks[kTile][D];
    __shared__ float vs[kTile][D];
    const int64_t pair = blockIdx.y, b = pair / g.A, h = pair % g.A;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
    const int64_t i = row0 + threadIdx.x;
    const bool active = i < g.S;
    const T* kcol = qkv + k_column(g, b, group_of(g, h));
    const T* vcol = qkv + v_column(g, b, group_of(g, h));
    float q[D], acc[D];
    const T* qi = qkv + (active ? i : 0) * g.ld_qkv + q_column(g, b, h);
#pragma unroll
    for (int d = 0; d < D; ++d) {
        q[d] = active ? load_value(qi[d]) : 0.0f;
        acc[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int64_t last = min(g.S, row0 + kRows);  // keys this block needs: [0, last)
    for (int64_t k0 = 0; k0 < last; k0 += kTile) {
        __syncthreads();
        stage_tiles<D, T>(ks, kcol, g.ld_qkv, vs, vcol, g.ld_qkv, k0, g.S);
        __syncthreads();
        if (!active) continue;
        const int jmax = tile_len(i - k0 + 1);
        for (int jj = 0; jj < jmax; ++jj) {
            float dot = 0.0f;
#pragma unroll
            for (int d = 0; d < D; ++d) dot += q[d] * ks[jj][d];
            const float s = g.scale * dot;
            const float m_new = fmaxf(m, s);
            const float corr = expf(m - m_new), e = expf(s - m_new);
            l = l * corr + e;
            const float w = e * mask_mult(g, b, h, i, k0 + jj);
#pragma unroll
            for (int d = 0; d < D; ++d) acc[d] = acc[d] * corr + w * vs[jj][d];
            m = m_new;
        }
    }
    if (!active) return;
    const float inv = 1.0f / l;
    T* oi = out + i * g.ld_out + out_column(g, b, h);
#pragma unroll
    for (int d = 0; d < D; ++d) oi[d] = store_value<T>(acc[d] * inv);
    lse[pair * g.S + i] = m + logf(l);
}

/// Per query row of head h: delta = dO·O (O recomputed), then dq = Σ_j dS_ij·k_j (the group's keys).
template <int D, class T>
__global__ void __launch_bounds__(kRows) k_attn_bwd_dq(T* dqkv, float* delta, const T* dout, const T* qkv,
                                                       const float* lse, Geometry g) {
    g.rng = resolved(g.rng);  // the dropout stream of this step (RngStream)
    __shared__ float ks[kTile][D];
    __shared__ float vs[kTile][D];
    const int64_t pair = blockIdx.y, b = pair / g.A, h = pair % g.A;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
    const int64_t i = row0 + threadIdx.x;
    const bool active = i < g.S;
    const T* kcol = qkv + k_column(g, b, group_of(g, h));
    const T* vcol = qkv + v_column(g, b, group_of(g, h));
    float q[D], dO[D], acc[D];
    const T* qi = qkv + (active ? i : 0) * g.ld_qkv + q_column(g, b, h);
    const T* doi = dout + (active ? i : 0) * g.ld_out + out_column(g, b, h);
#pragma unroll
    for (int d = 0; d < D; ++d) {
        q[d] = active ? load_value(qi[d]) : 0.0f;
        dO[d] = active ? load_value(doi[d]) : 0.0f;
        acc[d] = 0.0f;
    }
    const float L = active ? lse[pair * g.S + i] : 0.0f;
    const int64_t last = min(g.S, row0 + kRows);
    float dlt = 0.0f;
    for (int pass = 0; pass < 2; ++pass) {
        for (int64_t k0 = 0; k0 < last; k0 += kTile) {
            __syncthreads();
            stage_tiles<D, T>(ks, kcol, g.ld_qkv, vs, vcol, g.ld_qkv, k0, g.S);
            __syncthreads();
            if (!active) continue;
            const int jmax = tile_len(i - k0 + 1);
            for (int jj = 0; jj < jmax; ++jj) {
                float dot = 0.0f;
#pragma unroll
                for (int d = 0; d < D; ++d) dot += q[d] * ks[jj][d];
                const float p = expf(g.scale * dot - L);
                const float mult = mask_mult(g, b, h, i, k0 + jj);
                if (pass == 0) {
                    // O_i = Σ_j p·mult·v_j
#pragma unroll
                    for (int d = 0; d < D; ++d) acc[d] += p * mult * vs[jj][d];
                } else {
                    float dpd = 0.0f;
#pragma unroll
                    for (int d = 0; d < D; ++d) dpd += dO[d] * vs[jj][d];
                    const float ds = g.scale * p * (dpd * mult - dlt);
#pragma unroll
                    for (int d = 0; d < D; ++d) acc[d] += ds * ks[jj][d];
                }
            }
        }
        if (pass == 0) {
#pragma unroll
            for (int d = 0; d < D; ++d) {
                dlt += dO[d] * acc[d];
                acc[d] = 0.0f;
            }
        }
    }
    if (!active) return;
    delta[pair * g.S + i] = dlt;
    T* dqi = dqkv + i * g.ld_qkv + q_column(g, b, h);
#pragma unroll
    for (int d = 0; d < D; ++d) dqi[d] = store_value<T>(acc[d]);
}

/// Per key row j of group grp (blockIdx.y = b·G + grp): dv = Σ_h Σ_{i≥j} p·mult·dO_i and
/// dk = Σ_h Σ_{i≥j} dS_ij·q_i over the group's query heads h in order, so K and V are read once per
/// group and the group's sum needs no atomics.
template <int D, class T>
__global__ void __launch_bounds__(kRows) k_attn_bwd_dkv(T* dqkv, const float* delta, const T* dout, const T* qkv,
                                                        const float* lse, Geometry g) {
    g.rng = resolved(g.rng);  // the dropout stream of this step (RngStream)
    __shared__ float qs[kTile][D];
    __shared__ float dos[kTile][D];
    __shared__ float ls[kTile], dls[kTile];
    const int64_t b = blockIdx.y / g.G, grp = blockIdx.y % g.G, per_group = g.per_group;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
    const int64_t j = row0 + threadIdx.x;
    const bool active = j < g.S;
    float k[D], v[D], dk[D], dv[D];
    const T* kj = qkv + (active ? j : 0) * g.ld_qkv + k_column(g, b, grp);
    const T* vj = qkv + (active ? j : 0) * g.ld_qkv + v_column(g, b, grp);
#pragma unroll
    for (int d = 0; d < D; ++d) {
        k[d] = active ? load_value(kj[d]) : 0.0f;
        v[d] = active ? load_value(vj[d]) : 0.0f;
        dk[d] = 0.0f;
        dv[d] = 0.0f;
    }
    for (int64_t h = grp * per_group; h < (grp + 1) * per_group; ++h) {
        const int64_t pair = b * g.A + h;
        const T* qcol = qkv + q_column(g, b, h);
        const T* docol = dout + out_column(g, b, h);
        for (int64_t q0 = row0; q0 < g.S; q0 += kTile) {
            __syncthreads();
            stage_tiles<D, T>(qs, qcol, g.ld_qkv, dos, docol, g.ld_out, q0, g.S);
            for (int ii = threadIdx.x; ii < kTile; ii += kRows) {
                const int64_t i = q0 + ii;
                ls[ii] = i < g.S ? lse[pair * g.S + i] : 0.0f;
                dls[ii] = i < g.S ? delta[pair * g.S + i] : 0.0f;
            }
            __syncthreads();
            if (!active) continue;
            const int iend = tile_len(g.S - q0);
            for (int ii = 0; ii < iend; ++ii) {
                const int64_t i = q0 + ii;
                if (i < j) continue;
                float dot = 0.0f, dpd = 0.0f;
#pragma unroll
                for (int d = 0; d < D; ++d) {
                    dot += qs[ii][d] * k[d];
                    dpd += dos[ii][d] * v[d];
                }
                const float p = expf(g.scale * dot - ls[ii]);
                const float mult = mask_mult(g, b, h, i, j);
                const float ds = g.scale * p * (dpd * mult - dls[ii]);
                const float pd = p * mult;
#pragma unroll
                for (int d = 0; d < D; ++d) {
                    dv[d] += pd * dos[ii][d];
                    dk[d] += ds * qs[ii][d];
                }
            }
        }
    }
    if (!active) return;
    T* dkj = dqkv + j * g.ld_qkv + k_column(g, b, grp);
    T* dvj = dqkv + j * g.ld_qkv + v_column(g, b, grp);
#pragma unroll
    for (int d = 0; d < D; ++d) {
        dkj[d] = store_value<T>(dk[d]);
        dvj[d] = store_value<T>(dv[d]);
    }
}

}  // namespace mwb::cuda::attention
