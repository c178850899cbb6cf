#pragma once
// The model's forward pass for generation, on the CPU or one GPU: tokens go through the same weights and ops as
// training (norms, GELU/SwiGLU, RoPE kernels), with a key/value cache so that each new token costs one
// pass over the weights instead of a pass over the whole sequence.
//   K, V cache per layer: (batch, G, max_len, D) contiguous; row b's token at position p sits at [b][g][p].
// Rows are independent sequences with their own lengths (no padding): a prompt is prefilled into its
// row alone, decode steps advance any set of rows by one token each at their own position. Learned
// positions add wpe[p]; RoPE rotates q and k with the angles of position p before k enters the cache.
// On the CPU, linear layers split their output rows over the threads, each thread one single-threaded
// sgemv (one token) or sgemm (several) over its contiguous slice of the weight: decode at batch 1 reads
// every weight once per token, which is the memory-bandwidth bound docs/performance.md measures against.
// A decode step (a few rows, whose small ops run on one thread) keeps its threads in one parallel region
// from the first layer to the logits (a StepTeam): they split each linear layer's rows and the attention's
// key/value groups, the first thread runs the small ops, and they meet between dependent ops.
// On CUDA (one process) every step runs as the ops' CUDA kernels (cuBLAS for the linear layers, the
// cached-attention kernel over the cache on the device); only the logits come back to the host.
//
// A model split over ranks (tensor and/or pipeline parallel) decodes with every rank of its model
// group taking the same steps: each rank runs its own layers with its own heads, key/value groups, MLP
// columns and vocabulary rows (its cache holds only those), the row-parallel outputs and the
// vocabulary-parallel embedding are summed over the tensor-parallel group, the residual stream passes
// from stage to stage (virtual stages in Megatron-LM's interleaved order), and the last stage's logit
// shards are gathered over tensor-parallel ranks and broadcast to every stage. So every rank receives
// the same whole logits, and a sampler run on each of them chooses the same tokens.
#include "backend/core/memory.h"
#include "backend/generate/step_team.h"
#include "backend/model/gpt_dims.h"
#include "backend/model/param_layout.h"
#include "backend/model/transformer_layer.h"

#include <cstdint>
#include <span>
#include <vector>

namespace mwb {
class Communicator;
}

namespace mwb::generate {

/// The host groups of a model split over ranks (ParallelContext's host_tp and host_pp); nullptr: one rank.
struct DecoderGroups {
    Communicator* tp = nullptr;  ///< this rank's tensor-parallel ranks
    Communicator* pp = nullptr;  ///< the pipeline stages of this rank's (tp, dp) column
};

class Decoder {
public:
    /// d: the whole model (tensor-parallel size 1); layout/params: its parameters (GptModel's arena, host
    /// fp32); max_batch rows of at most max_len tokens each (max_len <= max_positions with learned
    /// positions). On Device::CUDA the weights are copied to the current GPU once, the cache and every
    /// activation live there, and only the logits come back.
    Decoder(const GptDims& d, const ParamLayout& layout, const TensorView& params, int64_t max_batch, int64_t max_len,
            Device device = Device::CPU);
    /// This rank's part of a split model: d the whole model's sizes, `partition` the layers this
    /// pipeline stage holds, layout/params its tensor-parallel slice (GptModel's). prefill() and
    /// decode() are then collective over both groups: every rank calls them with the same arguments.
    Decoder(const GptDims& d, const ModelPartition& partition, const ParamLayout& layout, const TensorView& params,
            DecoderGroups groups, int64_t max_batch, int64_t max_len, Device device = Device::CPU);

    const GptDims& dims() const { return d_; }
    Device device() const { return op_.device; }
    int64_t max_len() const { return max_len_; }
    /// Tokens row b holds in the cache.
    int64_t length(int64_t row) const { return lengths_[static_cast<std::size_t>(row)]; }
    /// Empties row b.
    void reset(int64_t row) { lengths_[static_cast<std::size_t>(row)] = 0; }

    /// Appends `tokens` to row b and writes the logits (V) after its last token to `logits` (host memory).
    void prefill(int64_t row, std::span<const int32_t> tokens, float* logits);
    /// Appends tokens[i] to rows[i] (distinct rows) and writes their logits to logits (n, V; host memory).
    void decode(std::span<const int64_t> rows, std::span<const int32_t> tokens, float* logits);

