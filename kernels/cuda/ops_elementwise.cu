// CUDA ops other than GEMM and attention: elementwise, storage rounding, sum of squares, embeddings,
// LayerNorm/RMSNorm, GELU, dropout (the CPU's Philox counters, so masks match bit for bit),
// softmax + cross-entropy partials, AdamW. Every reduction has a fixed shape and order (warp
// shuffles in a fixed tree, column sums over fixed row chunks): no atomics, bit-identical run to run.
#include "classifier_kernels.cuh"
#include "cuda_ops.h"
#include "elementwise_kernels.cuh"
#include "grad_norm_kernels.cuh"
#include "kernel_common.cuh"
#include "norm_kernels.cuh"
#include "storage.cuh"
#include "optimizer_kernels.cuh"
#include "runtime.h"

#include "mwb/kernels/philox.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace mwb::cuda {

namespace {

constexpr int kThreads = kElementwiseThreads;

const float* cf(const TensorView& t) { return static_cast<const float*>(t.data); }
float* mf(const TensorView& t) { return static_cast<float*>(t.data); }
const int32_t* ci(const TensorView& t) { return static_cast<const int32_t*>(t.data); }

#define MWB_GRID_STRIDE(i, n) \
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

using kernel::block_max;
using kernel::block_sum;

using norm::kNormThreads;
using norm::kRowChunk;

// ---- elementwise kernels ----------------------------------------------------------------------------

/// out = f(a, b) elementwise (elementwise_kernels.cuh), out, a and b in storages SO, SA and SB (b null:
/// pass SB = SA): the 16-byte aligned bulk V at a time (8 when a tensor is 16-bit, so each moves 16
/// bytes per access, else 4), the tail (or everything, unaligned) one element at a time.
template <class SO, class SA, class SB, class F>
void map(cudaStream_t s, typename SO::type* out, const typename SA::type* a, const typename SB::type* b, int64_t n,
         F f) {
    constexpr int V = storage::any_16bit<SO, SA, SB> ? 8 : 4;
    const bool wide = storage::aligned_to(16, out, a, b);
    const int64_t bulk = wide ? n / V * V : 0;
    const auto run = [&](auto vector, typename SO::type* o, const typename SA::type* x, const typename SB::type* y,
                         int64_t count) {
        constexpr int W = decltype(vector)::value;
        const int64_t items = count / W;
        if (kernel::narrow(items))
            elementwise::k_map<W, uint32_t, SO, SA, SB><<<blocks_for(items), kThreads, 0, s>>>(o, x, y, count, f);
        else
            elementwise::k_map<W, int64_t, SO, SA, SB><<<blocks_for(items), kThreads, 0, s>>>(o, x, y, count, f);
    };
    if (bulk > 0) run(std::integral_constant<int, V>{}, out, a, b, bulk);
    if (n > bulk) run(std::integral_constant<int, 1>{}, out + bulk, a ? a + bulk : nullptr, b ? b + bulk : nullptr, n - bulk);
}

using storage::elements;
using storage::with_storage;
using storage::with_storages;

// ---- AdamW (kernel: optimizer_kernels.cuh) -------------------------------------------------------------

/// Rounds an f32 copy's values as the model stores them: bf16, fp16 or as is (a 16-bit copy is
/// rounded by its store: kind 0).
struct RoundCopy {
    int kind;  // 1 bf16, 2 fp16, else as is
    __device__ float operator()(float x) const {
        return kind == 1 ? storage::round_to_bf16(x) : kind == 2 ? storage::round_to_fp16(x) : x;
    }
};

/// One k_adamw launch's arrays and arguments: g in storage SG, copy in SC.
template <class SG, class SC>
struct AdamWLaunch {
    float *w, *m, *v;
    typename SG::type* g;
    typename SC::type* copy;
    int64_t n;
    optimizer::AdamArgs a;
    const float* scale;
    const double* step;
    bool decays;
    RoundCopy round;
    /// The elements [at, at + count) of the same arrays.
    AdamWLaunch from(int64_t at, int64_t count) const {
        AdamWLaunch r = *this;
        for (float** p : {&r.w, &r.m, &r.v}) *p += at;
        r.g += at;
        if (r.copy) r.copy += at;
        r.n = count;
        return r;
    }
};

/// V elements per array per thread (V > 1: every array 16-byte aligned, n a multiple of V).
template <int V, class SG, class SC>
void launch_adamw(cudaStream_t s, const AdamWLaunch<SG, SC>& l) {
    if (l.n == 0) return;
    const int64_t items = l.n / V;
    if (kernel::narrow(items))
        optimizer::k_adamw<V, uint32_t, SG, SC><<<blocks_for(items), kThreads, 0, s>>>(
            l.w, l.g, l.m, l.v, l.copy, l.n, l.a, l.scale, l.step, l.decays, l.round);
    else
        optimizer::k_adamw<V, int64_t, SG, SC><<<blocks_for(items), kThreads, 0, s>>>(
            l.w, l.g, l.m, l.v, l.copy, l.n, l.a, l.scale, l.step, l.decays, l.round);
}

void launched(const char* op) { check_launch(op); }

}  // namespace

// ---- host entry points ------------------------------------------------------------------------------

void column_sums_add(cudaStream_t stream, const TensorView& out, const float* x, int64_t rows, int64_t cols) {
    column_sums_add(stream, out, DType::F32, x, rows, cols);
}

