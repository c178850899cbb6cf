#pragma once
// Causal attention on tensor cores (WMMA, bf16 or fp16 inputs E, fp32 accumulation), for 16-bit runs:
// the same contract as attention_kernels.cuh (row log-sum-exps saved, backward recomputes the
// probabilities, the CPU's Philox dropout masks, no atomics) with the four matrix products per tile on
// tensor cores. Every kernel is templated on the storage element T of qkv, the output and their
// gradients and on E: T = E (bf16 or fp16 storage) loads 16-bit tiles directly, 8 values per 128-bit
// load; T = float (a bf16 run's fp32 arrays holding bf16 values) converts, exactly. Outputs are
// rounded to T once. The probabilities (forward) and dS (backward) are rounded to E before their
// products, as FlashAttention-2 does: 16-bit runs are held to 1e-2 of the fp32 CPU op.
//
// A block is 4 warps; each warp owns 16 rows (queries in forward and dq, keys in dk/dv) of the block's
// 64 and multiplies 16×16×16 fragments. Tiles of 64 keys (or queries) are staged in shared memory as
// E; the forward's output accumulator lives in shared memory (its rows are rescaled by the online
// softmax), the backward's in fragments. For the softmax arithmetic two lanes share a row, each taking
// every other column of the tile (and of D), their row maxima and sums combined by one shuffle.
//
// Shared-memory rows are padded (+8 bf16, +4 f32: kTcPadBf16, kTcPadF32), so the 8 or 16 rows one
// fragment load/store touches start on different banks, and lane (r, half) walks its columns starting
// at a row-dependent step (tc_column), so the 32 lanes of an element-wise step hit 32 different banks.
// The arithmetic, before and after, per access pattern: docs/gpu.md; test_kernels_attention_emulated
// counts it from these helpers.
// Plain CUDA without runtime calls: tests/kernels/cuda_emulation.h runs it on the CPU.
#include "attention_kernels.cuh"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#endif

#ifndef MWB_DYNAMIC_SHARED
#define MWB_DYNAMIC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#endif

namespace mwb::cuda::attention {

constexpr int kTcWarps = 4;
constexpr int kTcThreads = 32 * kTcWarps;
constexpr int kTcRows = 16 * kTcWarps;  // rows of a block: 16 per warp
constexpr int kTcTile = 64;             // keys (or queries) per shared-memory tile
constexpr int kTcHalf = kTcTile / 2;    // a lane's share of a tile row
constexpr int kTcPadBf16 = 8;           // bf16 per row of padding: 16 bytes, WMMA's ldm granule
constexpr int kTcPadF32 = 4;            // f32 per row of padding: 16 bytes
/// Row strides (elements) in shared memory: D-wide bf16 rows (Q, K, V, dO), 64-wide f32 score rows,
/// 64-wide bf16 probability rows, D-wide f32 accumulator rows.
template <int D>
constexpr int kTcLdRows = D + kTcPadBf16;
constexpr int kTcLdScores = kTcTile + kTcPadF32;
constexpr int kTcLdProbs = kTcTile + kTcPadBf16;
template <int D>
constexpr int kTcLdAcc = D + kTcPadF32;

/// The column lane (r, half) of a row pair handles at its step `step` of `width` columns (a tile's 64
/// or D): the pair interleaves (even columns for half 0, odd for half 1) and row r starts r steps in,
/// so that at every step the 16 rows × 2 halves of a warp address 32 different banks.
__host__ __device__ constexpr int tc_column(int step, int r, int half, int width) {
    return 2 * ((step + r) % (width / 2)) + half;
}

/// The two lanes of a row (lane and lane ^ 1) combine their halves; every lane of the warp calls it.
__device__ __forceinline__ float pair_max(float v) { return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1)); }
__device__ __forceinline__ float pair_sum(float v) { return v + __shfl_xor_sync(0xffffffffu, v, 1); }

namespace wmma = nvcuda::wmma;
// E: the tensor cores' input element, bf16 or fp16 (__half).
template <class E>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major>;
template <class E>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major>;
template <class E>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// Byte offsets into the dynamic shared memory of the forward kernel (32-byte aligned regions).
template <int D>
struct TcForwardSmem {
    static constexpr int q = 0;                                        // kTcRows × D bf16
    static constexpr int k = q + kTcRows * kTcLdRows<D> * 2;           // kTcTile × D bf16
    static constexpr int v = k + kTcTile * kTcLdRows<D> * 2;           // kTcTile × D bf16
    static constexpr int s = v + kTcTile * kTcLdRows<D> * 2;           // per warp 16 × kTcTile f32
    static constexpr int p = s + kTcWarps * 16 * kTcLdScores * 4;      // per warp 16 × kTcTile bf16
    static constexpr int o = p + kTcWarps * 16 * kTcLdProbs * 2;       // per warp 16 × D f32
    static constexpr int bytes = o + kTcWarps * 16 * kTcLdAcc<D> * 4;
};

