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
// (the kernels themselves: attention_kernels.cuh), each for qkv, out and their gradients stored as
// f32, bf16 or f16 (one dtype for the four; fp32 arithmetic, outputs rounded once). 16-bit values —
// bf16/f16 storage, or fp32 arrays of a bf16 run — go to the tensor-core kernels of
// attention_tc_kernels.cuh instead (same contract), or to cuDNN's fused attention when the run chose
// it (AttentionParams::backend, ops_attention_cudnn.cu; its backward reads O from `out`).
#include "attention_launch.h"
#include "cuda_ops.h"
#include "ops_attention_cudnn.h"
#include "runtime.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

/// Calls f(T{}, E{}) for the storage element T of `stored` and the tensor cores' input E: T's own
/// type for 16-bit storage, bf16 for fp32 arrays of a bf16 run (they hold bf16 values), int when the
/// fp32 kernels run (fp32 runs; fp16 runs on fp32 arrays keep them, as before 16-bit storage).
template <class F>
void with_elements(DType stored, DType gemm_inputs, F&& f) {
    switch (stored) {
    case DType::BF16: f(__nv_bfloat16{}, __nv_bfloat16{}); return;
    case DType::F16: f(__half{}, __half{}); return;
    default:
        if (gemm_inputs == DType::BF16) f(float{}, __nv_bfloat16{});
        else f(float{}, 0);  // E = int: no tensor cores
    }
}

}  // namespace

int64_t attention_workspace_bytes(const AttentionParams& p, int64_t seq_len) {
    return static_cast<int64_t>(p.batch) * p.num_heads * seq_len * static_cast<int64_t>(sizeof(float));
}

void attention_forward(OpContext& ctx, TensorView out, TensorView probs, TensorView qkv, TensorView,
                       const AttentionParams& p) {
    const Geometry g = geometry("attention_forward", qkv, p);
    if (g.S == 0) return;
    float* l = static_cast<float*>(probs.data);
    if (cudnn_attention_forward(ctx, out, l, qkv, g, p)) return;
    with_elements(qkv.dtype, ctx.gemm_inputs, [&](auto t, auto e) {
        using T = decltype(t);
        launch_forward<T, decltype(e)>(ctx, static_cast<T*>(out.data), l, static_cast<const T*>(qkv.data), g);
    });
    check_launch("attention_forward");
}

void attention_backward(OpContext& ctx, TensorView dqkv, TensorView dout, TensorView qkv, TensorView out,
                        TensorView probs, TensorView workspace, const AttentionParams& p) {
    const Geometry g = geometry("attention_backward", qkv, p);
    if (g.S == 0) return;
    float* delta = static_cast<float*>(workspace.data);
    const float* l = static_cast<const float*>(probs.data);
    if (cudnn_attention_backward(ctx, dqkv, dout, qkv, out, l, g, p)) return;
    with_elements(qkv.dtype, ctx.gemm_inputs, [&](auto t, auto e) {
        using T = decltype(t);
        launch_backward<T, decltype(e)>(ctx, static_cast<T*>(dqkv.data), delta, static_cast<const T*>(dout.data),
                                        static_cast<const T*>(qkv.data), l, g);
    });
    check_launch("attention_backward");
}

}  // namespace mwb::cuda
