// Causal self-attention on CUDA, flash-attention style: scores are computed tile by tile in shared
// memory with an online softmax, so the S×S matrix never exists in device memory. Forward saves one
// log-sum-exp per query row (in `probs`, B·A·S floats); backward recomputes the probabilities from it.
// Dropout on the probabilities uses the CPU's Philox counters (global element index
// ((b·total_heads + head)·S + i)·S + j), so masks match the CPU op bit for bit.
//
// One thread owns one query row (forward, dq) or one key row (dk, dv) and keeps its D-vectors in
// registers; K/V (or Q/dO) tiles are shared by the block. Grouped-query attention: forward and dq
// blocks belong to a query head and read its group's K/V in place; a dk/dv block belongs to a group
// and walks the group's query heads in order, so K/V are never expanded and dk/dv of a group are summed
// in registers. No atomics: every sum has a fixed order,
// so results are bit-identical run to run. Head dims 16, 32, 64, 80, 96, 128 and 160 are instantiated
// (the kernels themselves: attention_kernels.cuh). bf16 runs use the tensor-core kernels of
// attention_tc_kernels.cuh instead (same contract), or cuDNN's fused attention when the run chose it
// (AttentionParams::backend, ops_attention_cudnn.cu; `probs` then also keeps a bf16 copy of O).
#include "attention_kernels.cuh"
#include "attention_tc_kernels.cuh"
#include "cuda_ops.h"
#include "ops_attention_cudnn.h"
#include "runtime.h"

