#include "model/param_layout.h"

#include "mwb/kernels/error.h"

namespace mwb {

std::size_t ParamLayout::add(std::string name, std::vector<int64_t> shape, bool weight_decay) {
    MWB_CHECK(!shape.empty() && shape.size() <= 2, "parameter {} must be 1-D or 2-D", name);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    ParamInfo p{std::move(name), std::move(shape), total_, n, weight_decay};
    total_ += (n + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
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

TensorView ParamLayout::view(const TensorView& arena, std::size_t i) const {
    const ParamInfo& p = params_[i];
    MWB_CHECK(arena.numel() >= total_, "arena {} is smaller than the layout ({} elements)", arena.describe(), total_);
    float* base = static_cast<float*>(arena.data) + p.offset;
    return p.shape.size() == 1 ? make_view(base, arena.dtype, {p.shape[0]}, arena.device)
                               : make_view(base, arena.dtype, {p.shape[0], p.shape[1]}, arena.device);
}

}  // namespace mwb
