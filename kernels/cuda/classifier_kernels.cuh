#pragma once
// The classifier's kernels of ops_elementwise.cu (contracts: ops.inc): softmax cross-entropy over one
// chunk of logit rows (fused loss + gradient, the vocabulary-parallel partials, combination and
// backward), the loss sum, and the word embedding's backward. One block per logit row: each thread
// walks its columns V floats at a time (128-bit loads and stores for V = 4 when the row width and the
// pointers allow) and keeps an online softmax state (running max m and Σ exp(x − m), Milakov &
// Gimelshein 2018), so max and Σexp come from ONE read of the row; the states then merge in a fixed
// tree (kernel_common.cuh). No atomics anywhere: every result is bit-identical run to run. Plain CUDA
// C++ without runtime calls, so test_kernels_classifier_emulated runs this source on CPU threads.
#include "kernel_common.cuh"
#include "storage.cuh"

#include <cmath>
#include <cstdint>

namespace mwb::cuda::classifier {

using kernel::Floats;
using kernel::load;
using kernel::store;

/// Running softmax state of a set of logits: max m and s = Σ exp(x − m).
struct Softmax {
    float m = -INFINITY, s = 0.0f;
};

__device__ __forceinline__ void add(Softmax& a, float x) {
    if (x > a.m) {
        a.s = a.s * expf(a.m - x) + 1.0f;  // exp(-inf) = 0 for the first element
        a.m = x;
    } else {
        a.s += expf(x - a.m);
    }
}

__device__ __forceinline__ Softmax merge(Softmax a, Softmax b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return a;  // both empty
    return Softmax{m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

/// The row's softmax state, the same in every thread of the block (shared: 64 floats).
template <int V>
__device__ Softmax row_softmax(const float* row, int64_t v, float* shared) {
    Softmax st;
    for (int64_t j = static_cast<int64_t>(threadIdx.x) * V; j < v; j += static_cast<int64_t>(blockDim.x) * V) {
        const Floats<V> x = load<V>(row + j);
#pragma unroll
        for (int k = 0; k < V; ++k) add(st, x.v[k]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        const Softmax other{__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o)};
        st = merge(st, other);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) {
        shared[warp] = st.m;
        shared[32 + warp] = st.s;
    }
    __syncthreads();
    Softmax r = lane < warps ? Softmax{shared[lane], shared[32 + lane]} : Softmax{};
    for (int o = 16; o > 0; o >>= 1) {
        const Softmax other{__shfl_xor_sync(0xffffffffu, r.m, o), __shfl_xor_sync(0xffffffffu, r.s, o)};
        r = merge(r, other);
    }
    return r;
}

/// row[j] = exp(row[j] − m)·scale − (j == target ? correction : 0), V at a time.
template <int V>
__device__ void write_gradient(float* row, int64_t v, float m, float scale, int64_t target, float correction) {
    for (int64_t j = static_cast<int64_t>(threadIdx.x) * V; j < v; j += static_cast<int64_t>(blockDim.x) * V) {
        Floats<V> x = load<V>(row + j);
#pragma unroll
        for (int k = 0; k < V; ++k) x.v[k] = expf(x.v[k] - m) * scale - (j + k == target ? correction : 0.0f);
        store<V>(row + j, x);
    }
}

/// Unsharded vocabulary: lse, the target's logit, and the logits replaced by their gradient
/// (softmax − onehot)·row_scale, softmax = exp(x − m)/s. Block r: row r. The target is read before
/// any thread overwrites it (the barriers of row_softmax lie between). A target outside [0, v) (the
/// model checks them on the host) reads nothing and makes the row's target logit NaN.
template <int V>
__global__ void k_ce_fused(float* lse, float* target_logit, float* logits, const int32_t* targets,
                           const float* row_scale, int64_t v) {
    __shared__ float sh[64];
    const int64_t r = blockIdx.x;
    float* row = logits + r * v;
    const int64_t t = targets[r];
    const float tl = t >= 0 && t < v ? row[t] : NAN;
    const Softmax st = row_softmax<V>(row, v, sh);
    const float scale = row_scale[r];
    write_gradient<V>(row, v, st.m, scale / st.s, t, scale);
    if (threadIdx.x == 0) {
        lse[r] = st.m + logf(st.s);
        target_logit[r] = tl;
    }
}

/// A vocabulary shard [vocab_start, vocab_start + v): the row's max, Σ exp(x − max), and the
/// target's logit when the shard holds it (else 0).
template <int V>
__global__ void k_ce_partials(float* row_max, float* row_sumexp, float* target_logit, const float* logits,
                              const int32_t* targets, int64_t v, int64_t vocab_start) {
    __shared__ float sh[64];
    const int64_t r = blockIdx.x;
    const float* row = logits + r * v;
    const Softmax st = row_softmax<V>(row, v, sh);
    if (threadIdx.x == 0) {
        row_max[r] = st.m;
        row_sumexp[r] = st.s;
        const int64_t local = static_cast<int64_t>(targets[r]) - vocab_start;
        target_logit[r] = (local >= 0 && local < v) ? row[local] : 0.0f;
    }
}

/// dlogits = (exp(x − lse) − onehot)·row_scale over a shard, in place.
template <int V>
__global__ void k_ce_backward(float* logits, const int32_t* targets, const float* lse, const float* row_scale,
                              int64_t v, int64_t vocab_start) {
    const int64_t r = blockIdx.x;
    const float s = row_scale[r];
    write_gradient<V>(logits + r * v, v, lse[r], s, static_cast<int64_t>(targets[r]) - vocab_start, s);
}

/// The shards' statistics combined (elementwise over rows, index type I as kernel::first_index):
/// Σexp relative to the global max, then lse.
template <class I>
__global__ void k_ce_rescale(float* row_sumexp, const float* row_max, const float* global_max, int64_t n) {
    for (I i = kernel::first_index<I>(); i < static_cast<I>(n); i += kernel::grid_stride<I>())
        row_sumexp[i] *= expf(row_max[i] - global_max[i]);
}
template <class I>
__global__ void k_ce_lse(float* lse, const float* row_max, const float* row_sumexp, int64_t n) {
    for (I i = kernel::first_index<I>(); i < static_cast<I>(n); i += kernel::grid_stride<I>())
        lse[i] = row_max[i] + logf(row_sumexp[i]);
}

/// out[0] = (accumulate ? out[0] : 0) + Σ (lse − target_logit) / divisor, in T (double): one block,
/// each thread a strided set of rows in order, then the fixed block tree; the division and the addition
/// as the host would do them (the pipeline's loss accumulator stays on the device).
template <class T>
__global__ void k_ce_loss_sum(T* out, const float* lse, const float* target_logit, int64_t n, T divisor,
                              bool accumulate) {
    __shared__ T sh[32];
    T s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += static_cast<T>(lse[i]) - static_cast<T>(target_logit[i]);
    s = kernel::block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = (accumulate ? out[0] : T(0)) + s / divisor;
}

// ---- word embedding backward ------------------------------------------------------------------------------

/// Vocabulary rows per block of k_embedding_bwd (a block owns them and a tile of columns).
constexpr int64_t kEmbeddingRowsPerBlock = 64;

/// fp32 elements of scratch an f16 dtable (the f16 gradient arena) is widened into at a time: 64 MiB.
constexpr int64_t kEmbeddingWidenElements = int64_t{16} << 20;
/// Vocabulary rows of one such slice for a table of width h: whole blocks of kEmbeddingRowsPerBlock,
/// at most max_elements floats, at least one block.
constexpr int64_t embedding_slice_rows(int64_t h, int64_t max_elements) {
    const int64_t blocks = max_elements / (h * kEmbeddingRowsPerBlock);
    return (blocks > 0 ? blocks : 1) * kEmbeddingRowsPerBlock;
}

/// dtable (vocab, h) += Σ over the rows r with ids[r] − vocab_start = v of dout[r]. Block (x, y) owns
/// vocabulary rows [y·64, y·64 + 64) and columns [x·blockDim·V, (x + 1)·blockDim·V): it walks every id
/// in row order (staged through shared memory) and adds the rows that fall in its range, so each
/// dtable element has one writer and sums its rows in row order — the CPU's order, bit for bit —
/// while the grid covers vocabulary × columns instead of one thread per column.
/// dout in storage S (an activation gradient, widened), dtable fp32 (the main gradient; an f16 arena's
/// table is widened into fp32 scratch by the launcher, a slice of vocabulary rows at a time, and
/// narrowed after: one rounding per element per call, as the CPU op).
template <int V, class S = storage::F32>
__global__ void k_embedding_bwd(float* dtable, const typename S::type* dout, const int32_t* ids, int64_t rows,
                                int64_t h, int64_t vocab, int64_t vocab_start) {
    constexpr int kStage = 1024;
    __shared__ int32_t staged[kStage];
    const int64_t v0 = static_cast<int64_t>(blockIdx.y) * kEmbeddingRowsPerBlock;
    const int64_t v1 = v0 + kEmbeddingRowsPerBlock < vocab ? v0 + kEmbeddingRowsPerBlock : vocab;
    const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
    for (int64_t r0 = 0; r0 < rows; r0 += kStage) {
        const int64_t n = rows - r0 < kStage ? rows - r0 : kStage;
        __syncthreads();
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const int64_t local = static_cast<int64_t>(ids[r0 + i]) - vocab_start;
            staged[i] = (local >= v0 && local < v1) ? static_cast<int32_t>(local - v0) : -1;
        }
        __syncthreads();
        if (c >= h) continue;  // after the barriers: every thread stages
        for (int64_t i = 0; i < n; ++i) {
            const int32_t k = staged[i];
            if (k < 0) continue;
            float* dst = dtable + (v0 + k) * h + c;
            Floats<V> acc = load<V>(dst);
            const Floats<V> d = storage::load_n<S, V>(dout + (r0 + i) * h + c);
#pragma unroll
            for (int j = 0; j < V; ++j) acc.v[j] += d.v[j];
            store<V>(dst, acc);
        }
    }
}

// ---- embedding forward and the learned position embedding ----------------------------------------------

/// out (rows, h) = table[ids[r] − vocab_start] (0 outside [0, vocab): another shard's row); out in
/// storage SO, the table in ST.
template <class SO, class ST>
__global__ void k_embedding_fwd(typename SO::type* out, const int32_t* ids, const typename ST::type* table,
                                int64_t rows, int64_t h, int64_t vocab, int64_t vocab_start) {
    for (int64_t i = kernel::first_index<int64_t>(); i < rows * h; i += kernel::grid_stride<int64_t>()) {
        const int64_t r = i / h, c = i % h;
        const int64_t local = static_cast<int64_t>(ids[r]) - vocab_start;
        out[i] = SO::store((local >= 0 && local < vocab) ? ST::load(table[local * h + c]) : 0.0f);
    }
}

/// out (S, B, h) += wpe[s + offset] (rounded once); out in SO, wpe in ST.
template <class SO, class ST>
__global__ void k_pos_fwd(typename SO::type* out, const typename ST::type* wpe, int64_t s_len, int64_t b_len,
                          int64_t h, int64_t offset) {
    for (int64_t i = kernel::first_index<int64_t>(); i < s_len * b_len * h; i += kernel::grid_stride<int64_t>()) {
        const int64_t s = i / (b_len * h), c = i % h;
        out[i] = SO::store(SO::load(out[i]) + ST::load(wpe[(s + offset) * h + c]));
    }
}

/// dwpe[s + offset] += Σ_b dout[s, b] in b order; dout in S, dwpe in SW: fp32, or an f16 gradient (the
/// f16 arena: widened, the batch's fp32 sum added to it, rounded once per call, as the CPU op).
template <class S, class SW = storage::F32>
__global__ void k_pos_bwd(typename SW::type* dwpe, const typename S::type* dout, int64_t s_len, int64_t b_len,
                          int64_t h, int64_t offset) {
    for (int64_t i = kernel::first_index<int64_t>(); i < s_len * h; i += kernel::grid_stride<int64_t>()) {
        const int64_t s = i / h, c = i % h;
        float acc = SW::load(dwpe[(s + offset) * h + c]);
        for (int64_t b = 0; b < b_len; ++b) acc += S::load(dout[(s * b_len + b) * h + c]);
        dwpe[(s + offset) * h + c] = SW::store(acc);
    }
}

}  // namespace mwb::cuda::classifier
