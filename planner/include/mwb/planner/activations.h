#pragma once
// Activation and workspace tensors of one micro-batch on one rank, in bytes, tensor by tensor.
//
// Two accountings:
//  - Engine: what mwb-train allocates (backend/model/transformer_layer.h, docs/memory.md): per layer
//    16sbh + 4sb + as²b elements; dropout masks are regenerated, never stored.
//  - MegatronLM: Korthikanti et al. 2022's count for Megatron-LM (16-bit activations, 1-byte dropout
//    masks, dropped-out probabilities stored): sbh(34 + 5as/h) bytes per layer without parallelism.
// Tensor parallelism (t) splits QKV, the probabilities, the context and the MLP; the rest (layer input,
// norm outputs and statistics, residuals, masks) is replicated unless sequence parallelism shards it
// along s. Korthikanti's Table 2 follows from these tables: sbh(10 + 24/t + 5as/(ht)) with TP,
// sbh(34/t + 5as/(ht)) with TP + SP, without the 5as/(ht) term under selective recompute.
#include "mwb/planner/layout.h"

#include <cstdint>

namespace mwb::planner {

enum class Accounting { Engine, MegatronLM };

/// Bytes of what one transformer layer allocates in forward, per rank (names as LayerActivations).
struct LayerBytes {
    int64_t input = 0;      ///< residual stream in (= LayerNorm 1 input); also the size of the layer output
    int64_t ln1_out = 0;    ///< QKV GEMM input
    int64_t ln1_stats = 0;  ///< mean + rstd (fp32; RMSNorm: rstd only); MegatronLM: 0
    int64_t qkv = 0;        ///< Q, K, V
    int64_t probs = 0;      ///< attention core: softmax output (MegatronLM: + dropout mask + dropped probabilities)
    int64_t context = 0;    ///< attention output = projection input
    int64_t residual2 = 0;  ///< x + dropout(proj): LayerNorm 2 input
    int64_t masks = 0;      ///< MegatronLM only: the two residual dropout masks (1 byte per element)
    int64_t ln2_out = 0;    ///< fc1 input
    int64_t ln2_stats = 0;
    int64_t fc1 = 0;   ///< GELU input, or SwiGLU's gate and up (N, 2f/t)
    int64_t gelu = 0;  ///< fc2 input: the GELU or SwiGLU output (N, f/t)

    /// Everything a layer keeps when it stores all (its output belongs to the next layer).
    int64_t all() const {
        return input + ln1_out + ln1_stats + qkv + probs + context + residual2 + masks + ln2_out + ln2_stats + fc1 +
               gelu;
    }
    /// Kept under selective recompute (the attention core is recomputed in backward).
    int64_t without_core() const { return all() - probs; }
};

/// Workspace (temporaries) of the engine's forward/backward, per rank, by size (the buffers of
/// TransformerLayer and GptModel; N = s·b rows, R = N/t rows under sequence parallelism, else N).
struct WorkspaceBytes {
    int64_t full = 0;        ///< (N, h) stored: a gathered norm output
    int64_t full_sum = 0;    ///< (N, h) partial sums: a row-parallel output before the reduction, the embedding
                             ///< sum, a gathered dropout gradient (SP)
    int64_t local = 0;       ///< (R, h) stored: the residual stream's gradient (received, the head's)
    int64_t local_sum = 0;   ///< (R, h) partial sums: a dropout's input gradient, an SP reduction's rows
    int64_t grad_norm_out = 0;  ///< (N, h): the final norm output's gradient (partial sums under TP)
    int64_t grad_f = 0;  ///< (N, f/t): gradient of the MLP hidden
    int64_t grad_fc1 = 0;    ///< SwiGLU only: (N, 2f/t), gradient of the gate and up outputs
    int64_t grad_ctx = 0;    ///< (N, a·d/t): gradient of the attention context
    int64_t grad_qkv = 0;    ///< (N, (a + 2G)·d/t): gradient of Q, K, V
    int64_t loss_stats = 0;  ///< cross-entropy lse (row max), Σexp, target logit, scale: 4N fp32
    int64_t row_max = 0;     ///< vocabulary-parallel: the all-reduced row max, N fp32 (through the head)
    int64_t grad_input = 0;  ///< (N, max(h, a·d/t)): gradient of a column-parallel input (also receives the
                             ///< unused output of a selective recompute)
    int64_t rope_tables = 0;  ///< RoPE's cos and sin, (s, rotary_dim/2) fp32 each, allocated once per model
    /// The optimizer's per-step device scalars: the global Σ x² (fp64) and gradient_scale's pair (fp32).
    int64_t step_scalars = 0;
    int64_t persistent = 0;   ///< allocated once: attention scratch (CPU: threads × 2s² fp32) or cuBLAS's,
                              ///< the RoPE tables and the step scalars
};

/// The last stage's head: final norm and logits.
struct HeadBytes {
    int64_t norm_out = 0, norm_stats = 0;
    int64_t logits = 0;  ///< engine: one chunk of rows, (logits_chunk_rows, V/t), turned into its gradient in
                         ///< place before the next chunk; MegatronLM: all (s·b, V/t) in fp32
};

/// The trainer's (b, s+1) int32 token buffer, allocated once (data category).
int64_t token_buffer_bytes(const ModelShape& m);
/// One micro-batch's input ids or targets, (s·b) int32: the chunk with the embedding keeps the ids,
/// the chunk with the head the targets, from its forward until its backward (data category).
int64_t token_ids_bytes(const ModelShape& m);

LayerBytes layer_bytes(const ModelShape& m, const Layout& l, const Precision& p, Accounting a);
HeadBytes head_bytes(const ModelShape& m, const Layout& l, const Precision& p, Accounting a);
WorkspaceBytes workspace_bytes(const ModelShape& m, const Layout& l, const Precision& p, const DeviceSpec& d);
/// MegatronLM only: the embedding dropout mask the first stage keeps per micro-batch (1 byte/element).
int64_t embedding_mask_bytes(const ModelShape& m, const Layout& l, Accounting a);

/// Bytes one layer keeps for backward under `r` (full recompute: its input when it starts a chunk).
int64_t kept_layer_bytes(const LayerBytes& lb, Recompute r, bool chunk_start);

}  // namespace mwb::planner
