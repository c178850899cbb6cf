// CUDA ops other than GEMM and attention: elementwise, storage rounding, sum of squares, embeddings,
// LayerNorm/RMSNorm, GELU, dropout (the CPU's Philox counters, so masks match bit for bit),
// softmax + cross-entropy partials, AdamW. Every reduction has a fixed shape and order (warp
// shuffles in a fixed tree, column sums over fixed row chunks): no atomics, bit-identical run to run.
#include "classifier_kernels.cuh"
#include "cuda_ops.h"
#include "elementwise_kernels.cuh"
#include "grad_norm_kernels.cuh"
#include "kernel_common.cuh"
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

constexpr int64_t kRowChunk = 256;  // rows per partial of a column reduction

// ---- storage rounding (bit-exact twins of precision.h) ----------------------------------------------

__device__ __forceinline__ float dev_round_to_bf16(float x) {
    const uint32_t b = __float_as_uint(x);
    const bool is_nan = (b & 0x7FFFFFFFu) > 0x7F800000u;
    const uint32_t lsb = (b >> 16) & 1u;
    const uint32_t rounded = (b + 0x7FFFu + lsb) & 0xFFFF0000u;
    return __uint_as_float(is_nan ? ((b | 0x00400000u) & 0xFFFF0000u) : rounded);
}

__device__ __forceinline__ float dev_round_to_fp16(float x) {
    const uint32_t b = __float_as_uint(x);
    const uint32_t sign = b & 0x80000000u;
    const uint32_t mag = b & 0x7FFFFFFFu;
    const uint32_t lsb = (mag >> 13) & 1u;
    const uint32_t normal = (mag + 0xFFFu + lsb) & ~0x1FFFu;
    const float sub = __fsub_rn(__fadd_rn(__uint_as_float(mag), 0.5f), 0.5f);
    uint32_t out = mag < 0x38800000u ? __float_as_uint(sub) : normal;
    out = mag >= 0x477FF000u ? 0x7F800000u : out;
    out = mag > 0x7F800000u ? ((mag | 0x00400000u) & ~0x1FFFu) : out;
    return __uint_as_float(out | sign);
}

// ---- elementwise kernels ----------------------------------------------------------------------------

/// out = f(a, b) elementwise (elementwise_kernels.cuh): the 16-byte aligned bulk 4 floats at a time,
/// the tail (or everything, unaligned) one at a time.
template <class F>
void map(cudaStream_t s, float* out, const float* a, const float* b, int64_t n, F f) {
    const bool wide = kernel::aligned16(out) && (!a || kernel::aligned16(a)) && (!b || kernel::aligned16(b));
    const int64_t bulk = wide ? n / 4 * 4 : 0;
    const auto run = [&](auto vector, float* o, const float* x, const float* y, int64_t count) {
        constexpr int V = decltype(vector)::value;
        const int64_t items = count / V;
        if (kernel::narrow(items))
            elementwise::k_map<V, uint32_t><<<blocks_for(items), kThreads, 0, s>>>(o, x, y, count, f);
        else
            elementwise::k_map<V, int64_t><<<blocks_for(items), kThreads, 0, s>>>(o, x, y, count, f);
    };
    if (bulk > 0) run(std::integral_constant<int, 4>{}, out, a, b, bulk);
    if (n > bulk) run(std::integral_constant<int, 1>{}, out + bulk, a ? a + bulk : nullptr, b ? b + bulk : nullptr, n - bulk);
}

__global__ void k_f32_to_bf16(__nv_bfloat16* o, const float* x, int64_t n) {
    MWB_GRID_STRIDE(i, n) o[i] = __float2bfloat16_rn(x[i]);
}
__global__ void k_bf16_to_f32(float* o, const __nv_bfloat16* x, int64_t n) {
    MWB_GRID_STRIDE(i, n) o[i] = __bfloat162float(x[i]);
}
__global__ void k_round(float* x, int64_t n, int bf16) {
    MWB_GRID_STRIDE(i, n) x[i] = bf16 ? dev_round_to_bf16(x[i]) : dev_round_to_fp16(x[i]);
}

