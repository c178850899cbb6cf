#include "backend/model/param_layout.h"

#include "mwb/kernels/error.h"

namespace mwb {

bool role_decays(ParamRole role) {
    return !role_is_bias(role) && role != ParamRole::NormWeight && role != ParamRole::NormBias;
}

bool role_is_bias(ParamRole role) {
    switch (role) {
        case ParamRole::NormBias:
        case ParamRole::QkvBias:
        case ParamRole::ProjBias:
        case ParamRole::Fc1Bias:
        case ParamRole::Fc2Bias:
            return true;
        default:
            return false;
    }
}

bool role_is_output_projection(ParamRole role) {
    return role == ParamRole::ProjWeight || role == ParamRole::Fc2Weight;
}

bool role_is_vocabulary(ParamRole role) {
    return role == ParamRole::WordEmbedding || role == ParamRole::OutputWeight;
}

std::size_t ParamLayout::add(std::string name, ParamRole role, std::vector<int64_t> shape) {
    return add_split(std::move(name), role, std::move(shape), -1, 1, 0);
}

std::size_t ParamLayout::add_split(std::string name, ParamRole role, std::vector<int64_t> global_shape, int dim, int t,
                                   int r, int blocks) {
    MWB_CHECK(!global_shape.empty() && global_shape.size() <= 2, "parameter {} must be 1-D or 2-D", name);
    ParamInfo p;
    p.name = std::move(name);
    p.role = role;
    p.global_shape = global_shape;
    p.shape = global_shape;
    p.weight_decay = role_decays(role);
    if (dim >= 0 && t > 1) {
        MWB_CHECK(dim < static_cast<int>(global_shape.size()) && blocks >= 1 && global_shape[dim] % (t * blocks) == 0,
                  "parameter {}: dimension {} of size {} does not split into {} blocks over {} ranks", p.name, dim,
                  global_shape[dim], blocks, t);
        p.split_dim = dim;
        p.split_blocks = blocks;
        p.shape[dim] = global_shape[dim] / t;
        p.split_begin = r * (global_shape[dim] / (t * blocks));
    }
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= d;
    p.offset = total_;
    total_ += arena_footprint(p.numel);
    params_.push_back(std::move(p));
    return params_.size() - 1;
}

int64_t ParamLayout::parameter_count() const {
    int64_t n = 0;
    for (const auto& p : params_) n += p.numel;
    return n;
}

std::vector<std::pair<int64_t, int64_t>> ParamLayout::slice_blocks(std::size_t i) const {
    const ParamInfo& p = params_[i];
    if (p.split_dim < 0) return {{0, p.global_shape[0]}};  // unsplit: one block, the whole dimension 0
    const int64_t block = p.global_shape[p.split_dim] / p.split_blocks, len = p.shape[p.split_dim] / p.split_blocks;
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int k = 0; k < p.split_blocks; ++k) out.emplace_back(k * block + p.split_begin, len);
    return out;
}

std::size_t ParamLayout::index_of(const std::string& name) const {
    for (std::size_t i = 0; i < params_.size(); ++i)
        if (params_[i].name == name) return i;
    MWB_FAIL("no parameter named {}", name);
}

bool ParamLayout::contains(const std::string& name) const {
    for (const auto& p : params_)
        if (p.name == name) return true;
    return false;
}

TensorView ParamLayout::view(const TensorView& arena, std::size_t i) const {
    const ParamInfo& p = params_[i];
    MWB_CHECK(arena.numel() >= total_, "arena {} is smaller than the layout ({} elements)", arena.describe(), total_);
    // The arena may be 16-bit (the weights' working copy in bf16/fp16 runs): offsets are in elements.
    void* base = static_cast<char*>(arena.data) + p.offset * static_cast<int64_t>(dtype_size(arena.dtype));
    return p.shape.size() == 1 ? make_view(base, arena.dtype, {p.shape[0]}, arena.device)
                               : make_view(base, arena.dtype, {p.shape[0], p.shape[1]}, arena.device);
}

}  // namespace mwb
