#pragma once
// Names, shapes and offsets of every parameter inside one contiguous arena (parameters, gradients,
// master weights and Adam moments all share this layout), so whole-model operations (zeroing,
// norms, all-reduce, optimizer steps, checkpoints) work on one buffer.
#include "mwb/kernels/tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mwb {

struct ParamInfo {
    std::string name;             ///< Megatron-core name, e.g. decoder.layers.0.self_attention.linear_qkv.weight
    std::vector<int64_t> shape;   ///< (out, in) for weights, (n) for biases and norms
    int64_t offset = 0;           ///< elements from the start of the arena (a multiple of kParamAlignment)
    int64_t numel = 0;
    bool weight_decay = true;     ///< false for biases and norm weights
};

class ParamLayout {
public:
    /// Tensors start at multiples of this many elements (64 bytes), so every tensor is aligned.
    static constexpr int64_t kParamAlignment = 16;

    std::size_t add(std::string name, std::vector<int64_t> shape, bool weight_decay);
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
    /// The parameter `i` as a shaped view into `arena`.
    TensorView view(const TensorView& arena, std::size_t i) const;

private:
    std::vector<ParamInfo> params_;
    int64_t total_ = 0;
};

}  // namespace mwb