void column_sums_add(cudaStream_t stream, const TensorView& out, DType x_dtype, const void* x, int64_t rows,
                     int64_t cols) {
    if (rows == 0 || cols == 0) return;
    const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
    MWB_CHECK(chunks <= 65535, "column sums: {} rows exceed the {} a launch covers", rows, 65535 * kRowChunk);
    float* partial = static_cast<float*>(scratch(0, chunks * cols * static_cast<int64_t>(sizeof(float)), stream));
    const dim3 grid(static_cast<unsigned>((cols + 127) / 128), static_cast<unsigned>(chunks));
    with_storage(x_dtype, [&](auto sx) {
        using S = decltype(sx);
        norm::k_column_partials<S><<<grid, 128, 0, stream>>>(static_cast<const typename S::type*>(x), rows, cols, partial);
    });
    with_storage(out.dtype, [&](auto so) {  // f32, or an f16 gradient
        using SO = decltype(so);
        norm::k_sum_partials<SO><<<blocks_for(cols), kThreads, 0, stream>>>(elements<SO>(out), partial, chunks, cols);
    });
    launched("column sums");
}

void convert_to_bf16(cudaStream_t stream, void* dst, const float* src, int64_t n) {
    convert(stream, DType::BF16, dst, DType::F32, src, n);
}

void convert(cudaStream_t stream, DType dst_dtype, void* dst, DType src_dtype, const void* src, int64_t n) {
    if (n == 0) return;
    with_storages(dst_dtype, src_dtype, [&](auto so, auto si) {
        using SO = decltype(so);
        using SI = decltype(si);
        map<SO, SI, SI>(stream, static_cast<typename SO::type*>(dst), static_cast<const typename SI::type*>(src),
                        nullptr, n, elementwise::Copy{});
    });
    launched("dtype conversion");
}

void add_bias_rows(cudaStream_t stream, const TensorView& y, const float* in, const TensorView& bias) {
    const int64_t rows = y.rows(), cols = y.cols();
    if (rows * cols == 0) return;
    with_storages(y.dtype, bias.dtype, [&](auto so, auto sw) {
        using SO = decltype(so);
        using W = decltype(sw);
        norm::k_add_bias_rows<SO, storage::F32, W><<<blocks_for(rows * cols), kThreads, 0, stream>>>(
            elements<SO>(y), in, elements<W>(bias), rows, cols);
    });
    launched("bias add");
}

void fill(OpContext& ctx, TensorView x, float value) {
    if (x.numel() == 0) return;
    with_storage(x.dtype, [&](auto st) {
        using S = decltype(st);
        map<S, S, S>(stream_of(ctx), elements<S>(x), nullptr, nullptr, x.numel(), elementwise::Fill{value});
    });
    launched("fill");
}

void fill_from(OpContext& ctx, TensorView x, TensorView value, float divisor) {
    if (x.numel() == 0) return;
    using S = storage::F32;
    map<S, S, S>(stream_of(ctx), elements<S>(x), nullptr, nullptr, x.numel(),
                 elementwise::FillFrom{static_cast<const double*>(value.data), divisor});
    launched("fill_from");
}

void copy(OpContext& ctx, TensorView dst, TensorView src) {
    const int64_t n = dst.numel();
    if (dst.dtype == src.dtype) {
        // Any direction: device<->device, or to/from host memory (tests and checkpoints).
        MWB_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(n) * dtype_size(dst.dtype),
                                       cudaMemcpyDefault, stream_of(ctx)));
        if (dst.device == Device::CPU) MWB_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
        return;
    }
    MWB_CHECK(dst.device == Device::CUDA && src.device == Device::CUDA,
              "copy: dtype conversion {} from {} only between CUDA tensors", dst.describe(), src.describe());
    convert(stream_of(ctx), dst.dtype, dst.data, src.dtype, src.data, n);
}

void scale(OpContext& ctx, TensorView x, float alpha) {
    if (x.numel() == 0) return;
    with_storage(x.dtype, [&](auto st) {
        using S = decltype(st);
        map<S, S, S>(stream_of(ctx), elements<S>(x), elements<S>(x), nullptr, x.numel(), elementwise::Scale{alpha});
    });
    launched("scale");
}

void add(OpContext& ctx, TensorView out, TensorView a, TensorView b) {
    if (out.numel() == 0) return;
    MWB_CHECK(a.dtype == b.dtype, "add: a={} and b={} must share a dtype on CUDA", a.describe(), b.describe());
    with_storages(out.dtype, a.dtype, [&](auto so, auto si) {
        using SO = decltype(so);
        using SI = decltype(si);
        map<SO, SI, SI>(stream_of(ctx), elements<SO>(out), elements<SI>(a), elements<SI>(b), out.numel(),
                        elementwise::Add{});
    });
    launched("add");
}

void round_to(OpContext& ctx, TensorView x, DType dtype) {
    // A 16-bit view already holds values of its own precision: rounding to it (or to f32) keeps them.
    if (dtype == DType::F32 || dtype == x.dtype || x.numel() == 0) return;
    with_storage(x.dtype, [&](auto sx) {
        using S = decltype(sx);
        if (dtype == DType::BF16)
            map<S, S, S>(stream_of(ctx), elements<S>(x), elements<S>(x), nullptr, x.numel(), elementwise::RoundBf16{});
        else
            map<S, S, S>(stream_of(ctx), elements<S>(x), elements<S>(x), nullptr, x.numel(), elementwise::RoundFp16{});
    });
    launched("round_to");
}