/// The dq kernel's and the dk/dv kernel's shared memory (the same shape: two row blocks, two tiles,
/// per-warp scores, their gradients, one bf16 product input — dS, and in dk/dv first P for dV, then dS
/// for dK — and 2 × 64 row scalars). The outputs are staged, once the tiles are done with, where the
/// two tiles were (4 warps × 16 × (D + 4) f32 within 2 × 64 × (D + 8) bf16): 111.5 KiB at D 128 and
/// 127.5 KiB at D 160 (padded rows included), so that an H100's 228 KiB per SM still holds 2 blocks.
template <int D>
struct TcBackwardSmem {
    static constexpr int rows_a = 0;                                   // kTcRows × D bf16 (q or k)
    static constexpr int rows_b = rows_a + kTcRows * kTcLdRows<D> * 2; // kTcRows × D bf16 (dO or v)
    static constexpr int tile_a = rows_b + kTcRows * kTcLdRows<D> * 2; // kTcTile × D bf16 (k or q)
    static constexpr int tile_b = tile_a + kTcTile * kTcLdRows<D> * 2; // kTcTile × D bf16 (v or dO)
    static constexpr int stage = tile_a;                               // per warp 16 × D f32, at the end
    static constexpr int s = tile_b + kTcTile * kTcLdRows<D> * 2;      // per warp 16 × kTcTile f32
    static constexpr int dp = s + kTcWarps * 16 * kTcLdScores * 4;     // per warp 16 × kTcTile f32
    static constexpr int ds = dp + kTcWarps * 16 * kTcLdScores * 4;    // per warp 16 × kTcTile bf16 (P, dS)
    static constexpr int scalars = ds + kTcWarps * 16 * kTcLdProbs * 2; // 2 × kTcTile f32
    static constexpr int bytes = scalars + 2 * kTcTile * 4;
    static_assert(kTcWarps * 16 * kTcLdAcc<D> * 4 <= 2 * kTcTile * kTcLdRows<D> * 2,
                  "the output stage fits where the tiles were");
};

/// Whether the tensor-core kernels of head dim D fit a device whose blocks may opt in to
/// `max_block_smem` bytes: the forward's and the backward's blocks both (at D 160 the forward's is the
/// larger, 130 KiB against 127.5).
template <int D>
constexpr bool tc_fits(int max_block_smem) {
    return TcForwardSmem<D>::bytes <= max_block_smem && TcBackwardSmem<D>::bytes <= max_block_smem;
}

/// Where warp `warp`'s views of the backward kernels' shared memory (TcBackwardSmem) start.
template <int D, class E>
struct TcBackwardShared {
    E *rows_a, *rows_b, *tile_a, *tile_b, *ds;
    float *s, *dp, *stage, *scalars;
    __device__ __forceinline__ TcBackwardShared(unsigned char* smem, int warp) {
        using L = TcBackwardSmem<D>;
        rows_a = reinterpret_cast<E*>(smem + L::rows_a);
        rows_b = reinterpret_cast<E*>(smem + L::rows_b);
        tile_a = reinterpret_cast<E*>(smem + L::tile_a);
        tile_b = reinterpret_cast<E*>(smem + L::tile_b);
        s = reinterpret_cast<float*>(smem + L::s) + warp * 16 * kTcLdScores;
        dp = reinterpret_cast<float*>(smem + L::dp) + warp * 16 * kTcLdScores;
        ds = reinterpret_cast<E*>(smem + L::ds) + warp * 16 * kTcLdProbs;
        stage = reinterpret_cast<float*>(smem + L::stage) + warp * 16 * kTcLdAcc<D>;
        scalars = reinterpret_cast<float*>(smem + L::scalars);
    }
};