__global__ void k_column_partials(const float* x, int64_t rows, int64_t cols, float* partial) {
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= cols) return;
    const int64_t r0 = blockIdx.y * kRowChunk, r1 = min(rows, r0 + kRowChunk);
    float s = 0;
    for (int64_t r = r0; r < r1; ++r) s += x[r * cols + c];
    partial[blockIdx.y * cols + c] = s;
}

/// out[c] += Σ_k partial[k, c] for k in order (partials of `parts` chunks per output).
__global__ void k_sum_partials(float* out, const float* partial, int64_t chunks, int64_t cols) {
    MWB_GRID_STRIDE(c, cols) {
        float s = 0;
        for (int64_t k = 0; k < chunks; ++k) s += partial[k * cols + c];
        out[c] += s;
    }
}

__global__ void k_add_bias_rows(float* y, const float* bias, int64_t rows, int64_t cols) {
    MWB_GRID_STRIDE(i, rows * cols) y[i] += bias[i % cols];
}

// ---- embeddings ---------------------------------------------------------------------------------------

__global__ void k_embedding_fwd(float* out, const int32_t* ids, const float* table, int64_t rows, int64_t h,
                                int64_t vocab, int64_t vocab_start) {
    MWB_GRID_STRIDE(i, rows * h) {
        const int64_t r = i / h, c = i % h;
        const int64_t local = static_cast<int64_t>(ids[r]) - vocab_start;
        out[i] = (local >= 0 && local < vocab) ? table[local * h + c] : 0.0f;
    }
}

__global__ void k_pos_fwd(float* out, const float* wpe, int64_t s_len, int64_t b_len, int64_t h, int64_t offset) {
    MWB_GRID_STRIDE(i, s_len * b_len * h) {
        const int64_t s = i / (b_len * h), c = i % h;
        out[i] += wpe[(s + offset) * h + c];
    }
}

__global__ void k_pos_bwd(float* dwpe, const float* dout, int64_t s_len, int64_t b_len, int64_t h, int64_t offset) {
    MWB_GRID_STRIDE(i, s_len * h) {
        const int64_t s = i / h, c = i % h;
        float acc = dwpe[(s + offset) * h + c];
        for (int64_t b = 0; b < b_len; ++b) acc += dout[(s * b_len + b) * h + c];
        dwpe[(s + offset) * h + c] = acc;
    }
}

// ---- normalisation --------------------------------------------------------------------------------------

constexpr int kNormThreads = 256;

__global__ void k_layernorm_fwd(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                                int64_t h, float eps) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const float* xr = x + r * h;
    float s = 0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) s += xr[c];
    const float mu = block_sum(s, sh) / static_cast<float>(h);
    float v = 0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) v += (xr[c] - mu) * (xr[c] - mu);
    const float rs = 1.0f / sqrtf(block_sum(v, sh) / static_cast<float>(h) + eps);
    float* orow = out + r * h;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) orow[c] = (xr[c] - mu) * rs * w[c] + b[c];
    if (threadIdx.x == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

/// dx of LayerNorm (mean == nullptr: RMSNorm), one block per row.
__global__ void k_norm_bwd_dx(float* dx, const float* dout, const float* x, const float* mean, const float* rstd,
                              const float* w, int64_t h, int accumulate) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const float *xr = x + r * h, *dr = dout + r * h;
    const float mu = mean ? mean[r] : 0.0f, rs = rstd[r];
    float sg = 0, sgx = 0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
        const float g = dr[c] * w[c];
        sg += g;
        sgx += g * (xr[c] - mu) * rs;
    }
    const float mean_g = mean ? block_sum(sg, sh) / static_cast<float>(h) : 0.0f;
    const float mean_gx = block_sum(sgx, sh) / static_cast<float>(h);
    float* dxr = dx + r * h;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
        const float v = rs * (dr[c] * w[c] - mean_g - (xr[c] - mu) * rs * mean_gx);
        dxr[c] = accumulate ? dxr[c] + v : v;
    }
}

