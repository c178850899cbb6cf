// Causal attention through cuDNN's fused SDPA (kernels/cuda/cudnn_sdpa.h) for 16-bit runs, with the
// own kernels' contract: `probs` holds the B·A·S log-sum-exps (cuDNN's Stats are the same numbers:
// max + log Σ exp of the scaled scores), and the backward reads O from the forward's output (`out`).
// Every tensor is bound in place (cudnn_sdpa_plan.h: the packed grouped qkv seen as B·G sequences of
// A/G query heads sharing one key/value head, strided views for every G), in its own 16-bit type
// (bf16 or fp16: the graph's io type). Only fp32 arrays (a bf16 run before 16-bit storage: they hold
// bf16 values) are converted, into scratch of the same layout: qkv, dout and out to bf16, O and dqkv
// back to f32.
// Dropout: cuDNN draws its own Philox stream (seed_buffer): masks differ from the CPU's, so
// deterministic runs keep the own kernels (resolve_attention_backend).
#include "ops_attention_cudnn.h"

#include "cuda_ops.h"
#include "cudnn_sdpa.h"
#include "runtime.h"

#include <cstdio>
#include <mutex>
#include <set>

namespace mwb::cuda {

namespace {

using attention::Geometry;

/// cuDNN's dropout seed and offset from the layer's stream at Philox group `group`, drawn on the device
/// (the stream may be derived from the step's iteration there: RngStream).
__global__ void k_seed(int64_t* dst, RngStream rng, uint64_t group) {
    const Philox4 r = philox_draw(resolved(rng), group);
    dst[0] = static_cast<int64_t>(r.v[0] | static_cast<uint64_t>(r.v[1] & 0x7fffffffu) << 32);
    dst[1] = static_cast<int64_t>(r.v[2]);
}

/// n floats rounded up to 256 bytes: where the next tensor of a buffer starts.
int64_t padded_floats(int64_t n) { return (n + 63) / 64 * 64; }

/// Scratch slots (runtime.h), used only for fp32 arrays: 2 qkv in 16 bits, 3 the forward's O or the
/// backward's dO in 16 bits; 5 the backward's dropout seed, softmax sums, f32 dQ accumulator (always)
/// and O and dqkv in 16 bits (fp32 arrays).
constexpr int kQkvSlot = 2, kOutSlot = 3, kBackwardSlot = 5;

/// The graph's 16-bit type: the storage's own, or bf16 for the fp32 arrays of a bf16 run.
cudnn_sdpa::Type io_of(DType stored) { return stored == DType::F16 ? cudnn_sdpa::Type::F16 : cudnn_sdpa::Type::BF16; }

cudnn_sdpa::Shape shape_of(const Geometry& g, const AttentionParams& p, DType stored) {
    return {g.B, g.A, g.G, g.S, g.D, g.scale, p.dropout_p, io_of(stored)};
}

std::string key_of(const char* pass, const cudnn_sdpa::Shape& s) {
    return fmt::format("{} B{} A{} G{} S{} D{} scale {} dropout {} {}", pass, s.B, s.A, s.G, s.S, s.D, s.scale,
                       s.dropout, s.io == cudnn_sdpa::Type::F16 ? "f16" : "bf16");
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
/// dropout masks and agree on the saved state). Its inputs are 16-bit values: bf16 or f16 storage, or
/// the fp32 arrays of a bf16 run.
bool usable(const Geometry& g, const AttentionParams& p, const OpContext& ctx, DType stored) {
    const bool sixteen = stored == DType::BF16 || stored == DType::F16 || ctx.gemm_inputs == DType::BF16;
    if (p.backend != AttentionBackend::Cudnn || !sixteen || g.D % 8 != 0 || g.D > 256) return false;
    if (!cudnn::unavailable().empty()) return false;
    const cudnn_sdpa::Shape s = shape_of(g, p, stored);
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
    k_seed<<<1, 1, 0, st>>>(static_cast<int64_t*>(at), p.rng, (uint64_t{1} << 63) + static_cast<uint64_t>(p.head_offset));
    return at;
}

using Pointers = std::vector<std::pair<int64_t, void*>>;

/// t's data as the graph's 16-bit type: t itself when 16-bit, else (fp32) converted to bf16 into `at`.
void* sixteen_bit(OpContext& ctx, const TensorView& t, void* at) {
    if (t.dtype != DType::F32) return t.data;
    TensorView staged = t;
    staged.data = at;
    staged.dtype = DType::BF16;
    cuda::copy(ctx, staged, t);
    return at;
}

/// Stores the graph's bf16 result `at` into t when t is fp32 (nothing when cuDNN wrote t itself).
void widen_into(OpContext& ctx, const TensorView& t, void* at) {
    if (t.dtype != DType::F32) return;
    TensorView staged = t;
    staged.data = at;
    staged.dtype = DType::BF16;
    cuda::copy(ctx, t, staged);
}

/// Binds Q, K and V in place in the 16-bit qkv `x` (uids q, k, v: the inputs or their gradients).
void bind_heads(Pointers& ptrs, void* x, const cudnn_sdpa::Shape& s, int64_t q, int64_t k, int64_t v) {
    auto* base = static_cast<uint16_t*>(x);
    ptrs.insert(ptrs.end(), {{q, base}, {k, base + cudnn_sdpa::k_offset(s)}, {v, base + cudnn_sdpa::v_offset(s)}});
}

/// Binds qkv (16-bit: in place, else converted into slot 2) and the dropout seed and offset (written
/// at `seed_at`) when the call has dropout.
Pointers bind_inputs(OpContext& ctx, const TensorView& qkv, const cudnn_sdpa::Shape& s, const AttentionParams& p,
                     void* seed_at) {
    const cudaStream_t st = stream_of(ctx);
    const int64_t bytes = qkv.dtype == DType::F32 ? qkv.numel() * 2 : 0;
    Pointers ptrs;
    bind_heads(ptrs, sixteen_bit(ctx, qkv, bytes ? scratch(kQkvSlot, bytes, st) : nullptr), s, cudnn_sdpa::kQ,
               cudnn_sdpa::kK, cudnn_sdpa::kV);
    if (p.dropout_p > 0) {
        auto* seed = static_cast<int64_t*>(seed_buffer(seed_at, p, st));
        ptrs.insert(ptrs.end(), {{cudnn_sdpa::kSeed, seed}, {cudnn_sdpa::kOffset, seed + 1}});
    }
    return ptrs;
}

/// Runs the pass's graph (prepared by usable()).
void run(const char* pass, const cudnn_sdpa::Shape& s, const Pointers& ptrs, cudaStream_t st) {
    std::string why;
    if (!cudnn::execute(key_of(pass, s), ptrs, st, why))
        MWB_FAIL("attention {}: cuDNN refused a graph it had built: {}", pass, why);
}

}  // namespace
}  // namespace mwb::cuda

std::string mwb::cudnn_attention_refusals() {
    std::lock_guard lock(cuda::g_refusals_mutex);
    return cuda::g_refusals;
}

namespace mwb::cuda {

bool cudnn_attention_forward(OpContext& ctx, const TensorView& out, float* lse, const TensorView& qkv,
                             const Geometry& g, const AttentionParams& p) {
    if (!usable(g, p, ctx, qkv.dtype)) return false;
    const cudaStream_t st = stream_of(ctx);
    const cudnn_sdpa::Shape s = shape_of(g, p, qkv.dtype);
    Pointers ptrs = bind_inputs(ctx, qkv, s, p, scratch(kBackwardSlot, 256, st));
    void* o = out.dtype == DType::F32 ? scratch(kOutSlot, out.numel() * 2, st) : out.data;
    ptrs.insert(ptrs.end(), {{cudnn_sdpa::kO, o}, {cudnn_sdpa::kStats, lse}});
    run("forward", s, ptrs, st);
    widen_into(ctx, out, o);
    check_launch("attention_forward (cuDNN)");
    return true;
}

bool cudnn_attention_backward(OpContext& ctx, const TensorView& dqkv, const TensorView& dout,
                              const TensorView& qkv, const TensorView& out, const float* lse, const Geometry& g,
                              const AttentionParams& p) {
    if (!usable(g, p, ctx, qkv.dtype)) return false;
    const cudaStream_t st = stream_of(ctx);
    const cudnn_sdpa::Shape s = shape_of(g, p, qkv.dtype);
    // The backward slot, each part on a 256-byte boundary: the dropout seed, the softmax sums and the dQ
    // accumulator (f32); for fp32 arrays also O and dqkv in 16 bits.
    const bool wide = qkv.dtype == DType::F32;
    const int64_t sum_floats = padded_floats(g.B * g.A * g.S), acc_floats = padded_floats(g.B * g.A * g.S * g.D);
    const int64_t o_floats = wide ? padded_floats((out.numel() + 1) / 2) : 0;
    const int64_t dqkv_bytes = wide ? dqkv.numel() * 2 : 0;
    auto* base = static_cast<float*>(
        scratch(kBackwardSlot, (64 + sum_floats + acc_floats + o_floats) * 4 + dqkv_bytes, st));
    float* softmax_sum = base + 64;
    float* dq_accum = softmax_sum + sum_floats;
    float* o16 = dq_accum + acc_floats;
    void* d16 = wide ? static_cast<void*>(o16 + o_floats) : dqkv.data;
    // cuDNN before 9.6 accumulates into dQ_accum without clearing it first (as cudnn-frontend notes).
    if (cudnn::version() < 90600)
        MWB_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, static_cast<size_t>(g.B * g.A * g.S * g.D) * sizeof(float), st));
    Pointers ptrs = bind_inputs(ctx, qkv, s, p, base);
    void* dout16 = sixteen_bit(ctx, dout, wide ? scratch(kOutSlot, dout.numel() * 2, st) : nullptr);
    ptrs.insert(ptrs.end(), {{cudnn_sdpa::kO, sixteen_bit(ctx, out, o16)},
                             {cudnn_sdpa::kDO, dout16},
                             {cudnn_sdpa::kStats, const_cast<float*>(lse)},
                             {cudnn_sdpa::kSoftmaxSum, softmax_sum},
                             {cudnn_sdpa::kDQAccum, dq_accum}});
    bind_heads(ptrs, d16, s, cudnn_sdpa::kDQ, cudnn_sdpa::kDK, cudnn_sdpa::kDV);
    run("backward", s, ptrs, st);
    widen_into(ctx, dqkv, d16);
    check_launch("attention_backward (cuDNN)");
    return true;
}

}  // namespace mwb::cuda
