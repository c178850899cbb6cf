#pragma once
// The op interface of Megatron Workbench: every tensor operation the model needs, one signature per
// op, listed once with its contract in ops.inc and declared here from that list. Each call checks its
// arguments (kernels/src/op_checks.cpp: an mwb::Error naming the op, the argument and what was
// expected), then runs on the context's device: the CPU implementation (kernels/cpu, OpenBLAS +
// OpenMP) or the CUDA one (kernels/cuda). Ops know nothing about models, ranks or sockets.
//
// Conventions
//   - Activations are row-major matrices of N = S·B rows (sequence-major, as Megatron-LM: row n is
//     position n / B of sequence n % B) and H columns. Shapes in comments use
//     B = micro batch, S = sequence, H = hidden (local shard), A = heads (local), D = head dim,
//     V = vocabulary (local shard), N = S·B rows.
//   - Linear weights are (out, in) as in PyTorch/Megatron: y = x·Wᵀ + b.
//   - Parameter gradients are always accumulated (+=), activation gradients overwrite unless an op
//     says otherwise.
//   - Dropout masks are regenerated from (RngStream, global element index) and never stored; ops
//     that shard a tensor take the offset of their shard so masks match the unsharded tensor.
//   - Reductions are done in a fixed order, so results do not depend on the number of threads.
#include "mwb/kernels/attention_backend.h"
#include "mwb/kernels/philox.h"
#include "mwb/kernels/tensor.h"

#include <array>
#include <cstdint>
#include <vector>

namespace mwb {

/// Every op of ops.inc, in its order: the index of OpContext::calls.
enum class OpId : int {
#define MWB_DEFAULT(value)
#define MWB_OP(ret, name, params, args) name,
#include "mwb/kernels/ops.inc"
#undef MWB_OP
#undef MWB_DEFAULT
    Count
};

/// Where and how ops run. On the CPU the stream is unused; on CUDA it is the cudaStream_t.
struct OpContext {
    Device device = Device::CPU;
    void* stream = nullptr;
    /// CUDA only: BF16 makes matmul/linear round their f32 inputs to bf16 and run on bf16 tensor cores
    /// (fp32 accumulation). Lossless when the inputs are already bf16 values, as in bf16-storage runs.
    /// The CPU ignores it.
    DType gemm_inputs = DType::F32;
    /// CUDA only: the attention kernels of the run (resolve_attention_backend). The CPU ignores it.
    AttentionBackend attention = AttentionBackend::Own;
    /// Reads of device results by the host: every op that returns a value (sum_squares, read_f64)
    /// adds one, on both devices. On a GPU each is a wait for the stream, so a training step's count
    /// is its host synchronisations; the CPU path runs the same calls and counts the same.
    int64_t host_reads = 0;
    /// Calls of each op through this context, on both devices (a CUDA graph's ops count when queued):
    /// which kernels a model's pass runs, e.g. that a fusion is used (tests).
    using Counts = std::array<int64_t, static_cast<std::size_t>(OpId::Count)>;
    Counts calls{};
    int64_t calls_of(OpId op) const { return calls[static_cast<std::size_t>(op)]; }
};

/// Shapes and randomness of the attention core of one layer on one rank.
struct AttentionParams {
    int num_heads = 1;         ///< A: query heads held by this rank
    /// G: key/value heads held by this rank, each shared by A/G query heads (grouped-query attention;
    /// G = 1 is multi-query attention). 0 means G = A (multi-head attention).
    int num_query_groups = 0;
    int head_offset = 0;       ///< global index of this rank's first head (for dropout masks)
    int total_heads = 1;       ///< heads of the whole layer
    int batch = 1;             ///< B
    float softmax_scale = 1;   ///< usually 1/sqrt(D)
    float dropout_p = 0;       ///< attention dropout on the probabilities
    RngStream rng;
    /// CUDA: the kernels (a run's resolve_attention_backend; never asked again per call). head_dim:
    /// D when given (0 = not given; checked against qkv's).
    AttentionBackend backend = AttentionBackend::Own;
    int head_dim = 0;