/// Partials of dw (Σ dout·x̂) and db (Σ dout) over one chunk of rows; mean == nullptr: RMSNorm.
__global__ void k_norm_bwd_partials(float* pw, float* pb, const float* dout, const float* x, const float* mean,
                                    const float* rstd, int64_t rows, int64_t h) {
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= h) return;
    const int64_t r0 = blockIdx.y * kRowChunk, r1 = min(rows, r0 + kRowChunk);
    float gw = 0, gb = 0;
    for (int64_t r = r0; r < r1; ++r) {
        const float d = dout[r * h + c];
        gw += d * (x[r * h + c] - (mean ? mean[r] : 0.0f)) * rstd[r];
        gb += d;
    }
    pw[blockIdx.y * h + c] = gw;
    if (pb) pb[blockIdx.y * h + c] = gb;
}

__global__ void k_rmsnorm_fwd(float* out, float* rstd, const float* x, const float* w, int64_t h, float eps) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const float* xr = x + r * h;
    float s = 0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) s += xr[c] * xr[c];
    const float rs = 1.0f / sqrtf(block_sum(s, sh) / static_cast<float>(h) + eps);
    float* orow = out + r * h;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) orow[c] = xr[c] * rs * w[c];
    if (threadIdx.x == 0) rstd[r] = rs;
}

// ---- dropout: one Philox draw per group of four global indices, as the CPU ------------------------------

struct DropoutArgs {
    RngStream rng;
    uint32_t threshold;
    float scale;
    int64_t offset;  ///< global index of element 0
    int64_t n;
    int enabled;
};

/// out[i] = base[i] + (x[i] + bias[i % cols])·mult(offset + i); base/bias may be null.
__global__ void k_dropout(float* out, const float* base, const float* x, const float* bias, int64_t cols,
                          DropoutArgs a) {
    const int64_t first_group = a.offset >> 2, last_group = (a.offset + a.n - 1) >> 2;
    MWB_GRID_STRIDE(t, last_group - first_group + 1) {
        const int64_t g = first_group + t;
        Philox4 d{{0, 0, 0, 0}};
        if (a.enabled) d = philox_draw(a.rng, static_cast<uint64_t>(g));
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int64_t i = 4 * g + k - a.offset;
            if (i < 0 || i >= a.n) continue;
            const float m = a.enabled ? (d.v[k] < a.threshold ? a.scale : 0.0f) : 1.0f;
            float v = x[i];
            if (bias) v += bias[i % cols];
            out[i] = (base ? base[i] : 0.0f) + v * m;
        }
    }
}

// ---- AdamW (kernel: optimizer_kernels.cuh) -------------------------------------------------------------

/// The weights' copy as the model stores it: bf16, fp16 or fp32 values.
struct RoundCopy {
    int kind;  // 1 bf16, 2 fp16, else as is
    __device__ float operator()(float x) const {
        return kind == 1 ? dev_round_to_bf16(x) : kind == 2 ? dev_round_to_fp16(x) : x;
    }
};

/// One k_adamw launch's arrays and arguments.
struct AdamWLaunch {
    float *w, *g, *m, *v, *copy;
    int64_t n;
    optimizer::AdamArgs a;
    const float* scale;
    const double* step;
    bool decays;
    RoundCopy round;
    /// The elements [at, at + count) of the same arrays.
    AdamWLaunch from(int64_t at, int64_t count) const {
        AdamWLaunch r = *this;
        for (float** p : {&r.w, &r.g, &r.m, &r.v, &r.copy})
            if (*p) *p += at;
        r.n = count;
        return r;
    }
};

/// V floats per access (V = 4: every array 16-byte aligned, n a multiple of 4).
template <int V>
void launch_adamw(cudaStream_t s, const AdamWLaunch& l) {
    if (l.n == 0) return;
    const int64_t items = l.n / V;
    if (kernel::narrow(items))
        optimizer::k_adamw<V, uint32_t><<<blocks_for(items), kThreads, 0, s>>>(l.w, l.g, l.m, l.v, l.copy, l.n, l.a,
                                                                               l.scale, l.step, l.decays, l.round);
    else
        optimizer::k_adamw<V, int64_t><<<blocks_for(items), kThreads, 0, s>>>(l.w, l.g, l.m, l.v, l.copy, l.n, l.a,
                                                                              l.scale, l.step, l.decays, l.round);
}

void launched(const char* op) { check_launch(op); }

}  // namespace

// ---- host entry points ------------------------------------------------------------------------------

