#pragma once
// Names, shapes and offsets of every parameter this rank holds inside one contiguous arena
// (parameters, gradients, master weights and Adam moments all share this layout), so whole-model
// operations (zeroing, norms, all-reduce, optimizer steps, checkpoints) work on one buffer. Each entry
// also says which slice of the global tensor it is, so checkpoints can be resharded and a shard
// initialises exactly as the corresponding part of the whole tensor.
#include "backend/core/arena_alignment.h"
#include "mwb/kernels/tensor.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mwb {

/// What a parameter is. Init, weight decay, the tied-embedding reduction and checkpoint padding read
/// this, never the name string.
enum class ParamRole : uint8_t {
    WordEmbedding,      ///< (V, H), vocabulary-parallel; also the output layer when tied
    PositionEmbedding,  ///< (P, H) learned absolute positions
    NormWeight,
    NormBias,
    QkvWeight,  ///< (G·(A/G + 2)·D, H), column-parallel by whole key/value groups
    QkvBias,
    ProjWeight,  ///< (H, A·D), row-parallel: the attention's output projection
    ProjBias,
    Fc1Weight,  ///< (F, H), or (2F, H) = [gate | up] with SwiGLU; column-parallel
    Fc1Bias,
    Fc2Weight,  ///< (H, F), row-parallel: the MLP's output projection
    Fc2Bias,
    OutputWeight,  ///< (V, H) untied output layer, vocabulary-parallel
};

/// Megatron-LM's rule: biases and norm parameters are not decayed, everything else is.
bool role_decays(ParamRole role);
/// Biases (initialised to zero).
bool role_is_bias(ParamRole role);
/// The two projections into the residual stream (initialised with std/sqrt(2L)).
bool role_is_output_projection(ParamRole role);
/// Tensors whose dimension 0 is the padded vocabulary.
bool role_is_vocabulary(ParamRole role);

struct ParamInfo {
    std::string name;                   ///< Megatron-core name, e.g. decoder.layers.0.self_attention.linear_qkv.weight
    std::vector<int64_t> shape;         ///< this rank's slice: (out, in) for weights, (n) for biases and norms
    std::vector<int64_t> global_shape;  ///< the whole tensor
    ParamRole role = ParamRole::NormWeight;
    int split_dim = -1;  ///< dimension split over tensor-parallel ranks (-1: replicated)
    /// split_dim of the global tensor is `split_blocks` equal blocks, each split over the tensor-parallel
    /// ranks; this rank's slice is its part of every block, concatenated (SwiGLU's fc1: [gate | up], so
    /// each rank holds its own gate and up rows). 1: one contiguous slice.
    int split_blocks = 1;
    int64_t split_begin = 0;  ///< where this slice starts along split_dim (in every block)
    int64_t offset = 0;       ///< elements from the start of the arena (a multiple of kArenaAlignment)
    int64_t numel = 0;
    bool weight_decay = true;  ///< role_decays(role)
    /// Replicated over tensor-parallel ranks but computed from this rank's sequence positions only
    /// (norms and position embeddings under sequence parallelism): gradients are all-reduced over TP.
    bool sequence_parallel_grad = false;
    /// The last pipeline stage's copy of the tied word embedding (pipeline > 1): its gradient is
    /// summed with the first stage's, and it is counted once in norms and checkpoints.
    bool tied_copy = false;
};

class ParamLayout {
public:
    /// A replicated tensor (the same on every tensor-parallel rank).
    std::size_t add(std::string name, ParamRole role, std::vector<int64_t> shape);
    /// Rank r's 1/t slice of a tensor split along `dim` (0 for column-parallel weights and vocabulary
    /// shards, 1 for row-parallel weights); with `blocks` > 1 its 1/t slice of each of that many equal
    /// blocks along `dim`.
    std::size_t add_split(std::string name, ParamRole role, std::vector<int64_t> global_shape, int dim, int t, int r,
                          int blocks = 1);
    void mark_sequence_parallel(std::size_t i, bool on) { params_[i].sequence_parallel_grad = on; }
    void mark_tied_copy(std::size_t i) { params_[i].tied_copy = true; }
    /// Pads the arena to a multiple of `k` aligned blocks, so that it splits into k equal, aligned
    /// shards (the distributed optimizer's).
    void pad_to_shards(int64_t k) { total_ = arena_padded_to_shards(total_, k); }

    const ParamInfo& operator[](std::size_t i) const { return params_[i]; }
    std::size_t size() const { return params_.size(); }
    auto begin() const { return params_.begin(); }
    auto end() const { return params_.end(); }
    /// Elements of the arena (including alignment padding, which stays zero).
    int64_t arena_elements() const { return total_; }
    /// Elements of the parameters themselves (no padding).
    int64_t parameter_count() const;
    /// (begin, length) along split_dim of the global tensor of each block of parameter i's slice, in the
    /// order the slice holds them (one entry unless split_blocks > 1).
    std::vector<std::pair<int64_t, int64_t>> slice_blocks(std::size_t i) const;
    /// Index of the named parameter; throws mwb::Error naming it when absent.
    std::size_t index_of(const std::string& name) const;
    bool contains(const std::string& name) const;
    /// The parameter `i` as a shaped view into `arena`.
    TensorView view(const TensorView& arena, std::size_t i) const;

private:
    std::vector<ParamInfo> params_;
    int64_t total_ = 0;
};

}  // namespace mwb