/// Rows [row0, row0 + n) of the D columns at `col` of a (S, ld) tensor (a head of qkv or of the
/// output gradient), as E (zeros past S), into rows of kTcLdRows<D>. 16-bit storage of E's own type
/// is copied with 128-bit loads and stores of 8 values where the head's rows are 16-byte aligned (D is
/// a multiple of 8 and so is every head offset: always, for tensors from the arena); fp32 storage
/// (holding E values in a 16-bit run) converts one value at a time, exactly.
template <int D, class T, class E>
__device__ __forceinline__ void tc_load_rows(E* dst, const T* col, int64_t ld, const Geometry& g, int64_t row0,
                                             int n) {
    if constexpr (std::is_same_v<T, E>) {
        constexpr int kVec = 8, kPerRow = D / kVec;
        static_assert(D % kVec == 0 && (kTcLdRows<D> * 2) % 16 == 0, "rows of whole 16-byte vectors");
        if ((reinterpret_cast<uintptr_t>(col) | static_cast<uintptr_t>(ld * 2)) % 16 == 0) {
            const uint4 zero{0, 0, 0, 0};
            for (int e = threadIdx.x; e < n * kPerRow; e += kTcThreads) {
                const int r = e / kPerRow, d = e % kPerRow * kVec;
                const int64_t row = row0 + r;
                copy16(dst + r * kTcLdRows<D> + d, row < g.S ? static_cast<const void*>(col + row * ld + d) : &zero);
            }
            return;
        }
    }
    for (int e = threadIdx.x; e < n * D; e += kTcThreads) {
        const int r = e / D, d = e % D;
        const int64_t row = row0 + r;
        dst[r * kTcLdRows<D> + d] = store_value<E>(row < g.S ? load_value(col[row * ld + d]) : 0.0f);
    }
}

/// out (16 × kTcTile f32, rows of kTcLdScores) = rows (16 × D, row-major) · tileᵀ (tile: kTcTile × D, row-major).
template <int D, class E>
__device__ __forceinline__ void tc_rows_times_tile_t(float* out, const E* rows, const E* tile) {
    for (int c = 0; c < kTcTile / 16; ++c) {
        FragAcc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < D / 16; ++kk) {
            FragA<E> a;
            FragBCol<E> bt;
            wmma::load_matrix_sync(a, rows + kk * 16, kTcLdRows<D>);
            wmma::load_matrix_sync(bt, tile + c * 16 * kTcLdRows<D> + kk * 16, kTcLdRows<D>);
            wmma::mma_sync(acc, a, bt, acc);
        }
        wmma::store_matrix_sync(out + c * 16, acc, kTcLdScores, wmma::mem_row_major);
    }
}

/// acc[c] (16 × 16 each, D/16 of them) += left (16 × kTcTile bf16, rows of kTcLdProbs) · tile (kTcTile × D, row-major).
template <int D, class E>
__device__ __forceinline__ void tc_accumulate(FragAcc* acc, const E* left, const E* tile) {
    for (int c = 0; c < D / 16; ++c)
        for (int kk = 0; kk < kTcTile / 16; ++kk) {
            FragA<E> a;
            FragBRow<E> bm;
            wmma::load_matrix_sync(a, left + kk * 16, kTcLdProbs);
            wmma::load_matrix_sync(bm, tile + kk * 16 * kTcLdRows<D> + c * 16, kTcLdRows<D>);
            wmma::mma_sync(acc[c], a, bm, acc[c]);
        }
}