void column_sums_add(cudaStream_t stream, float* out, const float* x, int64_t rows, int64_t cols) {
    if (rows == 0 || cols == 0) return;
    const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
    MWB_CHECK(chunks <= 65535, "column sums: {} rows exceed the {} a launch covers", rows, 65535 * kRowChunk);
    float* partial = static_cast<float*>(scratch(0, chunks * cols * static_cast<int64_t>(sizeof(float)), stream));
    const dim3 grid(static_cast<unsigned>((cols + 127) / 128), static_cast<unsigned>(chunks));
    k_column_partials<<<grid, 128, 0, stream>>>(x, rows, cols, partial);
    k_sum_partials<<<blocks_for(cols), kThreads, 0, stream>>>(out, partial, chunks, cols);
    launched("column sums");
}

void convert_to_bf16(cudaStream_t stream, void* dst, const float* src, int64_t n) {
    if (n == 0) return;
    k_f32_to_bf16<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), src, n);
    launched("bf16 conversion");
}

void add_bias_rows(cudaStream_t stream, float* y, const float* bias, int64_t rows, int64_t cols) {
    if (rows * cols == 0) return;
    k_add_bias_rows<<<blocks_for(rows * cols), kThreads, 0, stream>>>(y, bias, rows, cols);
    launched("bias add");
}

void fill(OpContext& ctx, TensorView x, float value) {
    if (x.numel() == 0) return;
    map(stream_of(ctx), mf(x), nullptr, nullptr, x.numel(), elementwise::Fill{value});
    launched("fill");
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
    if (dst.dtype == DType::BF16 && src.dtype == DType::F32) {
        k_f32_to_bf16<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(static_cast<__nv_bfloat16*>(dst.data), cf(src), n);
    } else if (dst.dtype == DType::F32 && src.dtype == DType::BF16) {
        k_bf16_to_f32<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(mf(dst), static_cast<const __nv_bfloat16*>(src.data), n);
    } else {
        MWB_FAIL("copy: no conversion from {} to {}", src.describe(), dst.describe());
    }
    launched("copy");
}

void scale(OpContext& ctx, TensorView x, float alpha) {
    if (x.numel() == 0) return;
    map(stream_of(ctx), mf(x), cf(x), nullptr, x.numel(), elementwise::Scale{alpha});
    launched("scale");
}

void add(OpContext& ctx, TensorView out, TensorView a, TensorView b) {
    if (out.numel() == 0) return;
    map(stream_of(ctx), mf(out), cf(a), cf(b), out.numel(), elementwise::Add{});
    launched("add");
}

void round_to(OpContext& ctx, TensorView x, DType dtype) {
    if (dtype == DType::F32 || x.numel() == 0) return;
    k_round<<<blocks_for(x.numel()), kThreads, 0, stream_of(ctx)>>>(mf(x), x.numel(), dtype == DType::BF16);
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
        grad_norm::squares_partials<<<static_cast<unsigned>(chunks), kThreads, 0, stream_of(ctx)>>>(
            cf(x), device_table, n, partial);
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
    k_embedding_fwd<<<blocks_for(rows * h), kThreads, 0, stream_of(ctx)>>>(mf(out), ci(ids), cf(table), rows, h,
                                                                           table.dim(0), vocab_start);
    launched("embedding_forward");
}

void embedding_backward(OpContext& ctx, TensorView dtable, TensorView dout, TensorView ids, int64_t vocab_start) {
    const int64_t rows = ids.numel(), h = dtable.dim(1), vocab = dtable.dim(0);
    if (rows * h == 0) return;
    const int64_t vocab_blocks = (vocab + classifier::kEmbeddingRowsPerBlock - 1) / classifier::kEmbeddingRowsPerBlock;
    MWB_CHECK(vocab_blocks <= 65535, "embedding_backward: a vocabulary of {} rows exceeds the {} a launch covers",
              vocab, 65535 * classifier::kEmbeddingRowsPerBlock);
    const bool wide = h % 4 == 0 && kernel::aligned16(dtable.data) && kernel::aligned16(dout.data);
    const int per_thread = wide ? 4 : 1;
    const dim3 grid(static_cast<unsigned>((h + kThreads * per_thread - 1) / (kThreads * per_thread)),
                    static_cast<unsigned>(vocab_blocks));
    if (wide)
        classifier::k_embedding_bwd<4>
            <<<grid, kThreads, 0, stream_of(ctx)>>>(mf(dtable), cf(dout), ci(ids), rows, h, vocab, vocab_start);
    else
        classifier::k_embedding_bwd<1>
            <<<grid, kThreads, 0, stream_of(ctx)>>>(mf(dtable), cf(dout), ci(ids), rows, h, vocab, vocab_start);
    launched("embedding_backward");
}