    /// How a CPU decode step of one process uses its threads: one parallel region for the whole step
    /// (Team) or one per linear layer (Regions); Auto: Team when the machine has a CPU for each thread
    /// (StepTeam::cpus_free_for). The logits are the same either way.
    enum class StepThreads { Auto, Team, Regions };
    void set_step_threads(StepThreads s) { step_threads_ = s; }

    /// Bytes of weights one forward step reads on this rank (every matrix and vector once, the
    /// embedding rows not).
    int64_t weight_bytes_per_step() const;

private:
    struct Entry {
        int64_t row, pos;
    };
    using Member = TeamMember;
    /// The forward of n tokens (entries[i] of token ids[i]); logits for the entries in logit_rows.
    void forward(std::span<const Entry> entries, std::span<const int32_t> ids, std::span<const int64_t> logit_rows,
                 float* logits);
    void norm(float* out, const float* in, const TensorView& w, const TensorView& b, int64_t rows);
    void embed(std::span<const Entry> entries, std::span<const int32_t> ids, float* x);
    void layer(std::span<const Entry> entries, int64_t slot, const Member& m = {});
    /// RoPE and attention over the cache of layer `slot` for qkv_ into ctx_ (a team: each thread its groups).
    void attention(std::span<const Entry> entries, int64_t slot, const Member& m);
    void head(std::span<const int64_t> logit_rows, float* logits, const Member& member = {});
    /// y (n, out) = x (n, in)·wᵀ + b on the decoder's device (CPU: over linear_threads_ threads; in a
    /// team, this thread's rows, then the team meets).
    void linear(float* y, const float* x, int64_t n, const TensorView& w, const TensorView& b, const Member& m = {});
    /// y = x·wᵀ of a row-parallel weight, summed over the tensor-parallel ranks, plus b.
    void row_parallel(float* y, const float* x, int64_t n, const TensorView& w, const TensorView& b,
                      const Member& m = {});
    /// The entries' token ids, cache rows and positions as I32 tensors (copied to the device on CUDA).
    void stage_indices(std::span<const Entry> entries, std::span<const int32_t> ids);
    TensorView on_device(float* p, std::initializer_list<int64_t> shape) const;
    void ensure_scratch(int64_t n);

    GptDims d_;
    ModelPartition partition_;
    DecoderGroups groups_;
    int tp_size_ = 1, pp_size_ = 1, pp_rank_ = 0;
    // This rank's share: A/t query heads, G/t key/value groups, F/t MLP columns, V/t vocabulary rows.
    int64_t heads_ = 0, kv_groups_ = 0, qkv_rows_ = 0, ffn_ = 0, fc1_rows_ = 0, vocab_rows_ = 0, vocab_begin_ = 0;
    mutable OpContext op_;
    Allocator alloc_;  // of op_.device: weights (CUDA), cache, scratch
    int64_t max_batch_, max_len_;
    int linear_threads_ = 1;  // CPU threads of this step's linear layers
    StepThreads step_threads_ = StepThreads::Auto;
    Buffer device_weights_;               // CUDA: a copy of the parameter arena
    std::vector<LayerParams> w_;          // this rank's layers in chunk order
    std::vector<std::size_t> chunk_end_;  // w_ index past each chunk's last layer
    TensorView wte_, wpe_, lnf_w_, lnf_b_, out_w_;
    Buffer rope_cos_, rope_sin_;  // (max_len, R/2)
    Buffer k_cache_, v_cache_;    // per layer (batch, G, max_len, D)
    std::vector<int64_t> lengths_;
    // Token ids, cache rows and positions of a forward: host values, and their device copies on CUDA.
    std::vector<int32_t> ids_, rows_, positions_;
    Buffer ids_dev_, rows_dev_, positions_dev_;
    // Scratch for n tokens, grown on demand.
    int64_t scratch_rows_ = 0;
    Buffer x_, x2_, ln_, mean_, rstd_, qkv_, ctx_, branch_, fc1_, act_, logits_;
    std::vector<float> local_logits_, shards_;  // tensor parallel: this rank's (m, V/t), all ranks' (t, m, V/t)
};

}  // namespace mwb::generate
