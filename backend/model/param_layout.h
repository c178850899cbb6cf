#pragma once
// Names, shapes and offsets of every parameter this rank holds inside one contiguous arena
// (parameters, gradients, master weights and Adam moments all share this layout), so whole-model
// operations (zeroing, norms, all-reduce, optimizer steps, checkpoints) work on one buffer. Each entry
// also says which slice of the global tensor it is, so checkpoints can be resharded and a shard
// initialises exactly as the corresponding part of the whole tensor.
#include "mwb/kernels/tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mwb {

struct ParamInfo {
    std::string name;                   ///< Megatron-core name, e.g. decoder.layers.0.self_attention.linear_qkv.weight
    std::vector<int64_t> shape;         ///< this rank's slice: (out, in) for weights, (n) for biases and norms
    std::vector<int64_t> global_shape;  ///< the whole tensor
    int split_dim = -1;                 ///< dimension split over tensor-parallel ranks (-1: replicated)
    int64_t split_begin = 0;            ///< where this slice starts along split_dim
    int64_t offset = 0;                 ///< elements from the start of the arena (a multiple of kParamAlignment)
    int64_t numel = 0;
    bool weight_decay = true;           ///< false for biases and norm weights
    /// Replicated over tensor-parallel ranks but computed from this rank's sequence positions only
    /// (norms and position embeddings under sequence parallelism): gradients are all-reduced over TP.
    bool sequence_parallel_grad = false;
    /// The last pipeline stage's copy of the tied word embedding (pipeline > 1): its gradient is
    /// summed with the first stage's, and it is counted once in norms and checkpoints.
    bool tied_copy = false;
};

class ParamLayout {
public:
    /// Tensors start at multiples of this many elements (64 bytes), so every tensor is aligned.
    static constexpr int64_t kParamAlignment = 16;

    /// A replicated tensor (the same on every tensor-parallel rank).
    std::size_t add(std::string name, std::vector<int64_t> shape, bool weight_decay);
    /// Rank r's 1/t slice of a tensor split along `dim` (0 for column-parallel weights and vocabulary
    /// shards, 1 for row-parallel weights).
    std::size_t add_split(std::string name, std::vector<int64_t> global_shape, int dim, int t, int r, bool weight_decay);
    void mark_sequence_parallel(std::size_t i, bool on) { params_[i].sequence_parallel_grad = on; }
    void mark_tied_copy(std::size_t i) { params_[i].tied_copy = true; }
    /// Pads the arena to a multiple of `k` aligned blocks, so that it splits into k equal, aligned
    /// shards (the distributed optimizer's).
    void pad_to_shards(int64_t k) { total_ = (total_ + k * kParamAlignment - 1) / (k * kParamAlignment) * (k * kParamAlignment); }

    const ParamInfo& operator[](std::size_t i) const { return params_[i]; }
    std::size_t size() const { return params_.size(); }
    auto begin() const { return params_.begin(); }
    auto end() const { return params_.end(); }
    /// Elements of the arena (including alignment padding, which stays zero).
    int64_t arena_elements() const { return total_; }
    /// Elements of the parameters themselves (no padding).
    int64_t parameter_count() const;
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