namespace {
/// The range table of the last sum_squares_ranges call, on the host and in scratch slot 6: a training
/// run passes the same ranges every step, so it is uploaded once (the host copy stays alive for the
/// asynchronous upload; a change re-uploads on the stream, behind the queued work that read the old one).
std::vector<grad_norm::Range>& uploaded_ranges() {
    thread_local std::vector<grad_norm::Range> r;
    return r;
}
}  // namespace

void sum_squares_ranges(OpContext& ctx, TensorView out, TensorView x, const std::vector<IndexRange>& ranges) {
    using grad_norm::kChunk;
    std::vector<grad_norm::Range> table;
    table.reserve(ranges.size());
    int64_t chunks = 0;
    for (const IndexRange& r : ranges) {
        if (r.count == 0) continue;  // no chunk (the binary search needs strictly rising chunk_begin), adds 0
        table.push_back({r.first, r.count, chunks});
        chunks += (r.count + kChunk - 1) / kChunk;
    }
    MWB_CHECK(chunks <= 0x7FFFFFFF && table.size() <= 0x7FFFFFFF, "sum_squares_ranges: {} chunks exceed one launch",
              chunks);
    const auto bytes = static_cast<int64_t>(table.size() * sizeof(grad_norm::Range));
    auto* device_table = static_cast<grad_norm::Range*>(scratch(6, std::max<int64_t>(bytes, 1), stream_of(ctx)));
    std::vector<grad_norm::Range>& last = uploaded_ranges();
    const auto same = [](const grad_norm::Range& a, const grad_norm::Range& b) {
        return a.first == b.first && a.count == b.count && a.chunk_begin == b.chunk_begin;
    };
    if (!std::equal(table.begin(), table.end(), last.begin(), last.end(), same)) {
        last = std::move(table);
        if (bytes > 0)
            MWB_CUDA_CHECK(cudaMemcpyAsync(device_table, last.data(), static_cast<size_t>(bytes),
                                           cudaMemcpyHostToDevice, stream_of(ctx)));
    }
    const int n = static_cast<int>(last.size());
    double* partial = static_cast<double*>(scratch(0, (chunks + n) * static_cast<int64_t>(sizeof(double)), stream_of(ctx)));
    if (chunks > 0)
        with_storage(x.dtype, [&](auto sx) {  // f32, or an f16 gradient arena
            using S = decltype(sx);
            grad_norm::squares_partials<S><<<static_cast<unsigned>(chunks), kThreads, 0, stream_of(ctx)>>>(
                elements<S>(x), device_table, n, partial);
        });
    grad_norm::squares_total<<<1, kThreads, 0, stream_of(ctx)>>>(static_cast<double*>(out.data), partial + chunks,
                                                                 partial, device_table, n, chunks);
    launched("sum_squares_ranges");
}

std::vector<double> read_f64(OpContext& ctx, TensorView x) {
    std::vector<double> v(static_cast<std::size_t>(x.numel()));
    MWB_CUDA_CHECK(
        cudaMemcpyAsync(v.data(), x.data, v.size() * sizeof(double), cudaMemcpyDeviceToHost, stream_of(ctx)));
    MWB_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
    return v;
}

double sum_squares(OpContext& ctx, TensorView x) {
    // The one-range case of sum_squares_ranges, read back from a device double of this thread's
    // (allocated once; this op is not in the training step, whose norm stays on the device).
    thread_local double* out = nullptr;
    if (!out) MWB_CUDA_CHECK(cudaMalloc(&out, sizeof(double)));
    sum_squares_ranges(ctx, make_view(out, DType::F64, {1}, Device::CUDA), x, {IndexRange{0, x.numel()}});
    return read_f64(ctx, make_view(out, DType::F64, {1}, Device::CUDA))[0];
}

void gradient_scale(OpContext& ctx, TensorView scale, TensorView sumsq, double loss_scale, double clip_grad,
                    TensorView step) {
    grad_norm::gradient_scale<<<1, 1, 0, stream_of(ctx)>>>(
        mf(scale), static_cast<const double*>(sumsq.data), loss_scale, clip_grad,
        step.empty() ? nullptr : static_cast<const double*>(step.data) + step_params::LossScale);
    launched("gradient_scale");
}

void embedding_forward(OpContext& ctx, TensorView out, TensorView ids, TensorView table, int64_t vocab_start) {
    const int64_t rows = ids.numel(), h = table.dim(1);
    if (rows * h == 0) return;
    with_storages(out.dtype, table.dtype, [&](auto so, auto st) {
        using SO = decltype(so);
        using ST = decltype(st);
        classifier::k_embedding_fwd<SO, ST><<<blocks_for(rows * h), kThreads, 0, stream_of(ctx)>>>(
            elements<SO>(out), ci(ids), elements<ST>(table), rows, h, table.dim(0), vocab_start);
    });
    launched("embedding_forward");
}

