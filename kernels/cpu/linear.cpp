// GEMM on OpenBLAS (and oneDNN for some shapes with MWB_ONEDNN_GEMM; gemm.h) and the linear layer built on it.
#include "cpu_ops.h"
#include "gemm.h"
#include "storage.h"

#include "mwb/kernels/error.h"

#include <cblas.h>
#include <omp.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif
#if MWB_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include <algorithm>
#include <thread>
#include <vector>

namespace mwb::cpu {

namespace {

/// How one GEMM is cut into independent sgemm calls, each run single-threaded. The cut depends only
/// on the shape and the machine (machine_max_chunks), never on the thread count: OpenBLAS's own
/// threading changes the order of floating-point sums with the number of threads for some kernels (its
/// Haswell sgemm does), which would make results depend on --threads.
struct GemmSplit {
    enum class Axis { Rows, Cols, Depth };
    /// Rows of C (each chunk re-packs op(B)), its columns (each re-packs op(A)), or the inner
    /// dimension (each chunk packs only its slice of both; partial products summed in chunk order).
    Axis axis = Axis::Rows;
    int64_t chunks = 1;  ///< 1, 2, 4 or 8 (at most machine_max_chunks()): balanced for that many threads
};

/// The most chunks a GEMM is cut into: the machine's hardware threads rounded up to a power of two,
/// at most 8. Each chunk is its own BLAS call that re-packs the operand the chunks share, so chunks the
/// machine cannot run at once only cost (config S's fc1 products on 2 cores: ~10 % more CPU time cut
/// in 8 than in 2). It is the machine's count, not --threads nor the process's CPU affinity (mpirun
/// binds ranks to cores), so on one machine the result is the same for any thread count.
int64_t machine_max_chunks() {
    static const int64_t cap = [] {
        const int64_t hardware = std::max(1u, std::thread::hardware_concurrency());
        int64_t c = 1;
        while (c < 8 && c < hardware) c *= 2;
        return c;
    }();
    return cap;
}

/// The most partial-product scratch a depth split may use (bytes): beyond it, rows or columns.
constexpr int64_t kMaxDepthScratch = int64_t{64} << 20;

/// An x·Wᵀ product whose op(A) (m × k) is larger than this (bytes) is cut by rows: OpenBLAS sweeps its
/// packed copy of op(A) once per block of W, and beyond about half a core's L2 (2 MB on this machine)
/// a column chunk reads that panel from L3 on every sweep while a row chunk's half stays in L2. At
/// config S (1024 tokens × 384 = 1.5 MB) rows win although each re-packs W: the LM head forward
/// ~7 % and fc1's forward ~5 % of their CPU time (docs/performance.md, sixth round). Measured for the
/// forward only: for fc2's dW (op(A) = dyᵀ, also 1.5 MB) columns stay faster.
constexpr int64_t kForwardPanelBytes = int64_t{1} << 20;

GemmSplit plan_gemm_split(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k) {
    constexpr double kFlopsPerChunk = 128.0 * 1024 * 1024;  // below this a chunk is not worth a thread
    constexpr int64_t kMinChunk = 64;                       // rows/columns per chunk, a multiple of any unroll
    constexpr int64_t kMinDepthChunk = 512;                 // inner-dimension slice: several packing blocks
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    GemmSplit s;
    // Re-packing cost per extra chunk: splitting rows re-reads op(B) (k·n), columns op(A) (m·k), depth
    // writes and re-reads one partial C (2·m·n). Depth only where it wins clearly: a long inner
    // dimension such as the LM head's dx = dlogits · W over the vocabulary, where either other cut
    // re-packs a vocabulary-sized operand per chunk.
    const double rows_cost = static_cast<double>(k) * n, cols_cost = static_cast<double>(m) * k;
    const double depth_cost = 2.0 * static_cast<double>(m) * n;
    if (8 * depth_cost <= std::min(rows_cost, cols_cost) && k >= 2 * kMinDepthChunk)
        s.axis = GemmSplit::Axis::Depth;
    else if (!trans_a && trans_b && m * k * static_cast<int64_t>(sizeof(float)) > kForwardPanelBytes &&
             m >= 2 * kMinChunk)
        s.axis = GemmSplit::Axis::Rows;
    else if (rows_cost <= cols_cost ? m >= 2 * kMinChunk : !(n >= 2 * kMinChunk))
        s.axis = GemmSplit::Axis::Rows;
    else
        s.axis = GemmSplit::Axis::Cols;
    const bool depth = s.axis == GemmSplit::Axis::Depth;
    const int64_t dim = depth ? k : s.axis == GemmSplit::Axis::Rows ? m : n;
    const int64_t min_chunk = depth ? kMinDepthChunk : kMinChunk;
    const int64_t max_chunks = machine_max_chunks();
    while (s.chunks < max_chunks && flops / static_cast<double>(2 * s.chunks) >= kFlopsPerChunk &&
           dim / (2 * s.chunks) >= min_chunk &&
           (!depth || (2 * s.chunks - 1) * m * n * static_cast<int64_t>(sizeof(float)) <= kMaxDepthScratch))
        s.chunks *= 2;
    return s;
}

/// Scratch for the partial products of a depth split, kept per thread and grown as needed (the
/// GEMM's caller cannot size it: it depends on the cut).
float* depth_scratch(int64_t elements) {
    thread_local std::vector<float> scratch;
    if (static_cast<int64_t>(scratch.size()) < elements) scratch.resize(static_cast<std::size_t>(elements));
    return scratch.data();
}

/// A β = 0 product's C at least this large (bytes) is zeroed here with streaming stores and computed with
/// β = 1: cblas zeroes C for β = 0 in a pass of ordinary stores (each line read for ownership first, then
/// evicted long before the kernel comes back to it at this size). The same bits: the kernel adds onto
/// +0 either way. Config S's LM head forward (two 65 MB chunks of the logits): 2–11 CPU ms less per chunk
/// of 110–195 (docs/performance.md, sixth round).
constexpr int64_t kStreamZeroBytes = int64_t{16} << 20;

/// C (rows × cols, leading dimension ld) = 0 with non-temporal stores where the CPU has them.
void stream_zero(float* c, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t r = 0; r < rows; ++r) {
        float* row = c + r * ld;
        int64_t j = 0;
#if defined(__AVX512F__)
        for (; j < cols && reinterpret_cast<uintptr_t>(row + j) % 64 != 0; ++j) row[j] = 0.0f;
        for (; j + 16 <= cols; j += 16) _mm512_stream_ps(row + j, _mm512_setzero_ps());
#elif defined(__AVX__)
        for (; j < cols && reinterpret_cast<uintptr_t>(row + j) % 32 != 0; ++j) row[j] = 0.0f;
        for (; j + 8 <= cols; j += 8) _mm256_stream_ps(row + j, _mm256_setzero_ps());
#endif
        for (; j < cols; ++j) row[j] = 0.0f;
    }
#if defined(__AVX__)
    _mm_sfence();  // the streaming stores are ordered before the kernel's loads of C
#endif
}

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

void blas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#if MWB_WITH_ONEDNN
    // oneDNN's sgemm was faster at config S's y = x·Wᵀ (NT) and at dx = dy·W with an output no wider
    // than its inner dimension; OpenBLAS at dW = dyᵀ·x (TN) and the wide dx (mwb-bench-blas).
    if (!trans_a && (trans_b || n <= k)) {
        const dnnl_status_t status = dnnl_sgemm('N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b,
                                                ldb, beta, c, ldc);
        MWB_CHECK(status == dnnl_success, "matmul: oneDNN's sgemm failed (status {}) at m={} n={} k={}",
                  static_cast<int>(status), m, n, k);
        return;
    }
#endif
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
                static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void split_sgemm(SgemmFn sgemm, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* pa, int64_t lda, const float* pb, int64_t ldb, float beta, float* pc, int64_t ldc) {
    if (m == 0 || n == 0) return;
    const GemmSplit split = plan_gemm_split(trans_a, trans_b, m, n, k);
    const bool depth = split.axis == GemmSplit::Axis::Depth, rows = split.axis == GemmSplit::Axis::Rows;
    const int64_t dim = depth ? k : rows ? m : n;
    const int64_t chunk = (dim + split.chunks - 1) / split.chunks;
    float* partial = depth && split.chunks > 1 ? depth_scratch((split.chunks - 1) * m * n) : nullptr;
    const auto run = [&](int64_t i, int64_t first, int64_t count) {
        // A chunk of rows of C is a chunk of rows of op(A); a chunk of columns, one of op(B); a depth
        // chunk, columns of op(A) and rows of op(B). Depth chunk 0 applies beta to C, the others write
        // their own partial product (leading dimension n).
        const float* ca = rows ? (trans_a ? pa + first : pa + first * lda)
                               : depth ? (trans_a ? pa + first * lda : pa + first) : pa;
        const float* cb = rows ? pb : (trans_b ? pb + first * ldb : pb + first);
        if (depth) cb = trans_b ? pb + first : pb + first * ldb;
        const bool own_partial = depth && i > 0;
        float* cc = rows ? pc + first * ldc : depth ? (i == 0 ? pc : partial + (i - 1) * m * n) : pc + first;
        const int64_t cm = rows ? count : m, cn = rows || depth ? n : count, ck = depth ? count : k;
        float cbeta = own_partial ? 0.0f : beta;
        if (cbeta == 0.0f && cm * cn * static_cast<int64_t>(sizeof(float)) >= kStreamZeroBytes) {
            stream_zero(cc, cm, cn, own_partial ? n : ldc);
            cbeta = 1.0f;
        }
        sgemm(trans_a, trans_b, cm, cn, ck, alpha, ca, lda, cb, ldb, cbeta, cc, own_partial ? n : ldc);
    };
    if (split.chunks == 1) {
        // OpenBLAS (OpenMP build) follows omp_get_max_threads() outside parallel regions: make it 1.
        const int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        run(0, 0, dim);
        omp_set_num_threads(threads);
        return;
    }
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < split.chunks; ++i) {
            const int64_t first = i * chunk;
            if (first < dim) run(i, first, std::min(chunk, dim - first));
        }
        if (depth) {
            // C += Σ partials in chunk order, row by row: the same sums for any thread count.
            const int64_t used = (dim + chunk - 1) / chunk;
#pragma omp for schedule(static)
            for (int64_t r = 0; r < m; ++r) {
                float* cr = pc + r * ldc;
                for (int64_t i = 1; i < used; ++i) {
                    const float* pr = partial + (i - 1) * m * n + r * n;
#pragma omp simd
                    for (int64_t j = 0; j < n; ++j) cr[j] += pr[j];
                }
            }
        }
    }
}

