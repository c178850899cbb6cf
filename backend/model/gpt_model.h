#pragma once
// GPT as in GPT-2/GPT-3 and Megatron-LM's GPTModel: token + learned position embeddings, L pre-LN
// transformer layers, a final norm, and an output layer tied to the word embedding (or untied),
// trained with softmax cross-entropy. Parameters and gradients live in one arena each.
#include "core/memory.h"
#include "model/gpt_dims.h"
#include "model/param_layout.h"
#include "model/runtime.h"
#include "model/transformer_layer.h"

#include <vector>

namespace mwb {

class GptModel {
public:
    GptModel(const GptDims& dims, const RecomputePolicy& recompute, DType storage, OpContext& ctx, Allocator& alloc);

    const GptDims& dims() const { return d_; }
    const ParamLayout& layout() const { return layout_; }
    DType storage() const { return storage_; }
    /// The weights the forward pass uses (rounded to the storage precision in 16-bit runs).
    TensorView params() const { return params_.view(); }
    /// fp32 gradient accumulators ("main grads"), same layout as params().
    TensorView grads() const { return grads_.view(); }

    /// Megatron-LM's init: N(0, std) weights, N(0, std/sqrt(2L)) for the two output projections of
    /// each layer, zero biases, unit norm weights.
    void init_weights(uint64_t seed);
    void zero_grads();

    /// One micro-batch: forward, loss, backward; gradients accumulate into grads(). tokens is (B, S+1)
    /// row-major (inputs are [:, :S], targets [:, 1:]); the loss gradient is multiplied by grad_scale
    /// (loss scale / micro-batches). Returns the micro-batch's mean loss.
    double forward_backward(const int32_t* tokens, float grad_scale, uint64_t seed, uint64_t stream_base);
    /// Mean loss of a micro-batch without dropout or gradients.
    double evaluate(const int32_t* tokens);

    /// Activation bytes held at the end of the last forward pass (what is kept for backward: the
    /// quantity Korthikanti et al. 2022 count), measured by the tracking allocator.
    int64_t stored_activation_bytes() const { return stored_activation_bytes_; }

private:
    void prepare_inputs(const int32_t* tokens);
    void embed(ModelRuntime& rt, Buffer& x0) const;
    /// Final norm, logits and loss; with d non-empty also their backward (d receives dL/d final_input).
    double head(ModelRuntime& rt, const Buffer& final_input, float grad_scale, const TensorView& d) const;
    TensorView final_norm_bias(const TensorView& arena) const;
    void forward_layer(ModelRuntime& rt, int64_t l, std::vector<LayerActivations>& acts, Buffer& out, bool keep) const;

    GptDims d_;
    RecomputePolicy recompute_;
    DType storage_;
    OpContext& ctx_;
    Allocator& alloc_;
    ParamLayout layout_;
    Buffer params_, grads_;
    Buffer ids_, targets_;      // (N) in (s, b) row order
    Buffer attention_workspace_;
    std::vector<TransformerLayer> layers_;
    std::vector<LayerParams> w_, g_;
    std::size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0, out_w_ = 0;
    int64_t stored_activation_bytes_ = 0;
};

}  // namespace mwb