void position_embedding_forward(OpContext& ctx, TensorView out, TensorView wpe, int64_t position_offset) {
    if (out.numel() == 0) return;
    k_pos_fwd<<<blocks_for(out.numel()), kThreads, 0, stream_of(ctx)>>>(mf(out), cf(wpe), out.dim(0), out.dim(1),
                                                                        out.dim(2), position_offset);
    launched("position_embedding_forward");
}

void position_embedding_backward(OpContext& ctx, TensorView dwpe, TensorView dout, int64_t position_offset) {
    if (dout.numel() == 0) return;
    k_pos_bwd<<<blocks_for(dout.dim(0) * dout.dim(2)), kThreads, 0, stream_of(ctx)>>>(
        mf(dwpe), cf(dout), dout.dim(0), dout.dim(1), dout.dim(2), position_offset);
    launched("position_embedding_backward");
}

namespace {

/// dw (+ db when given) += Σ over rows of the norm's parameter gradient, in fixed row chunks.
void norm_param_grads(cudaStream_t s, float* dw, float* db, const float* dout, const float* x, const float* mean,
                      const float* rstd, int64_t rows, int64_t h) {
    const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
    MWB_CHECK(chunks <= 65535, "norm backward: {} rows exceed the {} a launch covers", rows, 65535 * kRowChunk);
    float* pw = static_cast<float*>(scratch(0, 2 * chunks * h * static_cast<int64_t>(sizeof(float)), s));
    float* pb = db ? pw + chunks * h : nullptr;
    const dim3 grid(static_cast<unsigned>((h + 127) / 128), static_cast<unsigned>(chunks));
    k_norm_bwd_partials<<<grid, 128, 0, s>>>(pw, pb, dout, x, mean, rstd, rows, h);
    k_sum_partials<<<blocks_for(h), kThreads, 0, s>>>(dw, pw, chunks, h);
    if (db) k_sum_partials<<<blocks_for(h), kThreads, 0, s>>>(db, pb, chunks, h);
}
}  // namespace

void layernorm_forward(OpContext& ctx, TensorView out, TensorView mean, TensorView rstd, TensorView x, TensorView w,
                       TensorView b, float eps) {
    if (x.rows() == 0) return;
    k_layernorm_fwd<<<static_cast<unsigned>(x.rows()), kNormThreads, 0, stream_of(ctx)>>>(
        mf(out), mf(mean), mf(rstd), cf(x), cf(w), cf(b), x.cols(), eps);
    launched("layernorm_forward");
}

void layernorm_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView db, TensorView dout, TensorView x,
                        TensorView mean, TensorView rstd, TensorView w, bool accumulate_dx) {
    if (x.rows() == 0) return;
    // Parameter gradients first (dx may alias dout).
    norm_param_grads(stream_of(ctx), mf(dw), mf(db), cf(dout), cf(x), cf(mean), cf(rstd), x.rows(), x.cols());
    k_norm_bwd_dx<<<static_cast<unsigned>(x.rows()), kNormThreads, 0, stream_of(ctx)>>>(
        mf(dx), cf(dout), cf(x), cf(mean), cf(rstd), cf(w), x.cols(), accumulate_dx ? 1 : 0);
    launched("layernorm_backward");
}

void rmsnorm_forward(OpContext& ctx, TensorView out, TensorView rstd, TensorView x, TensorView w, float eps) {
    if (x.rows() == 0) return;
    k_rmsnorm_fwd<<<static_cast<unsigned>(x.rows()), kNormThreads, 0, stream_of(ctx)>>>(mf(out), mf(rstd), cf(x),
                                                                                        cf(w), x.cols(), eps);
    launched("rmsnorm_forward");
}