    int groups() const { return num_query_groups > 0 ? num_query_groups : num_heads; }
    /// Columns of one qkv row per head dim: G groups of [A/G query heads | k | v].
    int qkv_heads() const { return num_heads + 2 * groups(); }
};

/// One AdamW step's hyper-parameters.
struct AdamWParams {
    float lr = 0;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float eps = 1e-8f;
    float weight_decay = 0;
    int64_t step = 1;        ///< 1-based step count for bias correction
    float grad_scale = 1;    ///< grads are multiplied by this first (loss-scale undo × clip coefficient)
    bool zero_grad = false;  ///< grads are set to 0 once read (the next step's zeroing pass is then not needed)
};

/// The constants an AdamW step derives from its hyper-parameters on the host, computed by one function
/// (kernels/cpu/optimizer.cpp) for both devices' kernels: lr/bc1, 1/sqrt(bc2) and 1 − lr·wd, with
/// bc = 1 − β^step (float, from a float64 power).
struct AdamWConstants {
    float step_size = 0, inv_sqrt_bc2 = 1, decay = 1;
};
AdamWConstants adamw_constants(const AdamWParams& p);

/// The per-step scalars of a training step in one F64 block (device memory; host memory on the CPU),
/// written by one upload before the step and read by the kernels there, so a step queued once (a CUDA
/// graph) runs with each step's values: AdamW's constants for a decayed range (adamw_constants: the
/// floats are exact in the doubles), the loss scale, the iteration (counted from 1, exact in a double:
/// the dropout streams derive from it, RngStream) and the loss gradient's scale (loss scale /
/// micro-batches as a float: the model's fill_from of the logits' gradient scale). Indices into the block:
namespace step_params {
enum : int64_t { StepSize, InvSqrtBc2, Decay, LossScale, Iteration, GradScale, Count };
}

/// Elements [first, first + count) of a 1-D tensor (an arena's parameter, in arena elements).
struct IndexRange {
    int64_t first = 0;
    int64_t count = 0;
};

/// Megatron-LM's clip_grad_norm_ coefficient: clip / (norm + 1e-6) when that is below 1, else 1 (also
/// when clipping is off, clip <= 0). One formula for the host's telemetry and the device's scale.
MWB_HOST_DEVICE double clip_coefficient(double grad_norm, double clip) {
    const double coeff = clip / (grad_norm + 1e-6);
    return clip > 0 && coeff < 1.0 ? coeff : 1.0;
}

namespace ops {

// ---- threads (CPU) --------------------------------------------------------------------------------
/// Sets the number of CPU threads used by every op (OpenMP and OpenBLAS share one pool).
void set_num_threads(int n);
int num_threads();

// ---- sizes of the attention op's buffers -------------------------------------------------------------
/// Bytes of scratch the CPU attention needs (per-thread S×S tiles); pass a workspace at least this big.
int64_t attention_workspace_bytes(const AttentionParams& p, int64_t seq_len, int threads);
/// The same for `device`: on CUDA the workspace holds one float per query row (B·A·S), for backward.
int64_t attention_workspace_bytes(Device device, const AttentionParams& p, int64_t seq_len, int threads);
/// Elements of the `probs` tensor that forward saves for backward: on the CPU the probabilities
/// (B, A, S, S); on CUDA, flash-attention style, only each row's log-sum-exp (B, A, S) — the S×S
/// matrix is never stored in device memory and backward recomputes it tile by tile.
int64_t attention_saved_elements(Device device, const AttentionParams& p, int64_t seq_len);

// ---- the ops: one signature each, with its shapes and contract, in ops.inc ----------------------------
// Every call checks its arguments' shapes, dtypes and devices first (src/op_checks.cpp; mwb::Error
// naming the op, the argument and what was expected), then runs the context's device's implementation.
#define MWB_DEFAULT(value) = value
#define MWB_OP(ret, name, params, args) ret name params;
#include "mwb/kernels/ops.inc"
#undef MWB_OP
#undef MWB_DEFAULT

}  // namespace ops
}  // namespace mwb
