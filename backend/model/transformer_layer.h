#pragma once
// One pre-LN transformer layer (GPT or Llama family) with explicit forward and backward, tensor- and
// sequence-parallel as Megatron-LM's:
//   x2  = x  + dropout(proj(attention(rope(qkv(ln1(x))))) + b_proj)   qkv column-, proj row-parallel
//   out = x2 + dropout(fc2(act(fc1(ln2(x2)))) + b_fc2)                fc1 column-, fc2 row-parallel
// act is GELU, or SwiGLU over fc1's [gate | up]; rope only with rotary positions; attention with G
// key/value groups (each tensor-parallel rank holds G/t whole groups); biases as configured.
// Under sequence parallelism x, ln outputs, x2 and out hold this rank's S/t positions; the
// column-parallel inputs are all-gathered (and gathered again in backward instead of being kept),
// the row-parallel outputs reduce-scattered.
#include "backend/core/memory.h"
#include "backend/model/gpt_dims.h"
#include "backend/model/norm.h"
#include "backend/model/param_layout.h"
#include "backend/model/runtime.h"
#include "backend/model/tensor_parallel.h"

namespace mwb {

/// Views of one layer's parameters (or of their gradients) inside an arena, local shapes. Norm
/// biases are empty views under RMSNorm, linear biases empty when the model has none.
struct LayerParams {
    TensorView ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
};

/// What one layer keeps from forward for its backward; R = rows this rank holds of the residual
/// stream (N/t under sequence parallelism, else N), N = S·B, t = tensor-parallel size. Under
/// selective recompute `probs` stays empty; a fully recomputed layer keeps only `input` (and only at
/// chunk starts).
struct LayerActivations {
    Buffer input;         // (R, H)   residual stream in = ln1 input
    NormActivations ln1;  // (R, H)   qkv input (gathered again in backward under SP)
    Buffer qkv;           // (N, (A+2G)·D/t) per local group [q… | k | v], after RoPE
    Buffer probs;         // (B, A/t, S, S) softmax output
    Buffer context;       // (N, A·D/t) attention output, proj input
    Buffer residual2;     // (R, H)   x + dropout(proj): ln2 input
    NormActivations ln2;  // (R, H)   fc1 input
    Buffer fc1;           // (N, F/t), SwiGLU (N, 2F/t): activation input
    Buffer act;           // (N, F/t) GELU or SwiGLU output, fc2 input

    /// Frees everything but `input`.
    void drop_intermediates();
};

class TransformerLayer {
public:
    /// index: the layer's global index (names, dropout streams). rope_cos/rope_sin: the (S, R/2) tables
    /// (empty without RoPE), owned by the model.
    TransformerLayer(const GptDims& dims, const TensorParallel& tp, int64_t index, TensorView rope_cos = {},
                     TensorView rope_sin = {});

    /// Adds this layer's parameters (this tensor-parallel rank's slices) to the layout.
    static void add_params(ParamLayout& layout, int64_t index, const GptDims& dims, int tp_size, int tp_rank,
                           bool sequence_parallel);
    static LayerParams params(const ParamLayout& layout, const TensorView& arena, int64_t index, const GptDims& dims);

    /// Computes `out` (R, H) from `a.input`. keep = false frees the intermediates (full recompute);
    /// store_probs = false never keeps the attention probabilities (selective recompute). With `next`
    /// (the norm that reads `out` next on this rank: the next layer's ln1 or the final norm) the output
    /// residual and that norm run fused, filling next.n. A layer whose `a.ln1` is filled already
    /// (by the previous layer's fused residual) does not run its input norm again.
    void forward(ModelRuntime& rt, TensorParallel& tp, const LayerParams& w, LayerActivations& a, Buffer& out,
                 bool keep, bool store_probs, const TensorView& attention_workspace, const NextNorm& next = {}) const;
    /// d (R, H): gradient of the layer output in, gradient of the layer input out. Frees `a`.
    void backward(ModelRuntime& rt, TensorParallel& tp, const LayerParams& w, const LayerParams& g, LayerActivations& a,
                  const TensorView& d, const TensorView& attention_workspace) const;

private:
    AttentionParams attention_params(const ModelRuntime& rt) const;
    /// out = residual + dropout(branch + bias), or without bias when the model has none.
    void residual_add(ModelRuntime& rt, const TensorView& out, const TensorView& residual, const TensorView& branch,
                      const TensorView& bias, float p, RngStream rng) const;
    /// The view attention ops take of the tensor saved for backward (its shape depends on the device).
    TensorView saved_view(const ModelRuntime& rt, const Buffer& saved) const;
    /// Element offset of this rank's first residual-stream element (dropout masks are global).
    int64_t residual_offset() const { return seq_begin_ * d_.micro_batch * d_.hidden; }

    GptDims d_;
    int64_t index_;
    int tp_size_, tp_rank_;
    int64_t rows_, local_rows_, seq_begin_;                         // N, R, first sequence position held
    int64_t heads_, groups_, qkv_width_, width_, ffn_, fc1_width_;  // A/t, G/t, (A+2G)·D/t, A·D/t, F/t, fc1 rows/t
    TensorView rope_cos_, rope_sin_;
};

}  // namespace mwb
