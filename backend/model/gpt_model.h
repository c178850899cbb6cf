#pragma once
// GPT as in GPT-2/GPT-3 and Megatron-LM's GPTModel: token + learned position embeddings (or rotary
// positions applied inside attention, or none), L pre-LN transformer layers (GPT's or the Llama
// family's: RoPE, SwiGLU, grouped-query attention, no biases), a final norm, and an output layer tied
// to the word embedding (or untied), trained with softmax cross-entropy. This is the part one rank holds: its
// tensor-parallel slice of its pipeline stage's model chunks. Parameters and gradients live in one arena each.
//
// Forward and backward run per (chunk, micro-batch) so that pipeline schedules can interleave them;
// what a micro-batch keeps between its forward and its backward lives here until its backward.
#include "backend/core/host_staging.h"
#include "backend/core/memory.h"
#include "backend/model/gpt_dims.h"
#include "backend/model/param_layout.h"
#include "backend/model/runtime.h"
#include "backend/model/tensor_parallel.h"
#include "backend/model/transformer_layer.h"

#include <map>
#include <memory>
#include <vector>

namespace mwb {

class SelfCommunicator;

/// One micro-batch as the model sees it.
struct MicroBatch {
    int64_t id = 0;                   ///< this rank's micro-batch number within the iteration (keys the saved state)
    const int32_t* tokens = nullptr;  ///< (B, S+1) row-major; needed by chunks with the embedding or the head
    uint64_t seed = 0;
    uint64_t stream_base = 0;  ///< micro_batch_stream() of the global micro-batch (dropout masks)
    float grad_scale = 1;      ///< the loss gradient is multiplied by this (loss scale / micro-batches)
    /// The step's parameter block (F64 (step_params::Count), the optimizer's; device memory on a GPU).
    /// When given, the loss gradient's scale is its GradScale and the dropout streams derive from its
    /// Iteration and `global_micro_batch` where the ops run (RngStream), so a step queued once (a CUDA
    /// graph) runs with each step's values; `grad_scale` and `stream_base` are then not used.
    TensorView step;
    int64_t global_micro_batch = 0;
    /// I32 (2·S·B) on the device: the micro-batch's ids then targets, laid out (lay_out_inputs) and
    /// uploaded by the caller (a CUDA graph's fixed buffer, StepGraph::inputs); `tokens` is then not read.
    TensorView inputs;
    bool training = true;      ///< false: no dropout, nothing kept for backward
    /// F64 (1) on the device: the head chunk adds the micro-batch's mean loss to it (with
    /// `accumulate_loss`, else overwrites it) and ForwardResult::loss stays 0, so the step reads its
    /// losses once, at its end (PipelineRunner). Empty: ForwardResult::loss reads it (one host read).
    TensorView loss_sum;
    bool accumulate_loss = false;
};

struct ForwardResult {
    Buffer output;    ///< (R, H) activation for the next stage; empty for the head chunk
    double loss = 0;  ///< mean loss of the micro-batch (head chunk without MicroBatch::loss_sum only)
};

class GptModel {
public:
    /// The whole model on one process (no communication). gradients = false: no gradient arena
    /// (inference: generation), grads() is then empty and backward must not run. grad_dtype: the
    /// gradient arena's dtype (mwb::gradient_dtype: F16 in fp16 runs without
    /// accumulate_allreduce_grads_in_fp32, else F32).
    GptModel(const GptDims& dims, const RecomputePolicy& recompute, DType storage, OpContext& ctx, Allocator& alloc,
             bool gradients = true, DType grad_dtype = DType::F32);
    /// This rank's part: `partition` says which layers (and whether the embedding and head) it holds,
    /// `tp` its tensor-parallel group; the arenas split into `arena_shards` equal shards (the
    /// distributed optimizer's data-parallel size); gradients and grad_dtype as above.
    GptModel(const GptDims& dims, const ModelPartition& partition, TensorParallel& tp, const RecomputePolicy& recompute,
             DType storage, OpContext& ctx, Allocator& alloc, int64_t arena_shards = 1, bool gradients = true,
             DType grad_dtype = DType::F32);
    ~GptModel();

    const GptDims& dims() const { return d_; }
    const ModelPartition& partition() const { return partition_; }
    const ParamLayout& layout() const { return layout_; }
    DType storage() const { return storage_; }
    Allocator& allocator() { return alloc_; }
    int num_chunks() const { return static_cast<int>(partition_.chunks.size()); }
    /// Rows of the residual stream this rank holds per micro-batch (S·B, or S·B/t under SP).
    int64_t local_rows() const { return local_rows_; }
    /// The dtype of the residual stream a chunk takes and returns, and of its gradient (runtime.h).
    DType stored_dtype() const { return mwb::stored_dtype(ctx_.device, storage_); }
    /// The weights the forward pass uses, the working copy: an arena of the storage dtype on both
    /// devices (bf16/f16 in 16-bit runs, the rounding of the optimizer's fp32 masters). Readers that
    /// want fp32 values widen them (ops::copy) or read the optimizer's master.
    TensorView params() const { return params_.view(); }
    /// The gradient accumulators ("main grads"), same layout as params(): f32, or f16 in fp16 runs
    /// without accumulate_allreduce_grads_in_fp32 (each op's fp32 sum rounded once into it).
    TensorView grads() const { return grads_.view(); }

