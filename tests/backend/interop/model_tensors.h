#pragma once
// A whole model's parameters as named whole tensors, both ways, for the Hugging Face mapping suites.
#include "backend/interop/hf_common.h"
#include "backend/model/gpt_model.h"

#include <QtTest>

#include <algorithm>

namespace mwb::test {

/// Fills every parameter of `model` with from_hf(name, global_shape) (a NamedTensor of its values).
template <typename FromHf>
void fill_params(GptModel& model, FromHf&& from_hf) {
    const ParamLayout& layout = model.layout();
    for (std::size_t i = 0; i < layout.size(); ++i) {
        const interop::NamedTensor t = from_hf(layout[i].name, layout[i].global_shape);
        const TensorView v = layout.view(model.params(), i);
        QCOMPARE(static_cast<int64_t>(t.values.size()), v.numel());
        std::copy(t.values.begin(), t.values.end(), v.f32());
    }
}

/// Every parameter of `model` as a whole tensor with its Megatron-core name.
inline std::vector<interop::NamedTensor> params_of(GptModel& model) {
    const ParamLayout& layout = model.layout();
    std::vector<interop::NamedTensor> out;
    for (std::size_t i = 0; i < layout.size(); ++i) {
        const TensorView v = layout.view(model.params(), i);
        out.push_back({layout[i].name, layout[i].global_shape, std::vector<float>(v.f32(), v.f32() + v.numel())});
    }
    return out;
}

}  // namespace mwb::test