namespace {
/// k_embedding_bwd over an fp32 dtable (vocab, h) whose row 0 is vocabulary id vocab_start.
void embedding_backward_f32(cudaStream_t stream, float* dtable, const TensorView& dout, const TensorView& ids,
                            int64_t vocab, int64_t h, int64_t vocab_start) {
    const int64_t rows = ids.numel();
    const int64_t vocab_blocks = (vocab + classifier::kEmbeddingRowsPerBlock - 1) / classifier::kEmbeddingRowsPerBlock;
    MWB_CHECK(vocab_blocks <= 65535, "embedding_backward: a vocabulary of {} rows exceeds the {} a launch covers",
              vocab, 65535 * classifier::kEmbeddingRowsPerBlock);
    with_storage(dout.dtype, [&](auto sd) {
        using S = decltype(sd);
        // 4 columns per thread: 16 bytes of the fp32 dtable, 16 or 8 of dout.
        const bool wide = h % 4 == 0 && kernel::aligned16(dtable) &&
                          storage::aligned_to(4 * static_cast<int64_t>(sizeof(typename S::type)), dout.data);
        const int per_thread = wide ? 4 : 1;
        const dim3 grid(static_cast<unsigned>((h + kThreads * per_thread - 1) / (kThreads * per_thread)),
                        static_cast<unsigned>(vocab_blocks));
        if (wide)
            classifier::k_embedding_bwd<4, S><<<grid, kThreads, 0, stream>>>(dtable, elements<S>(dout), ci(ids), rows,
                                                                          h, vocab, vocab_start);
        else
            classifier::k_embedding_bwd<1, S><<<grid, kThreads, 0, stream>>>(dtable, elements<S>(dout), ci(ids), rows,
                                                                          h, vocab, vocab_start);
    });
}
}  // namespace

void embedding_backward(OpContext& ctx, TensorView dtable, TensorView dout, TensorView ids, int64_t vocab_start) {
    const int64_t rows = ids.numel(), h = dtable.dim(1), vocab = dtable.dim(0);
    if (rows * h == 0) return;
    const cudaStream_t s = stream_of(ctx);
    if (dtable.dtype == DType::F32) {
        embedding_backward_f32(s, mf(dtable), dout, ids, vocab, h, vocab_start);
    } else {
        // An f16 table (the f16 gradient arena): slices of vocabulary rows widened into fp32 scratch
        // (slot 0), accumulated there by the fp32 kernel, narrowed back: each element rounded once.
        const int64_t slice = classifier::embedding_slice_rows(h, classifier::kEmbeddingWidenElements);
        auto* table = static_cast<uint16_t*>(dtable.data);
        for (int64_t v0 = 0; v0 < vocab; v0 += slice) {
            const int64_t n = std::min(slice, vocab - v0) * h;
            auto* wide = static_cast<float*>(scratch(0, n * static_cast<int64_t>(sizeof(float)), s));
            convert(s, DType::F32, wide, dtable.dtype, table + v0 * h, n);
            embedding_backward_f32(s, wide, dout, ids, n / h, h, vocab_start + v0);
            convert(s, dtable.dtype, table + v0 * h, DType::F32, wide, n);
        }
    }
    launched("embedding_backward");
}

void position_embedding_forward(OpContext& ctx, TensorView out, TensorView wpe, int64_t position_offset) {
    if (out.numel() == 0) return;
    with_storages(out.dtype, wpe.dtype, [&](auto so, auto st) {
        using SO = decltype(so);
        using ST = decltype(st);
        classifier::k_pos_fwd<SO, ST><<<blocks_for(out.numel()), kThreads, 0, stream_of(ctx)>>>(
            elements<SO>(out), elements<ST>(wpe), out.dim(0), out.dim(1), out.dim(2), position_offset);
    });
    launched("position_embedding_forward");
}

void position_embedding_backward(OpContext& ctx, TensorView dwpe, TensorView dout, int64_t position_offset) {
    if (dout.numel() == 0) return;
    with_storages(dout.dtype, dwpe.dtype, [&](auto sd, auto sw) {  // dwpe f32, or an f16 gradient
        using S = decltype(sd);
        using SW = decltype(sw);
        classifier::k_pos_bwd<S, SW><<<blocks_for(dout.dim(0) * dout.dim(2)), kThreads, 0, stream_of(ctx)>>>(
            elements<SW>(dwpe), elements<S>(dout), dout.dim(0), dout.dim(1), dout.dim(2), position_offset);
    });
    launched("position_embedding_backward");
}

