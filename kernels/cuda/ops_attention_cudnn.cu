// Causal attention through cuDNN's fused SDPA (kernels/cuda/cudnn_sdpa.h) for bf16 runs, with the
// own kernels' contract: `probs` holds the B·A·S log-sum-exps first (cuDNN's Stats are the same
// numbers: max + log Σ exp of the scaled scores), then a bf16 copy of the output O, which cuDNN's
// backward reads (attention_backward gets no output tensor). What is copied, and why:
//   - qkv (f32 arrays holding bf16 values) into one bf16 buffer regrouped per row as [all q | all k |
//     all v]: cuDNN needs 16-bit inputs, and with 1 < G < A the query heads of our layout
//     [q_g0 … | k_g | v_g] are not one strided 4-D tensor (a gap of 2 heads after each group's
//     queries). With bf16 storage, G = A and G = 1 could bind in place (strides (n + 2)·D and D).
//   - dout to bf16, O and dqkv back to f32 (the storage dtype today).
// Dropout: cuDNN draws its own Philox stream (seed_buffer): masks differ from the CPU's, so
// deterministic runs keep the own kernels (resolve_attention_backend).
#include "ops_attention_cudnn.h"

#include "cuda_ops.h"
#include "cudnn_sdpa.h"
#include "runtime.h"

#include <cuda_bf16.h>

#include <cstdio>
#include <mutex>
#include <set>

namespace mwb::cuda {

namespace {

using attention::Geometry;
using bf16 = __nv_bfloat16;

/// to (rows, W) bf16 regrouped <- from (rows, W) f32 in our layout; or back with `to_ours`.
__global__ void k_regroup(bf16* staged, float* ours, int64_t rows, int64_t A, int64_t G, int64_t D, bool to_ours) {
    const int64_t W = (A + 2 * G) * D, n = rows * W;
    for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
         e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t row = e / W, c = e % W;
        float& x = ours[row * W + attention::staged_to_our_column(c, A, G, D)];
        if (to_ours) x = __bfloat162float(staged[e]);
        else staged[e] = __float2bfloat16(x);
    }
}

__global__ void k_to_bf16(bf16* dst, const float* src, int64_t n) {
    for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
         e += static_cast<int64_t>(gridDim.x) * blockDim.x)
        dst[e] = __float2bfloat16(src[e]);
}

__global__ void k_to_f32(float* dst, const bf16* src, int64_t n) {
    for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
         e += static_cast<int64_t>(gridDim.x) * blockDim.x)
        dst[e] = __bfloat162float(src[e]);
}

__global__ void k_seed(int64_t* dst, int64_t seed, int64_t offset) {
    dst[0] = seed;
    dst[1] = offset;
}

/// n floats rounded up to 256 bytes: where the next tensor of a buffer starts.
int64_t padded_floats(int64_t n) { return (n + 63) / 64 * 64; }

/// Scratch slots (runtime.h): 2 the staged qkv, 3 dO in bf16, 5 the backward's dqkv, softmax sums,
/// f32 dQ accumulator and the dropout seed.
constexpr int kStagedSlot = 2, kDoutSlot = 3, kBackwardSlot = 5;

cudnn_sdpa::Shape shape_of(const Geometry& g, const AttentionParams& p) {
    return {g.B, g.A, g.G, g.S, g.D, g.scale, p.dropout_p};
}

std::string key_of(const char* pass, const cudnn_sdpa::Shape& s) {
    return fmt::format("{} B{} A{} G{} S{} D{} scale {} dropout {}", pass, s.B, s.A, s.G, s.S, s.D, s.scale, s.dropout);
}

std::mutex g_refusals_mutex;
std::set<std::string> g_refused;  // keys
std::string g_refusals;           // their lines

/// Says once per shape why cuDNN does not run it.
void report_fallback(const std::string& key, const std::string& why) {
    std::lock_guard lock(g_refusals_mutex);
    if (!g_refused.insert(key).second) return;
    std::fprintf(stderr, "mwb: attention %s: cuDNN refused it (%s); the own kernels run it\n", key.c_str(), why.c_str());
    g_refusals += key + ": " + why + "\n";
}

/// cuDNN runs a shape only when both of its graphs build (forward and backward must draw the same
/// dropout masks and agree on the saved state).
bool usable(const Geometry& g, const AttentionParams& p, const OpContext& ctx) {
    if (p.backend != AttentionBackend::Cudnn || ctx.gemm_inputs != DType::BF16 || g.D % 8 != 0 || g.D > 256) return false;
    if (!cudnn::unavailable().empty()) return false;
    const cudnn_sdpa::Shape s = shape_of(g, p);
    std::string why;
    if (!cudnn::prepare(key_of("forward", s), cudnn_sdpa::forward_plan(s), why) ||
        !cudnn::prepare(key_of("backward", s), cudnn_sdpa::backward_plan(s), why)) {
        report_fallback(key_of("attention", s), why);
        return false;
    }
    return true;
}

/// cuDNN's dropout seed and offset, drawn from the layer's stream at a Philox group no CPU mask uses
/// (2^63 + the rank's first head): the same call draws the same masks, tensor-parallel ranks (other
/// heads) other ones.
void* seed_buffer(void* at, const AttentionParams& p, cudaStream_t st) {
    const Philox4 r = philox_draw(p.rng, (uint64_t{1} << 63) + static_cast<uint64_t>(p.head_offset));
    const auto seed = static_cast<int64_t>(r.v[0] | static_cast<uint64_t>(r.v[1] & 0x7fffffffu) << 32);
    k_seed<<<1, 1, 0, st>>>(static_cast<int64_t*>(at), seed, static_cast<int64_t>(r.v[2]));
    return at;
}

using Pointers = std::vector<std::pair<int64_t, void*>>;

