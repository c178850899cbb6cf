#pragma once
// The kernels of cached_attention_forward on CUDA (ops_cached_attention.cu; contract: ops.h), the
// attention of generation: a few new tokens, each against its own row of the key/value cache. Plain CUDA
// C++ without runtime calls, so that test_kernels_cached_attention_emulated runs this source on CPU threads
// (tests/kernels/cuda_emulation.h) against the CPU op, in CI, where there is no GPU.
//   k_cache_append: each new token's k and v into the cache (a separate launch: a token of a prefill reads
//   the k/v of the call's earlier tokens, which other blocks write).
//   k_cached_attention: one block per (token, query head), kWarps warps; warp w takes the keys w, w + kWarps,
//   ... of the row with an online softmax (flash-decoding), its lanes splitting the head dim (P floats
//   each, D <= 32·P); the warps' partial (max, sum, output) are merged through shared memory at the end.
//   Nothing is of the cache's length: any context fits.
#include <cmath>
#include <cstdint>

#ifndef MWB_DYNAMIC_SHARED
#define MWB_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace mwb::cuda::cached_attention {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxPerLane = 8;  // head dims up to 32·8 = 256

/// One call's shapes: n new tokens, A query heads in G groups of A/G, head dim D; the cache holds R rows
/// of L positions per group: (R, G, L, D).
struct Geometry {
    int64_t n, A, G, D, R, L;
    int per_group;  // A/G
    float scale;
};

__device__ __forceinline__ int64_t ld_qkv(const Geometry& g) {
    return (g.A + 2 * g.G) * g.D;
}
/// Column of query head h, and of group grp's key (its value follows), in a qkv row.
__device__ __forceinline__ int64_t q_col(const Geometry& g, int64_t h) {
    return ((h / g.per_group) * (g.per_group + 2) + h % g.per_group) * g.D;
}
__device__ __forceinline__ int64_t k_col(const Geometry& g, int64_t grp) {
    return (grp * (g.per_group + 2) + g.per_group) * g.D;
}
/// Offset of position 0 of (row, group) in the cache.
__device__ __forceinline__ int64_t cache_at(const Geometry& g, int64_t row, int64_t grp) {
    return (row * g.G + grp) * g.L * g.D;
}

/// k_cache/v_cache[rows[i]][grp][positions[i]] = token i's k and v of group grp; a grid-stride loop over
/// the n·G·D elements with index type I (uint32_t below 2^31 elements: cheaper divisions).
template <class I>
__global__ void k_cache_append(float* k_cache, float* v_cache, const float* qkv, const int32_t* rows,
                               const int32_t* positions, Geometry g) {
    const I total = static_cast<I>(g.n * g.G * g.D), GD = static_cast<I>(g.G * g.D), D = static_cast<I>(g.D);
    const I stride = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
    for (I t = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); t < total;
         t += stride) {
        const int64_t i = t / GD, grp = (t / D) % static_cast<I>(g.G), d = t % D;
        const float* k = qkv + i * ld_qkv(g) + k_col(g, grp);
        const int64_t at = cache_at(g, rows[i], grp) + static_cast<int64_t>(positions[i]) * g.D + d;
        k_cache[at] = k[d];
        v_cache[at] = k[g.D + d];
    }
}

/// out[i][h] = softmax(q·kᵀ·scale)·v over positions [0, positions[i]] of row rows[i]; block (i, h) =
/// (blockIdx.x, blockIdx.y). Dynamic shared memory: kWarps·(2 + D) floats.
template <int P>
__global__ void __launch_bounds__(kThreads)
    k_cached_attention(float* out, const float* qkv, const float* k_cache, const float* v_cache, const int32_t* rows,
                       const int32_t* positions, Geometry g) {
    MWB_DYNAMIC_SHARED(shared_bytes);
    float* shared = reinterpret_cast<float*>(shared_bytes);
    const int64_t i = blockIdx.x, h = blockIdx.y, grp = h / g.per_group;
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t len = static_cast<int64_t>(positions[i]) + 1;
    const float* q = qkv + i * ld_qkv(g) + q_col(g, h);
    const float* K = k_cache + cache_at(g, rows[i], grp);
    const float* V = v_cache + cache_at(g, rows[i], grp);
    float qr[P], acc[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
        const int64_t d = lane + 32 * p;
        qr[p] = d < g.D ? q[d] * g.scale : 0.0f;
        acc[p] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = warp; j < len; j += kWarps) {
        const float* k = K + j * g.D;
        float dot = 0.0f;
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const int64_t d = lane + 32 * p;
            if (d < g.D) dot += qr[p] * k[d];
        }
#pragma unroll
        for (int mask = 16; mask > 0; mask /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, mask);
        const float m_new = fmaxf(m, dot);
        const float corr = expf(m - m_new), e = expf(dot - m_new);
        l = l * corr + e;
        const float* v = V + j * g.D;
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const int64_t d = lane + 32 * p;
            acc[p] = acc[p] * corr + (d < g.D ? e * v[d] : 0.0f);
        }
        m = m_new;
    }
    // Per warp: [m, l, acc(D)] in shared memory; warp 0 merges them in warp order (a fixed order).
    float* mine = shared + warp * (2 + g.D);
    if (lane == 0) {
        mine[0] = m;
        mine[1] = l;
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
        const int64_t d = lane + 32 * p;
        if (d < g.D) mine[2 + d] = acc[p];
    }
    __syncthreads();
    if (warp != 0) return;
    float top = -INFINITY;
    for (int w = 0; w < kWarps; ++w) top = fmaxf(top, shared[w * (2 + g.D)]);
    float sum = 0.0f, o[P];
#pragma unroll
    for (int p = 0; p < P; ++p) o[p] = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
        const float* theirs = shared + w * (2 + g.D);
        if (theirs[1] == 0.0f) continue;  // a warp that had no key (len < kWarps)
        const float f = expf(theirs[0] - top);
        sum += theirs[1] * f;
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const int64_t d = lane + 32 * p;
            if (d < g.D) o[p] += theirs[2 + d] * f;
        }
    }
    float* oi = out + (i * g.A + h) * g.D;
    const float inv = 1.0f / sum;
#pragma unroll
    for (int p = 0; p < P; ++p) {
        const int64_t d = lane + 32 * p;
        if (d < g.D) oi[d] = o[p] * inv;
    }
}

}  // namespace mwb::cuda::cached_attention