namespace {

/// The storages of a norm: its activations (x, out or dx, dout) share one, its weights (w, b) another.
template <class F>
void with_norm_storages(const char* op, const TensorView& x, const TensorView& like_x, const TensorView& w,
                        const TensorView& b, F&& f) {
    MWB_CHECK(like_x.dtype == x.dtype, "{}: {} and x={} must share a dtype on CUDA", op, like_x.describe(),
              x.describe());
    MWB_CHECK(b.empty() || b.dtype == w.dtype, "{}: b={} and w={} must share a dtype on CUDA", op, b.describe(),
              w.describe());
    with_storages(x.dtype, w.dtype, f);
}

/// Calls f(std::integral_constant<int, V>{}) with the V of a row kernel (norm_kernels.cuh): 16 bytes per
/// access of activations in S (kPerAccess<S> elements) when every row of the row pointers starts 16-byte
/// aligned (h % V == 0, the pointers 16-byte aligned: arena slices are), else 1. One choice for a norm's
/// pointers, whether launched alone or fused after the residual add, so that both give the same bits.
template <class S, class F, class... P>
void with_row_width(int64_t h, F&& f, const P*... rows) {
    if (h % storage::kPerAccess<S> == 0 && storage::aligned_to(16, rows...))
        f(std::integral_constant<int, storage::kPerAccess<S>>{});
    else
        f(std::integral_constant<int, 1>{});
}

/// Calls f(storage of dout) for a norm backward's dout: x's storage, or f32 beside 16-bit x (under
/// tensor parallelism a 16-bit run's norm-input gradient is the f32 reduction buffer,
/// TransformerLayer::backward's grad_h). dx may alias dout only when they share a dtype.
template <class S, class F>
void with_dout_storage(const char* op, const TensorView& dout, const TensorView& dx, F&& f) {
    if (dout.dtype == S::dtype) return f(S{});
    MWB_CHECK(dout.dtype == DType::F32, "{}: dout={} must be f32 or x's dtype ({}) on CUDA", op, dout.describe(),
              dtype_name(S::dtype));
    const auto* d = static_cast<const char*>(dout.data);
    const auto* o = static_cast<const char*>(dx.data);
    MWB_CHECK(d + dout.numel() * 4 <= o || o + dx.numel() * static_cast<int64_t>(sizeof(typename S::type)) <= d,
              "{}: dx={} overlaps dout={} of another dtype", op, dx.describe(), dout.describe());
    f(storage::F32{});
}

/// dw (+ db when given) += Σ over rows of the norm's parameter gradient, in fixed row chunks; dw and db
/// f32, or f16 (the f16 gradient arena: the chunks' fp32 sum added to the widened value, rounded once).
/// x in S, dout in SD (S, or f32 beside 16-bit x).
template <class S, class SD>
void norm_param_grads(cudaStream_t s, const TensorView& dw, const TensorView& db, const typename SD::type* dout,
                      const typename S::type* x, const float* mean, const float* rstd, int64_t rows, int64_t h) {
    const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
    MWB_CHECK(chunks <= 65535, "norm backward: {} rows exceed the {} a launch covers", rows, 65535 * kRowChunk);
    float* pw = static_cast<float*>(scratch(0, 2 * chunks * h * static_cast<int64_t>(sizeof(float)), s));
    float* pb = db.empty() ? nullptr : pw + chunks * h;
    const dim3 grid(static_cast<unsigned>((h + 127) / 128), static_cast<unsigned>(chunks));
    norm::k_norm_bwd_partials<S, SD><<<grid, 128, 0, s>>>(pw, pb, dout, x, mean, rstd, rows, h);
    const auto sum = [&](const TensorView& out, const float* partial) {
        with_storage(out.dtype, [&](auto so) {
            using SO = decltype(so);
            norm::k_sum_partials<SO><<<blocks_for(h), kThreads, 0, s>>>(elements<SO>(out), partial, chunks, h);
        });
    };
    sum(dw, pw);
    if (pb) sum(db, pb);
}
}  // namespace

void layernorm_forward(OpContext& ctx, TensorView out, TensorView mean, TensorView rstd, TensorView x, TensorView w,
                       TensorView b, float eps) {
    if (x.rows() == 0) return;
    with_norm_storages("layernorm_forward", x, out, w, b, [&](auto sx, auto sw) {
        using S = decltype(sx);
        using W = decltype(sw);
        const auto* px = elements<S>(x);
        const auto *pw = elements<W>(w), *pb = elements<W>(b);
        auto* po = elements<S>(out);
        with_row_width<S>(x.cols(), [&](auto v) {
            norm::k_layernorm_fwd<S, W, decltype(v)::value>
                <<<static_cast<unsigned>(x.rows()), kNormThreads, 0, stream_of(ctx)>>>(po, mf(mean), mf(rstd), px, pw,
                                                                                      pb, x.cols(), eps);
        }, po, px, pw, pb);
    });
    launched("layernorm_forward");
}

namespace {
/// LayerNorm's backward (mean and db given) or RMSNorm's (both empty): the parameter gradients first
/// (dx may alias dout), then dx.
void norm_backward(const char* op, OpContext& ctx, TensorView dx, TensorView dw, TensorView db, TensorView dout,
                   TensorView x, TensorView mean, TensorView rstd, TensorView w, bool accumulate_dx) {
    if (x.rows() == 0) return;
    with_norm_storages(op, x, dx, w, {}, [&](auto sx, auto sw) {
        using S = decltype(sx);
        using W = decltype(sw);
        with_dout_storage<S>(op, dout, dx, [&](auto sd) {
            using SD = decltype(sd);
            const float* pm = mean.empty() ? nullptr : cf(mean);
            norm_param_grads<S, SD>(stream_of(ctx), dw, db, elements<SD>(dout), elements<S>(x), pm, cf(rstd), x.rows(),
                                    x.cols());
            const auto* pd = elements<SD>(dout);
            const auto* px = elements<S>(x);
            const auto* pw = elements<W>(w);
            auto* pdx = elements<S>(dx);
            with_row_width<S>(x.cols(), [&](auto v) {
                norm::k_norm_bwd_dx<S, W, decltype(v)::value, SD>
                    <<<static_cast<unsigned>(x.rows()), kNormThreads, 0, stream_of(ctx)>>>(
                        pdx, pd, px, pm, cf(rstd), pw, x.cols(), accumulate_dx ? 1 : 0);
            }, pdx, pd, px, pw);
        });
    });
    launched(op);
}
}  // namespace