/// Stages qkv (bf16, regrouped) and binds Q, K and V into it, and the dropout seed and offset (written
/// at `seed_at`) when the call has dropout.
Pointers bind_qkv(cudaStream_t st, const float* qkv, const Geometry& g, const AttentionParams& p, void* seed_at) {
    const int64_t rows = g.S * g.B, W = (g.A + 2 * g.G) * g.D;
    bf16* staged = static_cast<bf16*>(scratch(kStagedSlot, rows * W * 2));
    k_regroup<<<blocks_for(rows * W), kElementwiseThreads, 0, st>>>(staged, const_cast<float*>(qkv), rows, g.A, g.G,
                                                                    g.D, false);
    Pointers ptrs{{cudnn_sdpa::kQ, staged},
                  {cudnn_sdpa::kK, staged + g.A * g.D},
                  {cudnn_sdpa::kV, staged + (g.A + g.G) * g.D}};
    if (p.dropout_p > 0) {
        auto* seed = static_cast<int64_t*>(seed_buffer(seed_at, p, st));
        ptrs.insert(ptrs.end(), {{cudnn_sdpa::kSeed, seed}, {cudnn_sdpa::kOffset, seed + 1}});
    }
    return ptrs;
}

/// Runs the pass's graph (prepared by usable()).
void run(const char* pass, const Geometry& g, const AttentionParams& p, const Pointers& ptrs, cudaStream_t st) {
    std::string why;
    if (!cudnn::execute(key_of(pass, shape_of(g, p)), ptrs, st, why))
        MWB_FAIL("attention {}: cuDNN refused a graph it had built: {}", pass, why);
}

}  // namespace
}  // namespace mwb::cuda

std::string mwb::cudnn_attention_refusals() {
    std::lock_guard lock(cuda::g_refusals_mutex);
    return cuda::g_refusals;
}

namespace mwb::cuda {

int64_t cudnn_saved_elements(const AttentionParams& p, int64_t seq_len) {
    const int64_t rows = static_cast<int64_t>(p.batch) * p.num_heads * seq_len;
    return padded_floats(rows) + (rows * p.head_dim + 1) / 2;
}

bool cudnn_attention_forward(const OpContext& ctx, float* out, float* saved, const float* qkv, const Geometry& g,
                             const AttentionParams& p) {
    if (!usable(g, p, ctx)) return false;
    const cudaStream_t st = stream_of(ctx);
    const int64_t out_n = g.S * g.B * g.A * g.D;
    bf16* o = reinterpret_cast<bf16*>(saved + padded_floats(g.B * g.A * g.S));  // after the log-sum-exps
    Pointers ptrs = bind_qkv(st, qkv, g, p, scratch(kBackwardSlot, 256));
    ptrs.insert(ptrs.end(), {{cudnn_sdpa::kO, o}, {cudnn_sdpa::kStats, saved}});
    run("forward", g, p, ptrs, st);
    k_to_f32<<<blocks_for(out_n), kElementwiseThreads, 0, st>>>(out, o, out_n);
    check_launch("attention_forward (cuDNN)");
    return true;
}

bool cudnn_attention_backward(const OpContext& ctx, float* dqkv, const float* dout, const float* qkv, const float* saved,
                              const Geometry& g, const AttentionParams& p) {
    if (!usable(g, p, ctx)) return false;
    const cudaStream_t st = stream_of(ctx);
    const int64_t rows = g.S * g.B, W = (g.A + 2 * g.G) * g.D, out_n = rows * g.A * g.D;
    // The backward slot, each part on a 256-byte boundary: the dropout seed, the softmax sums and the dQ
    // accumulator (f32), the staged dqkv (bf16).
    const int64_t sum_floats = padded_floats(g.B * g.A * g.S), acc_floats = padded_floats(g.B * g.A * g.S * g.D);
    auto* base = static_cast<float*>(scratch(kBackwardSlot, (64 + sum_floats + acc_floats) * 4 + rows * W * 2));
    float* softmax_sum = base + 64;
    float* dq_accum = softmax_sum + sum_floats;
    bf16* dstaged = reinterpret_cast<bf16*>(dq_accum + acc_floats);
    // cuDNN before 9.6 accumulates into dQ_accum without clearing it first (as cudnn-frontend notes).
    if (cudnn::version() < 90600)
        MWB_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, static_cast<size_t>(g.B * g.A * g.S * g.D) * sizeof(float), st));
    bf16* dout16 = static_cast<bf16*>(scratch(kDoutSlot, out_n * 2));
    k_to_bf16<<<blocks_for(out_n), kElementwiseThreads, 0, st>>>(dout16, dout, out_n);
    auto* o = reinterpret_cast<bf16*>(const_cast<float*>(saved) + padded_floats(g.B * g.A * g.S));
    Pointers ptrs = bind_qkv(st, qkv, g, p, base);
    ptrs.insert(ptrs.end(), {{cudnn_sdpa::kO, o},
                             {cudnn_sdpa::kDO, dout16},
                             {cudnn_sdpa::kStats, const_cast<float*>(saved)},
                             {cudnn_sdpa::kDQ, dstaged},
                             {cudnn_sdpa::kDK, dstaged + g.A * g.D},
                             {cudnn_sdpa::kDV, dstaged + (g.A + g.G) * g.D},
                             {cudnn_sdpa::kSoftmaxSum, softmax_sum},
                             {cudnn_sdpa::kDQAccum, dq_accum}});
    run("backward", g, p, ptrs, st);
    k_regroup<<<blocks_for(rows * W), kElementwiseThreads, 0, st>>>(dstaged, dqkv, rows, g.A, g.G, g.D, true);
    check_launch("attention_backward (cuDNN)");
    return true;
}

}  // namespace mwb::cuda