void rmsnorm_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dout, TensorView x, TensorView rstd,
                      TensorView w, bool accumulate_dx) {
    if (x.rows() == 0) return;
    norm_param_grads(stream_of(ctx), mf(dw), nullptr, cf(dout), cf(x), nullptr, cf(rstd), x.rows(), x.cols());
    k_norm_bwd_dx<<<static_cast<unsigned>(x.rows()), kNormThreads, 0, stream_of(ctx)>>>(
        mf(dx), cf(dout), cf(x), nullptr, cf(rstd), cf(w), x.cols(), accumulate_dx ? 1 : 0);
    launched("rmsnorm_backward");
}

void gelu_forward(OpContext& ctx, TensorView out, TensorView x) {
    if (x.numel() == 0) return;
    map(stream_of(ctx), mf(out), cf(x), nullptr, x.numel(), elementwise::GeluForward{});
    launched("gelu_forward");
}

void gelu_backward(OpContext& ctx, TensorView dx, TensorView dout, TensorView x) {
    if (x.numel() == 0) return;
    map(stream_of(ctx), mf(dx), cf(dout), cf(x), x.numel(), elementwise::GeluBackward{});
    launched("gelu_backward");
}

namespace {
void run_dropout(OpContext& ctx, const char* op, TensorView out, const float* base, TensorView x, const float* bias,
                 int64_t cols, float p, RngStream rng, int64_t element_offset) {
    const int64_t n = x.numel();
    if (n == 0) return;
    DropoutArgs a{rng, dropout_keep_threshold(p), p < 1.0f ? 1.0f / (1.0f - p) : 0.0f, element_offset, n, p > 0.0f};
    const int64_t groups = ((element_offset + n - 1) >> 2) - (element_offset >> 2) + 1;
    k_dropout<<<blocks_for(groups), kThreads, 0, stream_of(ctx)>>>(mf(out), base, cf(x), bias, cols, a);
    launched(op);
}
}  // namespace

void dropout_forward(OpContext& ctx, TensorView out, TensorView x, float p, RngStream rng, int64_t element_offset) {
    run_dropout(ctx, "dropout_forward", out, nullptr, x, nullptr, 1, p, rng, element_offset);
}

void dropout_backward(OpContext& ctx, TensorView dx, TensorView dout, float p, RngStream rng, int64_t element_offset) {
    run_dropout(ctx, "dropout_backward", dx, nullptr, dout, nullptr, 1, p, rng, element_offset);
}

void dropout_add_forward(OpContext& ctx, TensorView out, TensorView residual, TensorView x, float p, RngStream rng,
                         int64_t element_offset) {
    run_dropout(ctx, "dropout_add_forward", out, cf(residual), x, nullptr, 1, p, rng, element_offset);
}

void bias_dropout_add_forward(OpContext& ctx, TensorView out, TensorView residual, TensorView x, TensorView bias,
                              float p, RngStream rng, int64_t element_offset) {
    run_dropout(ctx, "bias_dropout_add_forward", out, cf(residual), x, cf(bias), x.cols(), p, rng, element_offset);
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
    const RoundCopy round{param_copy.empty() ? 0 : copy_dtype == DType::BF16 ? 1 : copy_dtype == DType::F16 ? 2 : 0};
    float *w = mf(param), *g = mf(grad), *m = mf(exp_avg), *v = mf(exp_avg_sq);
    float* copy = param_copy.empty() ? nullptr : mf(param_copy);
    const float* sc = scale.empty() ? nullptr : cf(scale);
    const auto* blk = step.empty() ? nullptr : static_cast<const double*>(step.data);
    const bool decays = p.weight_decay != 0.0f;
    const bool wide = kernel::aligned16(w) && kernel::aligned16(g) && kernel::aligned16(m) && kernel::aligned16(v) &&
                      (!copy || kernel::aligned16(copy));
    const int64_t bulk = wide ? n / 4 * 4 : 0;
    const AdamWLaunch bulk_part{w, g, m, v, copy, bulk, a, sc, blk, decays, round};
    launch_adamw<4>(stream_of(ctx), bulk_part);
    launch_adamw<1>(stream_of(ctx), bulk_part.from(bulk, n - bulk));
    launched("adamw_update");
}

}  // namespace mwb::cuda