void layernorm_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView db, TensorView dout, TensorView x,
                        TensorView mean, TensorView rstd, TensorView w, bool accumulate_dx) {
    norm_backward("layernorm_backward", ctx, dx, dw, db, dout, x, mean, rstd, w, accumulate_dx);
}

void rmsnorm_forward(OpContext& ctx, TensorView out, TensorView rstd, TensorView x, TensorView w, float eps) {
    if (x.rows() == 0) return;
    with_norm_storages("rmsnorm_forward", x, out, w, {}, [&](auto sx, auto sw) {
        using S = decltype(sx);
        using W = decltype(sw);
        const auto* px = elements<S>(x);
        const auto* pw = elements<W>(w);
        auto* po = elements<S>(out);
        // The pointers LayerNorm's choice reads (b: none), so that the fused op's choice is one helper.
        with_row_width<S>(x.cols(), [&](auto v) {
            norm::k_rmsnorm_fwd<S, W, decltype(v)::value>
                <<<static_cast<unsigned>(x.rows()), kNormThreads, 0, stream_of(ctx)>>>(po, mf(rstd), px, pw, x.cols(),
                                                                                      eps);
        }, po, px, pw, static_cast<const typename W::type*>(nullptr));
    });
    launched("rmsnorm_forward");
}

void rmsnorm_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dout, TensorView x, TensorView rstd,
                      TensorView w, bool accumulate_dx) {
    norm_backward("rmsnorm_backward", ctx, dx, dw, {}, dout, x, {}, rstd, w, accumulate_dx);
}

void gelu_forward(OpContext& ctx, TensorView out, TensorView x) {
    if (x.numel() == 0) return;
    with_storages(out.dtype, x.dtype, [&](auto so, auto sx) {
        using SO = decltype(so);
        using SX = decltype(sx);
        map<SO, SX, SX>(stream_of(ctx), elements<SO>(out), elements<SX>(x), nullptr, x.numel(),
                        elementwise::GeluForward{});
    });
    launched("gelu_forward");
}

void gelu_backward(OpContext& ctx, TensorView dx, TensorView dout, TensorView x) {
    if (x.numel() == 0) return;
    // dx and dout share a dtype (the checks): the gradient of fc1's output, stored like it.
    with_storages(dx.dtype, x.dtype, [&](auto sg, auto sx) {
        using SG = decltype(sg);
        using SX = decltype(sx);
        map<SG, SG, SX>(stream_of(ctx), elements<SG>(dx), elements<SG>(dout), elements<SX>(x), x.numel(),
                        elementwise::GeluBackward{});
    });
    launched("gelu_backward");
}

namespace {
/// The dropout family: out = base + (x + bias)·mask, out and base of one storage (an activation), x of
/// that storage or f32 where the other is 16-bit (the model's f32 row-parallel sum into a 16-bit
/// residual; a 16-bit gradient into an f32 one), the bias (a weight) f32 or of out's storage.
void run_dropout(OpContext& ctx, const char* op, TensorView out, TensorView base, TensorView x, TensorView bias,
                 float p, RngStream rng, int64_t element_offset) {
    const int64_t n = x.numel();
    if (n == 0) return;
    MWB_CHECK(base.empty() || base.dtype == out.dtype, "{}: residual={} and out={} must share a dtype on CUDA", op,
              base.describe(), out.describe());
    MWB_CHECK(x.dtype == out.dtype || x.dtype == DType::F32 || out.dtype == DType::F32,
              "{}: x={} must be out's dtype ({}) or one of them f32 on CUDA", op, x.describe(), dtype_name(out.dtype));
    MWB_CHECK(bias.empty() || bias.dtype == DType::F32 || bias.dtype == out.dtype,
              "{}: bias={} must be f32 or out's dtype ({}) on CUDA", op, bias.describe(), dtype_name(out.dtype));
    const elementwise::DropoutArgs a{rng, dropout_keep_threshold(p), p < 1.0f ? 1.0f / (1.0f - p) : 0.0f,
                                     element_offset, n, p > 0.0f};
    const int64_t groups = ((element_offset + n - 1) >> 2) - (element_offset >> 2) + 1;
    const int64_t cols = bias.empty() ? 4 : x.cols();
    const auto run = [&](auto so, auto sx, auto sw) {
        using S = decltype(so);
        using SX = decltype(sx);
        using W = decltype(sw);
        auto* o = elements<S>(out);
        const auto* r = base.empty() ? nullptr : elements<S>(base);
        const auto* in = elements<SX>(x);
        const auto* b = bias.empty() ? nullptr : elements<W>(bias);
        const bool wide = element_offset % 4 == 0 && cols % 4 == 0 &&
                          storage::aligned_to(4 * static_cast<int64_t>(sizeof(typename S::type)), o, r) &&
                          storage::aligned_to(4 * static_cast<int64_t>(sizeof(typename SX::type)), in) &&
                          storage::aligned_to(4 * static_cast<int64_t>(sizeof(typename W::type)), b);
        if (wide)
            elementwise::k_dropout<true, S, W, SX><<<blocks_for(groups), kThreads, 0, stream_of(ctx)>>>(o, r, in, b, cols, a);
        else
            elementwise::k_dropout<false, S, W, SX><<<blocks_for(groups), kThreads, 0, stream_of(ctx)>>>(o, r, in, b, cols, a);
    };
    // (out's storage, x's: out's or f32 or, beside an f32 out, any; bias f32 or out's): not every triple.
    with_storages(out.dtype, x.dtype, [&](auto so, auto sx) {
        if (bias.empty() || bias.dtype == DType::F32)
            run(so, sx, storage::F32{});
        else
            run(so, sx, so);
    });
    launched(op);
}
}  // namespace