    /// Megatron-LM's init, by parameter role: N(0, std) weights, N(0, std/sqrt(2L)) for the two output
    /// projections of each layer, zero biases, unit norm weights — each shard drawing its part of the
    /// global tensor.
    void init_weights(uint64_t seed);
    void zero_grads();

    /// Forward of model chunk `chunk` for one micro-batch. `input` is the previous stage's output
    /// (ignored by the chunk with the embedding). In training the chunk with the head also runs the
    /// head's backward at once (so logits are never kept) and returns the loss.
    ForwardResult forward(int chunk, const MicroBatch& mb, Buffer input);
    /// Backward of `chunk` for micro-batch `id` given the gradient of its output (ignored by the
    /// head chunk); returns the gradient of its input (empty for the embedding chunk). Parameter
    /// gradients accumulate into grads().
    Buffer backward(int chunk, int64_t id, Buffer grad_output);

    /// Single-stage convenience: forward and backward of one micro-batch (whole model on this rank).
    double forward_backward(const int32_t* tokens, float grad_scale, uint64_t seed, uint64_t stream_base);
    /// A micro-batch's (B, S+1) tokens as the model's inputs: ids[s·B + b] = tokens[b][s] and
    /// targets[s·B + b] = tokens[b][s + 1] (either may be null); fails on an id outside the vocabulary.
    void lay_out_inputs(const int32_t* tokens, int32_t* ids, int32_t* targets) const;
    /// Mean loss of a micro-batch without dropout or gradients (whole model on this rank).
    double evaluate(const int32_t* tokens);
    /// The logits of a micro-batch without dropout or gradients (whole model on one process, tensor
    /// parallel size 1): tokens (B, S+1) as evaluate() reads them; returns (B, S, V) row-major, V the
    /// padded vocabulary, on the host. For checks against other implementations and generation.
    std::vector<float> forward_logits(const int32_t* tokens);

    /// Activation bytes held at the end of the last forward (what is kept for backward: the quantity
    /// Korthikanti et al. 2022 count, plus other micro-batches still in flight), as tracked.
    int64_t stored_activation_bytes() const { return stored_activation_bytes_; }

private:
    struct MicroState {
        std::vector<LayerActivations> acts;  // per layer of the chunk
        Buffer ids, targets;                 // (N) in (s, b) row order, when the model uploaded them
        TensorView ids_view, targets_view;   // the ids and targets used: those buffers or MicroBatch::inputs
        Buffer grad;                         // head chunk: gradient of the final norm's input, (R, H)
        uint64_t seed = 0, stream_base = 0;
        TensorView step;  // MicroBatch::step and global_micro_batch
        int64_t global_micro_batch = 0;
    };

    void build(int64_t arena_shards, bool gradients, DType grad_dtype);
    void build_rope_tables();
    ModelRuntime runtime(const MicroState& st, bool training);
    void prepare_inputs(MicroState& st, const MicroBatch& mb, bool ids, bool targets);
    void embed(ModelRuntime& rt, const MicroState& st, Buffer& x0);
    void embed_backward(ModelRuntime& rt, const MicroState& st, const TensorView& d);
    /// Final norm, logits and loss (written to `loss`, F64 (1) on the device, or added to it with
    /// `accumulate`); with d non-empty also their backward (d receives dL/d final_input).
    /// The loss gradient's scale is `grad_scale`, or with a step block (st.step) its GradScale.
    /// `lnf`: the final norm of final_input, computed here when empty (else by the last layer's fused
    /// output residual); the caller frees it after.
    void head(ModelRuntime& rt, const MicroState& st, const Buffer& final_input, NormActivations& lnf, float grad_scale,
              const TensorView& d, const TensorView& loss, bool accumulate);
    /// `next`: the norm that reads the layer's output next on this rank (TransformerLayer::forward).
    void forward_layer(ModelRuntime& rt, int64_t global_layer, LayerActivations& a, Buffer& out, bool keep,
                       const NextNorm& next = {});
    /// The input norm of layer `global_layer` (held here) as the previous layer's NextNorm, into a.ln1.
    NextNorm input_norm(int64_t global_layer, LayerActivations& a);
    /// The final norm as the last layer's NextNorm, into lnf.
    NextNorm final_norm(NormActivations& lnf);
    TensorView final_norm_bias(const TensorView& arena) const;
    std::size_t layer_slot(int64_t global_layer) const;

    GptDims d_;
    ModelPartition partition_;
    std::unique_ptr<SelfCommunicator> self_tp_, self_sp_;
    std::unique_ptr<TensorParallel> own_tp_;
    TensorParallel& tp_;
    RecomputePolicy recompute_;
    DType storage_;
    OpContext& ctx_;
    Allocator& alloc_;
    int64_t local_rows_ = 0, vocab_local_ = 0, vocab_start_ = 0;
    ParamLayout layout_;
    Buffer params_, grads_;
    Buffer attention_workspace_;
    Buffer rope_cos_, rope_sin_;      // (S, R/2) with RoPE, at the storage precision
    std::vector<int64_t> layer_ids_;  // global index of each layer this rank holds, in chunk order
    std::vector<TransformerLayer> layers_;
    std::vector<LayerParams> w_, g_;
    std::size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0, out_w_ = 0;
    std::map<std::pair<int, int64_t>, MicroState> states_;
    int64_t stored_activation_bytes_ = 0;
    std::unique_ptr<HostStaging> staging_;  // on a GPU: the ids' pinned host buffers
};

}  // namespace mwb