template <int D, class T, class E>
__global__ void __launch_bounds__(kTcThreads) k_attn_fwd_tc(T* out, float* lse, const T* qkv, Geometry g) {
    g.rng = resolved(g.rng);  // the dropout stream of this step (RngStream)
    MWB_DYNAMIC_SHARED(smem);
    using L = TcForwardSmem<D>;
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t pair = blockIdx.y, b = pair / g.A, h = pair % g.A;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTcRows;
    E* qs = reinterpret_cast<E*>(smem + L::q);
    E* ks = reinterpret_cast<E*>(smem + L::k);
    E* vs = reinterpret_cast<E*>(smem + L::v);
    float* ss = reinterpret_cast<float*>(smem + L::s) + warp * 16 * kTcLdScores;
    E* ps = reinterpret_cast<E*>(smem + L::p) + warp * 16 * kTcLdProbs;
    float* os = reinterpret_cast<float*>(smem + L::o) + warp * 16 * kTcLdAcc<D>;
    constexpr int ldo = kTcLdAcc<D>;
    // Lanes 2r and 2r + 1 share row r of the warp's 16: every other column of each tile and of D
    // (tc_column).
    const int r = lane / 2, half = lane % 2;
    const int64_t i = row0 + warp * 16 + r;
    const bool active = i < g.S;
    const T* kcol = qkv + k_column(g, b, group_of(g, h));
    const T* vcol = qkv + v_column(g, b, group_of(g, h));

    tc_load_rows<D, T, E>(qs, qkv + q_column(g, b, h), g.ld_qkv, g, row0, kTcRows);
    for (int e = lane; e < 16 * D; e += 32) os[(e / D) * ldo + e % D] = 0.0f;
    float m = -INFINITY, l = 0.0f;  // the same in both lanes of a row
    const int64_t last = min(g.S, row0 + kTcRows);  // keys the block needs: [0, last)
    for (int64_t k0 = 0; k0 < last; k0 += kTcTile) {
        __syncthreads();
        tc_load_rows<D, T, E>(ks, kcol, g.ld_qkv, g, k0, kTcTile);
        tc_load_rows<D, T, E>(vs, vcol, g.ld_qkv, g, k0, kTcTile);
        __syncthreads();
        tc_rows_times_tile_t<D, E>(ss, qs + warp * 16 * kTcLdRows<D>, ks);
        __syncwarp();
        float* sr = ss + r * kTcLdScores;
        E* pr = ps + r * kTcLdProbs;
        float tile_max = -INFINITY;
        for (int step = 0; step < kTcHalf; ++step) {
            const int jj = tc_column(step, r, half, kTcTile);
            sr[jj] = active && k0 + jj <= i ? g.scale * sr[jj] : -INFINITY;  // causal (j <= i < S)
            tile_max = fmaxf(tile_max, sr[jj]);
        }
        tile_max = pair_max(tile_max);
        // Key 0 is in the first tile, so m_new is finite for an active row; inactive rows stay at 0.
        const float m_new = active ? fmaxf(m, tile_max) : 0.0f;
        const float corr = active ? expf(m - m_new) : 1.0f;
        float sum = 0.0f;
        for (int step = 0; step < kTcHalf; ++step) {
            const int jj = tc_column(step, r, half, kTcTile);
            const float e = active ? expf(sr[jj] - m_new) : 0.0f;
            sum += e;
            pr[jj] = store_value<E>(active ? e * mask_mult(g, b, h, i, k0 + jj) : 0.0f);
        }
        sum = pair_sum(sum);
        l = l * corr + sum;
        m = m_new;
        for (int step = 0; step < D / 2; ++step) os[r * ldo + tc_column(step, r, half, D)] *= corr;
        __syncwarp();
        // O (16 × D) += P (16 × kTcTile) · V (kTcTile × D), through the rescaled shared accumulator.
        for (int c = 0; c < D / 16; ++c) {
            FragAcc acc;
            wmma::load_matrix_sync(acc, os + c * 16, ldo, wmma::mem_row_major);
            for (int kk = 0; kk < kTcTile / 16; ++kk) {
                FragA<E> a;
                FragBRow<E> bv;
                wmma::load_matrix_sync(a, ps + kk * 16, kTcLdProbs);
                wmma::load_matrix_sync(bv, vs + kk * 16 * kTcLdRows<D> + c * 16, kTcLdRows<D>);
                wmma::mma_sync(acc, a, bv, acc);
            }
            wmma::store_matrix_sync(os + c * 16, acc, ldo, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (!active) return;
    const float inv = 1.0f / l;
    T* oi = out + i * g.ld_out + out_column(g, b, h);
    for (int step = 0; step < D / 2; ++step) {
        const int d = tc_column(step, r, half, D);
        oi[d] = store_value<T>(os[r * ldo + d] * inv);
    }
    if (half == 0) lse[pair * g.S + i] = m + logf(l);
}

/// dq and delta_i = Σ_j P_ij·mask_ij·(dO_i·v_j) (= dO_i·O_i) per query row: a first pass over the keys
/// for delta, a second for dS = scale·P∘(dP·mask − delta) and dq = dS·K.
template <int D, class T, class E>
__global__ void __launch_bounds__(kTcThreads) k_attn_bwd_dq_tc(T* dqkv, float* delta, const T* dout, const T* qkv,
                                                                const float* lse, Geometry g) {
    g.rng = resolved(g.rng);  // the dropout stream of this step (RngStream)
    MWB_DYNAMIC_SHARED(smem);
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t pair = blockIdx.y, b = pair / g.A, h = pair % g.A;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTcRows;
    const TcBackwardShared<D, E> sh(smem, warp);
    E *qs = sh.rows_a, *dos = sh.rows_b, *ks = sh.tile_a, *vs = sh.tile_b, *dss = sh.ds;
    float *ss = sh.s, *dps = sh.dp, *stage = sh.stage;
    const int r = lane / 2, half = lane % 2;  // lanes 2r, 2r + 1: row r, half the columns each
    const int64_t i = row0 + warp * 16 + r;
    const bool active = i < g.S;
    const float L_i = active ? lse[pair * g.S + i] : 0.0f;
    const T* kcol = qkv + k_column(g, b, group_of(g, h));
    const T* vcol = qkv + v_column(g, b, group_of(g, h));

    tc_load_rows<D, T, E>(qs, qkv + q_column(g, b, h), g.ld_qkv, g, row0, kTcRows);
    tc_load_rows<D, T, E>(dos, dout + out_column(g, b, h), g.ld_out, g, row0, kTcRows);
    FragAcc dq[D / 16];
    for (int c = 0; c < D / 16; ++c) wmma::fill_fragment(dq[c], 0.0f);
    float delta_i = 0.0f;
    const int64_t last = min(g.S, row0 + kTcRows);
    for (int pass = 0; pass < 2; ++pass) {
        for (int64_t k0 = 0; k0 < last; k0 += kTcTile) {
            __syncthreads();
            tc_load_rows<D, T, E>(ks, kcol, g.ld_qkv, g, k0, kTcTile);
            tc_load_rows<D, T, E>(vs, vcol, g.ld_qkv, g, k0, kTcTile);
            __syncthreads();
            tc_rows_times_tile_t<D, E>(ss, qs + warp * 16 * kTcLdRows<D>, ks);
            tc_rows_times_tile_t<D, E>(dps, dos + warp * 16 * kTcLdRows<D>, vs);
            __syncwarp();
            for (int step = 0; step < kTcHalf; ++step) {
                const int jj = tc_column(step, r, half, kTcTile);
                const int64_t j = k0 + jj;
                const bool on = active && j <= i;
                const float p = on ? expf(g.scale * ss[r * kTcLdScores + jj] - L_i) : 0.0f;
                const float mk = on ? mask_mult(g, b, h, i, j) : 0.0f;
                const float dp = dps[r * kTcLdScores + jj];
                if (pass == 0) delta_i += p * mk * dp;
                else dss[r * kTcLdProbs + jj] = store_value<E>(g.scale * p * (dp * mk - delta_i));
            }
            __syncwarp();
            if (pass == 1) tc_accumulate<D, E>(dq, dss, ks);
        }
        if (pass == 0) delta_i = pair_sum(delta_i);  // both halves of the row, in both lanes
    }
    __syncthreads();  // every warp is done with the tiles the stage overwrites
    constexpr int lds = kTcLdAcc<D>;
    for (int c = 0; c < D / 16; ++c) wmma::store_matrix_sync(stage + c * 16, dq[c], lds, wmma::mem_row_major);
    __syncwarp();
    if (!active) return;
    T* dqi = dqkv + i * g.ld_qkv + q_column(g, b, h);
    for (int step = 0; step < D / 2; ++step) {
        const int d = tc_column(step, r, half, D);
        dqi[d] = store_value<T>(stage[r * lds + d]);
    }
    if (half == 0) delta[pair * g.S + i] = delta_i;
}

/// dk and dv per key row j of group grp (blockIdx.y = b·G + grp): for each of the group's query heads
/// in order, over the query tiles from j's own down, dv += (P∘mask)ᵀ·dO and dk += dSᵀ·Q. K and V are
/// read once per group; the sum over the group's heads stays in the fragments (no atomics). P∘mask and
/// dS take turns in one bf16 buffer (P and the mask are computed twice: shared memory, not arithmetic,
/// bounds the blocks per SM).
template <int D, class T, class E>
__global__ void __launch_bounds__(kTcThreads) k_attn_bwd_dkv_tc(T* dqkv, const float* delta, const T* dout,
                                                                 const T* qkv, const float* lse, Geometry g) {
    g.rng = resolved(g.rng);  // the dropout stream of this step (RngStream)
    MWB_DYNAMIC_SHARED(smem);
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t b = blockIdx.y / g.G, grp = blockIdx.y % g.G, per_group = g.per_group;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTcRows;
    const TcBackwardShared<D, E> sh(smem, warp);
    E *kb = sh.rows_a, *vb = sh.rows_b, *qt = sh.tile_a, *dot = sh.tile_b, *pds = sh.ds;
    float *st = sh.s, *dpt = sh.dp, *stage = sh.stage, *lse_t = sh.scalars, *delta_t = sh.scalars + kTcTile;
    const int r = lane / 2, half = lane % 2;  // lanes 2r, 2r + 1: key row r, half the queries each
    const int64_t j = row0 + warp * 16 + r;
    const bool active = j < g.S;

    tc_load_rows<D, T, E>(kb, qkv + k_column(g, b, grp), g.ld_qkv, g, row0, kTcRows);
    tc_load_rows<D, T, E>(vb, qkv + v_column(g, b, grp), g.ld_qkv, g, row0, kTcRows);
    FragAcc dk[D / 16], dv[D / 16];
    for (int c = 0; c < D / 16; ++c) {
        wmma::fill_fragment(dk[c], 0.0f);
        wmma::fill_fragment(dv[c], 0.0f);
    }
    for (int64_t h = grp * per_group; h < (grp + 1) * per_group; ++h) {
        const int64_t pair = b * g.A + h;
        const T* qcol = qkv + q_column(g, b, h);
        const T* docol = dout + out_column(g, b, h);
        for (int64_t q0 = row0; q0 < g.S; q0 += kTcTile) {  // queries i >= j only: tiles from the block's own
            __syncthreads();
            tc_load_rows<D, T, E>(qt, qcol, g.ld_qkv, g, q0, kTcTile);
            tc_load_rows<D, T, E>(dot, docol, g.ld_out, g, q0, kTcTile);
            for (int e = threadIdx.x; e < kTcTile; e += kTcThreads) {
                const int64_t q = q0 + e;
                lse_t[e] = q < g.S ? lse[pair * g.S + q] : 0.0f;
                delta_t[e] = q < g.S ? delta[pair * g.S + q] : 0.0f;
            }
            __syncthreads();
            tc_rows_times_tile_t<D, E>(st, kb + warp * 16 * kTcLdRows<D>, qt);   // Sᵀ: keys × queries
            tc_rows_times_tile_t<D, E>(dpt, vb + warp * 16 * kTcLdRows<D>, dot); // dPᵀ = V·dOᵀ
            __syncwarp();
            for (int pass = 0; pass < 2; ++pass) {  // P∘mask for dV, then dS for dK, in one buffer
                for (int step = 0; step < kTcHalf; ++step) {
                    const int ii = tc_column(step, r, half, kTcTile);
                    const int64_t q = q0 + ii;
                    const bool on = active && q < g.S && j <= q;
                    const float p = on ? expf(g.scale * st[r * kTcLdScores + ii] - lse_t[ii]) : 0.0f;
                    const float mk = on ? mask_mult(g, b, h, q, j) : 0.0f;
                    pds[r * kTcLdProbs + ii] = store_value<E>(
                        pass == 0 ? p * mk : g.scale * p * (dpt[r * kTcLdScores + ii] * mk - delta_t[ii]));
                }
                __syncwarp();
                tc_accumulate<D, E>(pass == 0 ? dv : dk, pds, pass == 0 ? dot : qt);
                __syncwarp();  // the warp's fragment loads are done before the buffer is rewritten
            }
        }
    }
    __syncthreads();  // every warp is done with the tiles the stage overwrites
    T* dkj = dqkv + (active ? j : 0) * g.ld_qkv + k_column(g, b, grp);
    T* dvj = dqkv + (active ? j : 0) * g.ld_qkv + v_column(g, b, grp);
    constexpr int lds = kTcLdAcc<D>;
    for (int c = 0; c < D / 16; ++c) wmma::store_matrix_sync(stage + c * 16, dk[c], lds, wmma::mem_row_major);
    __syncwarp();
    if (active)
        for (int step = 0; step < D / 2; ++step) {
            const int d = tc_column(step, r, half, D);
            dkj[d] = store_value<T>(stage[r * lds + d]);
        }
    __syncwarp();
    for (int c = 0; c < D / 16; ++c) wmma::store_matrix_sync(stage + c * 16, dv[c], lds, wmma::mem_row_major);
    __syncwarp();
    if (active)
        for (int step = 0; step < D / 2; ++step) {
            const int d = tc_column(step, r, half, D);
            dvj[d] = store_value<T>(stage[r * lds + d]);
        }
}

}  // namespace mwb::cuda::attention