void dropout_forward(OpContext& ctx, TensorView out, TensorView x, float p, RngStream rng, int64_t element_offset) {
    run_dropout(ctx, "dropout_forward", out, {}, x, {}, p, rng, element_offset);
}

void dropout_backward(OpContext& ctx, TensorView dx, TensorView dout, float p, RngStream rng, int64_t element_offset) {
    run_dropout(ctx, "dropout_backward", dx, {}, dout, {}, p, rng, element_offset);
}

void dropout_add_forward(OpContext& ctx, TensorView out, TensorView residual, TensorView x, float p, RngStream rng,
                         int64_t element_offset) {
    run_dropout(ctx, "dropout_add_forward", out, residual, x, {}, p, rng, element_offset);
}

void bias_dropout_add_forward(OpContext& ctx, TensorView out, TensorView residual, TensorView x, TensorView bias,
                              float p, RngStream rng, int64_t element_offset) {
    run_dropout(ctx, "bias_dropout_add_forward", out, residual, x, bias, p, rng, element_offset);
}

void bias_dropout_add_norm_forward(OpContext& ctx, TensorView out, TensorView norm_out, TensorView mean,
                                   TensorView rstd, TensorView residual, TensorView x, TensorView bias, TensorView w,
                                   TensorView b, float p, RngStream rng, int64_t element_offset, float eps) {
    constexpr const char* op = "bias_dropout_add_norm_forward";
    const int64_t rows = x.rows(), h = x.cols();
    if (rows == 0) return;
    // out, residual and norm_out share the checks' dtype; x is f32 (the row-parallel sum) or that dtype;
    // the bias and the norm's weights share one (the weights' dtype).
    MWB_CHECK(x.dtype == DType::F32 || x.dtype == out.dtype, "{}: x={} must be f32 or out's dtype ({}) on CUDA", op,
              x.describe(), dtype_name(out.dtype));
    MWB_CHECK(w.dtype == DType::F32 || w.dtype == out.dtype, "{}: w={} must be f32 or out's dtype ({}) on CUDA", op,
              w.describe(), dtype_name(out.dtype));
    MWB_CHECK((bias.empty() || bias.dtype == w.dtype) && (b.empty() || b.dtype == w.dtype),
              "{}: bias={} and b={} must share w's dtype ({}) on CUDA", op, bias.describe(), b.describe(),
              dtype_name(w.dtype));
    const elementwise::DropoutArgs a{rng, dropout_keep_threshold(p), p < 1.0f ? 1.0f / (1.0f - p) : 0.0f,
                                     element_offset, x.numel(), p > 0.0f};
    const auto run = [&](auto so, auto sx, auto sw) {
        using S = decltype(so);
        using SX = decltype(sx);
        using W = decltype(sw);
        auto *po = elements<S>(out), *pn = elements<S>(norm_out);
        const auto* pr = elements<S>(residual);
        const auto* px = elements<SX>(x);
        const auto *pbias = bias.empty() ? nullptr : elements<W>(bias), *pw = elements<W>(w),
                   *pb = b.empty() ? nullptr : elements<W>(b);
        float* pm = mean.empty() ? nullptr : mf(mean);
        // The norm's V as layernorm_forward / rmsnorm_forward choose it for (norm_out, out, w, b); the
        // residual pass wide too when its own pointers allow and the dropout groups of four line up.
        const int wide_residual = element_offset % 4 == 0 && storage::aligned_to(16, pr, px, pbias) ? 1 : 0;
        with_row_width<S>(h, [&](auto v) {
            norm::k_residual_norm_fwd<S, SX, W, decltype(v)::value>
                <<<static_cast<unsigned>(rows), kNormThreads, 0, stream_of(ctx)>>>(po, pn, pm, mf(rstd), pr, px, pbias,
                                                                                 pw, pb, h, eps, a, wide_residual);
        }, pn, static_cast<const typename S::type*>(po), pw, pb);
    };
    // (out's storage, x f32 or out's, weights f32 or out's): nine instances, not 27.
    with_storage(out.dtype, [&](auto so) {
        const auto weights = [&](auto sx) {
            if (w.dtype == DType::F32)
                run(so, sx, storage::F32{});
            else
                run(so, sx, so);
        };
        if (x.dtype == DType::F32)
            weights(storage::F32{});
        else
            weights(so);
    });
    launched(op);
}

namespace {
constexpr int kCeThreads = 512;

/// 128-bit accesses along the rows of logits (N, v) when every row starts 16-byte aligned.
bool wide_rows(const TensorView& logits) {
    return logits.cols() % 4 == 0 && kernel::aligned16(logits.data);
}
}  // namespace