void matmul(OpContext&, TensorView c, TensorView a, TensorView b, bool trans_a, bool trans_b, float alpha,
            float beta) {
    // Shapes and dtypes were checked by the dispatcher (this is also linear_*'s GEMM). 16-bit operands
    // are widened into fp32 scratch for sgemm and a 16-bit c is computed in fp32 and rounded once.
    const TensorView a32 = widened(a, Scratch::A), b32 = widened(b, Scratch::B);
    const TensorView c32 = f32_target(c, Scratch::C, beta != 0.0f);
    const int64_t m = trans_a ? a.dim(1) : a.dim(0);
    const int64_t k = trans_a ? a.dim(0) : a.dim(1);
    const int64_t n = trans_b ? b.dim(0) : b.dim(1);
    split_sgemm(blas_sgemm, trans_a, trans_b, m, n, k, alpha, a32.f32(), a.dim(1), b32.f32(), b.dim(1), beta, c32.f32(),
                n);
    narrow(c, c32);
}

void linear_forward(OpContext& ctx, TensorView y, TensorView x, TensorView w, TensorView bias) {
    const int64_t rows = x.rows(), in = x.cols(), out = w.dim(0);
    // A 16-bit y is computed in fp32 (bias and GEMM) and rounded once, as the emulated store did.
    const TensorView y32 = f32_target(reshaped(y, {rows, out}), Scratch::Out, false);
    if (!bias.empty()) {
        // Start from the bias and let the GEMM accumulate onto it: one pass over y instead of two.
        // A 16-bit bias (the weights' working copy in bf16/fp16 runs) is widened once (exact).
        float* py = y32.f32();
        const float* pb = widened(bias, Scratch::Bias).f32();
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
            for (int64_t c = 0; c < out; ++c) py[r * out + c] = pb[c];
        }
    }
    matmul(ctx, y32, reshaped(x, {rows, in}), w, false, true, 1.0f, bias.empty() ? 0.0f : 1.0f);
    narrow(reshaped(y, {rows, out}), y32);
}

