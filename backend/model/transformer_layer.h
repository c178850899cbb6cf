#pragma once
// One pre-LN GPT transformer layer with explicit forward and backward:
//   x2  = x  + dropout(proj(attention(ln1(x))))
//   out = x2 + dropout(fc2(gelu(fc1(ln2(x2)))))
#include "core/memory.h"
#include "model/gpt_dims.h"
#include "model/norm.h"
#include "model/param_layout.h"
#include "model/runtime.h"

namespace mwb {

/// Views of one layer's parameters (or of their gradients) inside an arena. Norm biases are empty
/// views under RMSNorm.
struct LayerParams {
    TensorView ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
};

/// What one layer keeps from forward for its backward (N = S·B rows). Under selective recompute
/// `probs` stays empty; a fully recomputed layer keeps only `input` (and only at chunk starts).
struct LayerActivations {
    Buffer input;                   // (N, H)  residual stream in = ln1 input
    NormActivations ln1;            // (N, H)  qkv input
    Buffer qkv;                     // (N, 3H) per head [q | k | v]
    Buffer probs;                   // (B, A, S, S) softmax output
    Buffer context;                 // (N, H)  attention output, proj input
    Buffer residual2;               // (N, H)  x + dropout(proj): ln2 input
    NormActivations ln2;            // (N, H)  fc1 input
    Buffer fc1;                     // (N, F)  gelu input
    Buffer gelu;                    // (N, F)  fc2 input

    /// Frees everything but `input`.
    void drop_intermediates();
};

class TransformerLayer {
public:
    TransformerLayer(const GptDims& dims, int64_t index) : d_(dims), index_(index) {}

    /// Adds this layer's parameters to the layout (Megatron-core names).
    static void add_params(ParamLayout& layout, int64_t index, const GptDims& dims);
    static LayerParams params(const ParamLayout& layout, const TensorView& arena, int64_t index, const GptDims& dims);

    /// Computes `out` from `a.input`. keep = false frees the intermediates (full recompute);
    /// store_probs = false never keeps the attention probabilities (selective recompute).
    void forward(ModelRuntime& rt, const LayerParams& w, LayerActivations& a, Buffer& out, bool keep,
                 bool store_probs, const TensorView& attention_workspace) const;
    /// d: gradient of the layer output in, gradient of the layer input out. Frees `a`.
    void backward(ModelRuntime& rt, const LayerParams& w, const LayerParams& g, LayerActivations& a,
                  const TensorView& d, const TensorView& attention_workspace) const;

private:
    AttentionParams attention_params(const ModelRuntime& rt) const;

    GptDims d_;
    int64_t index_;
};

}  // namespace mwb
