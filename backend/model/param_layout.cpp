#include "model/param_layout.h"

#include "mwb/kernels/error.h"

namespace mwb {

std::size_t ParamLayout::add(std::string name, std::vector<int64_t> shape, bool weight_decay) {
    return add_split(std::move(name), std::move(shape), -1, 1, 0, weight_decay);
}

std::size_t ParamLayout::add_split(std::string name, std::vector<int64_t> global_shape, int dim, int t, int r,
                                   bool weight_decay) {
    MWB_CHECK(!global_shape.empty() && global_shape.size() <= 2, "parameter {} must be 1-D or 2-D", name);
    ParamInfo p;
    p.name = std::move(name);
    p.global_shape = global_shape;
    p.shape = global_shape;
    p.weight_decay = weight_decay;
    if (dim >= 0 && t > 1) {
        MWB_CHECK(dim < static_cast<int>(global_shape.size()) && global_shape[dim] % t == 0,
                  "parameter {}: dimension {} of size {} does not split over {} ranks", p.name, dim, global_shape[dim], t);
        p.split_dim = dim;
        p.shape[dim] = global_shape[dim] / t;
        p.split_begin = r * p.shape[dim];
    }
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= d;
    p.offset = total_;
    total_ += (p.numel + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
    params_.push_back(std::move(p));
    return params_.size() - 1;
}

int64_t ParamLayout::parameter_count() const {
    int64_t n = 0;
    for (const auto& p : params_) n += p.numel;
    return n;
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
    float* base = static_cast<float*>(arena.data) + p.offset;
    return p.shape.size() == 1 ? make_view(base, arena.dtype, {p.shape[0]}, arena.device)
                               : make_view(base, arena.dtype, {p.shape[0], p.shape[1]}, arena.device);
}

}  // namespace mwb