void linear_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dbias, TensorView dy, TensorView x,
                     TensorView w, bool accumulate_dx) {
    const int64_t rows = x.rows(), in = x.cols(), out = w.dim(0);
    const TensorView dy2 = reshaped(dy, {rows, out});
    if (!dx.empty()) {
        matmul(ctx, reshaped(dx, {rows, in}), dy2, w, false, false, 1.0f, accumulate_dx ? 1.0f : 0.0f);
    }
    // An f16 dw or dbias (the f16 gradient arena) is accumulated in fp32 and rounded once (storage.h).
    matmul(ctx, dw, dy2, reshaped(x, {rows, in}), true, false, 1.0f, 1.0f);
    if (!dbias.empty()) {
        const TensorView db32 = widened(dbias, Scratch::GradBias);
        add_column_sums(db32.f32(), widened(dy2, Scratch::Out).f32(), rows, out);
        narrow(dbias, db32);
    }
}

}  // namespace mwb::cpu

namespace mwb::cpu {

namespace {
/// The storage rounding of an f32 tensor; a 16-bit one was rounded by the op that wrote it.
void round_f32(OpContext& ctx, const TensorView& t, DType storage) {
    if (t.dtype == DType::F32) round_to(ctx, t, storage);
}
}  // namespace

// The fused ops of the MLP are, on the CPU, the unfused sequence they replace (the same bits as
// before they existed); CUDA fuses them into cuBLASLt epilogues (cuda/gemm.cpp).
void linear_gelu_forward(OpContext& ctx, TensorView act, TensorView pre, TensorView x, TensorView w, TensorView bias,
                         DType storage) {
    linear_forward(ctx, pre, x, w, bias);
    round_f32(ctx, pre, storage);
    gelu_forward(ctx, act, pre);
}

void linear_backward_gelu(OpContext& ctx, TensorView dpre, TensorView dpre_bias, TensorView dw, TensorView dbias,
                          TensorView dy, TensorView x, TensorView w, TensorView pre, DType storage) {
    linear_backward(ctx, dpre, dw, dbias, dy, x, w, false);
    round_f32(ctx, dpre, storage);
    gelu_backward(ctx, dpre, dpre, pre);
    round_f32(ctx, dpre, storage);
    if (!dpre_bias.empty()) {
        const TensorView db32 = widened(dpre_bias, Scratch::GradBias);
        add_column_sums(db32.f32(), widened(dpre, Scratch::Out).f32(), x.rows(), x.cols());
        narrow(dpre_bias, db32);
    }
}

}  // namespace mwb::cpu