void cross_entropy_partials(OpContext& ctx, TensorView row_max, TensorView row_sumexp, TensorView target_logit,
                            TensorView logits, TensorView targets, int64_t vocab_start) {
    const int64_t rows = logits.rows(), v = logits.cols();
    if (rows == 0) return;
    const auto run = [&](auto k) {
        k<<<static_cast<unsigned>(rows), kCeThreads, 0, stream_of(ctx)>>>(mf(row_max), mf(row_sumexp), mf(target_logit),
                                                                          cf(logits), ci(targets), v, vocab_start);
    };
    if (wide_rows(logits))
        run(classifier::k_ce_partials<4>);
    else
        run(classifier::k_ce_partials<1>);
    launched("cross_entropy_partials");
}

void cross_entropy_backward(OpContext& ctx, TensorView logits, TensorView targets, TensorView lse, TensorView row_scale,
                            int64_t vocab_start) {
    const int64_t rows = logits.rows(), v = logits.cols();
    if (rows == 0) return;
    const auto run = [&](auto k) {
        k<<<static_cast<unsigned>(rows), kCeThreads, 0, stream_of(ctx)>>>(mf(logits), ci(targets), cf(lse),
                                                                          cf(row_scale), v, vocab_start);
    };
    if (wide_rows(logits))
        run(classifier::k_ce_backward<4>);
    else
        run(classifier::k_ce_backward<1>);
    launched("cross_entropy_backward");
}

void cross_entropy_fused(OpContext& ctx, TensorView lse, TensorView target_logit, TensorView logits, TensorView targets,
                         TensorView row_scale) {
    const int64_t rows = logits.rows(), v = logits.cols();
    if (rows == 0) return;
    const auto run = [&](auto k) {
        k<<<static_cast<unsigned>(rows), kCeThreads, 0, stream_of(ctx)>>>(mf(lse), mf(target_logit), mf(logits),
                                                                          ci(targets), cf(row_scale), v);
    };
    if (wide_rows(logits))
        run(classifier::k_ce_fused<4>);
    else
        run(classifier::k_ce_fused<1>);
    launched("cross_entropy_fused");
}

void cross_entropy_rescale(OpContext& ctx, TensorView row_sumexp, TensorView row_max, TensorView global_max) {
    const int64_t n = row_sumexp.numel();
    if (n == 0) return;
    classifier::k_ce_rescale<int64_t>
        <<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(mf(row_sumexp), cf(row_max), cf(global_max), n);
    launched("cross_entropy_rescale");
}

void cross_entropy_lse(OpContext& ctx, TensorView lse, TensorView row_max, TensorView row_sumexp) {
    const int64_t n = lse.numel();
    if (n == 0) return;
    classifier::k_ce_lse<int64_t>
        <<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(mf(lse), cf(row_max), cf(row_sumexp), n);
    launched("cross_entropy_lse");
}

void cross_entropy_loss_sum(OpContext& ctx, TensorView loss, TensorView lse, TensorView target_logit, double divisor,
                            bool accumulate) {
    // n == 0 still writes (accumulate ? loss : 0) + 0 / divisor, as the CPU does.
    classifier::k_ce_loss_sum<double><<<1, 1024, 0, stream_of(ctx)>>>(
        static_cast<double*>(loss.data), cf(lse), cf(target_logit), lse.numel(), divisor, accumulate);
    launched("cross_entropy_loss_sum");
}

void adamw_update(OpContext& ctx, TensorView param, TensorView grad, TensorView exp_avg, TensorView exp_avg_sq,
                  const AdamWParams& p, TensorView param_copy, DType copy_dtype, TensorView scale, TensorView step) {
    const int64_t n = param.numel();
    if (n == 0) return;
    // The host-side constants of the CPU op (one function), unless the step's block supplies them.
    const AdamWConstants k = adamw_constants(p);
    const optimizer::AdamArgs a{p.beta1, p.beta2,      k.step_size, k.inv_sqrt_bc2,
                                k.decay, p.grad_scale, p.eps,       p.zero_grad};
    const float* sc = scale.empty() ? nullptr : cf(scale);
    const auto* blk = step.empty() ? nullptr : static_cast<const double*>(step.data);
    const bool decays = p.weight_decay != 0.0f;
    // No copy: SC = f32 with a null pointer. A 16-bit copy is rounded by its store; an f32 one by the functor.
    const DType copy_storage = param_copy.empty() ? DType::F32 : param_copy.dtype;
    const RoundCopy round{copy_storage != DType::F32 ? 0 : copy_dtype == DType::BF16 ? 1 : copy_dtype == DType::F16 ? 2 : 0};
    with_storages(grad.dtype, copy_storage, [&](auto sg, auto scopy) {
        using SG = decltype(sg);
        using SC = decltype(scopy);
        // 16 bytes per access on the aligned bulk: 4 floats, or 8 elements when an array is 16-bit.
        constexpr int V = storage::any_16bit<SG, SC> ? 8 : 4;
        const AdamWLaunch<SG, SC> all{mf(param), mf(exp_avg), mf(exp_avg_sq), elements<SG>(grad),
                                      param_copy.empty() ? nullptr : elements<SC>(param_copy),
                                      n, a, sc, blk, decays, round};
        const bool wide = storage::aligned_to(16, all.w, all.m, all.v, all.g, all.copy);
        const int64_t bulk = wide ? n / V * V : 0;
        launch_adamw<V>(stream_of(ctx), all.from(0, bulk));
        launch_adamw<1>(stream_of(ctx), all.from(bulk, n - bulk));
    });
    launched("adamw_update");
}

}  // namespace mwb::cuda