namespace mwb::cuda {

namespace {

using namespace attention;

/// The head layout of qkv (the dispatcher checked it against p), and the head dims CUDA has kernels for.
Geometry geometry(const char* op, const TensorView& qkv, const AttentionParams& p) {
    const Geometry g = make_geometry(qkv.dim(0), qkv.dim(2) / p.qkv_heads(), p);
    MWB_CHECK(g.D == 16 || g.D == 32 || g.D == 64 || g.D == 80 || g.D == 96 || g.D == 128 || g.D == 160,
              "{}: head dim {} has no CUDA kernel (16, 32, 64, 80, 96, 128 or 160)", op, g.D);
    return g;
}

/// Blocks of `rows` positions per (sequence, query head): forward and dq; per (sequence, key/value
/// group) with `per_group`: dk/dv.
dim3 grid_of(const Geometry& g, int rows, bool per_group = false) {
    return dim3(static_cast<unsigned>((g.S + rows - 1) / rows), static_cast<unsigned>(g.B * (per_group ? g.G : g.A)));
}

/// The opt-in shared memory a block may use on this device.
int max_block_smem() {
    static const int bytes = [] {
        int device = 0, value = 0;
        MWB_CUDA_CHECK(cudaGetDevice(&device));
        MWB_CUDA_CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        return value;
    }();
    return bytes;
}

/// Tensor cores for bf16 runs (their inputs are bf16 values) when the tiles fit in shared memory
/// (128.5 KiB at most: every sm_80/sm_90 part); fp32 runs keep the fp32 kernels.
template <int D>
bool use_tensor_cores(const OpContext& ctx) {
    return ctx.gemm_inputs == DType::BF16 && TcBackwardSmem<D>::bytes <= max_block_smem();
}

/// Lets `kernel` use `bytes` of dynamic shared memory (above the default 48 KiB), once per kernel.
template <class Kernel>
void allow_smem(Kernel kernel, int bytes) {
    MWB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <int D>
void forward_d(const OpContext& ctx, float* out, float* lse, const float* qkv, const Geometry& g) {
    const cudaStream_t s = stream_of(ctx);
    if (use_tensor_cores<D>(ctx)) {
        constexpr int bytes = TcForwardSmem<D>::bytes;
        static const bool allowed = (allow_smem(k_attn_fwd_tc<D>, bytes), true);
        (void)allowed;
        k_attn_fwd_tc<D><<<grid_of(g, kTcRows), kTcThreads, bytes, s>>>(out, lse, qkv, g);
        return;
    }
    k_attn_fwd<D><<<grid_of(g, kRows), kRows, 0, s>>>(out, lse, qkv, g);
}

template <int D>
void backward_d(const OpContext& ctx, float* dqkv, float* delta, const float* dout, const float* qkv, const float* lse,
                const Geometry& g) {
    const cudaStream_t s = stream_of(ctx);
    if (use_tensor_cores<D>(ctx)) {
        constexpr int bytes = TcBackwardSmem<D>::bytes;
        static const bool allowed = (allow_smem(k_attn_bwd_dq_tc<D>, bytes), allow_smem(k_attn_bwd_dkv_tc<D>, bytes), true);
        (void)allowed;
        k_attn_bwd_dq_tc<D><<<grid_of(g, kTcRows), kTcThreads, bytes, s>>>(dqkv, delta, dout, qkv, lse, g);
        k_attn_bwd_dkv_tc<D><<<grid_of(g, kTcRows, true), kTcThreads, bytes, s>>>(dqkv, delta, dout, qkv, lse, g);
        return;
    }
    k_attn_bwd_dq<D><<<grid_of(g, kRows), kRows, 0, s>>>(dqkv, delta, dout, qkv, lse, g);
    k_attn_bwd_dkv<D><<<grid_of(g, kRows, true), kRows, 0, s>>>(dqkv, delta, dout, qkv, lse, g);
}

}  // namespace

int64_t attention_workspace_bytes(const AttentionParams& p, int64_t seq_len) {
    return static_cast<int64_t>(p.batch) * p.num_heads * seq_len * static_cast<int64_t>(sizeof(float));
}

int64_t attention_saved_elements(const AttentionParams& p, int64_t seq_len) {
    if (p.backend != AttentionBackend::Cudnn) return static_cast<int64_t>(p.batch) * p.num_heads * seq_len;
    MWB_CHECK(p.head_dim > 0, "attention_saved_elements: the cuDNN backend needs AttentionParams::head_dim");
    return cudnn_saved_elements(p, seq_len);
}

void attention_forward(OpContext& ctx, TensorView out, TensorView probs, TensorView qkv, TensorView,
                       const AttentionParams& p) {
    const Geometry g = geometry("attention_forward", qkv, p);
    if (g.S == 0) return;
    float* o = static_cast<float*>(out.data);
    float* l = static_cast<float*>(probs.data);
    const float* x = static_cast<const float*>(qkv.data);
    if (cudnn_attention_forward(ctx, o, l, x, g, p)) return;
    switch (g.D) {
    case 16: forward_d<16>(ctx, o, l, x, g); break;
    case 32: forward_d<32>(ctx, o, l, x, g); break;
    case 64: forward_d<64>(ctx, o, l, x, g); break;
    case 80: forward_d<80>(ctx, o, l, x, g); break;
    case 96: forward_d<96>(ctx, o, l, x, g); break;
    case 128: forward_d<128>(ctx, o, l, x, g); break;
    default: forward_d<160>(ctx, o, l, x, g); break;
    }
    check_launch("attention_forward");
}

void attention_backward(OpContext& ctx, TensorView dqkv, TensorView dout, TensorView qkv, TensorView probs,
                        TensorView workspace, const AttentionParams& p) {
    const Geometry g = geometry("attention_backward", qkv, p);
    if (g.S == 0) return;
    float* dx = static_cast<float*>(dqkv.data);
    float* delta = static_cast<float*>(workspace.data);
    const float* d = static_cast<const float*>(dout.data);
    const float* x = static_cast<const float*>(qkv.data);
    const float* l = static_cast<const float*>(probs.data);
    if (cudnn_attention_backward(ctx, dx, d, x, l, g, p)) return;
    switch (g.D) {
    case 16: backward_d<16>(ctx, dx, delta, d, x, l, g); break;
    case 32: backward_d<32>(ctx, dx, delta, d, x, l, g); break;
    case 64: backward_d<64>(ctx, dx, delta, d, x, l, g); break;
    case 80: backward_d<80>(ctx, dx, delta, d, x, l, g); break;
    case 96: backward_d<96>(ctx, dx, delta, d, x, l, g); break;
    case 128: backward_d<128>(ctx, dx, delta, d, x, l, g); break;
    default: backward_d<160>(ctx, dx, delta, d, x, l, g); break;
    }
    check_launch("attention_backward");
}

}  // namespace mwb::cuda
