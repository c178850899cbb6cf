#include "backend/interop/hf_common.h"

#include "mwb/kernels/error.h"

namespace mwb::interop {

const StTensor& hf_tensor(const SafetensorsModel& hf, const std::string& name, const std::vector<int64_t>& shape,
                          const char* architecture) {
    const StTensor& t = hf.get(name);
    MWB_CHECK(t.shape == shape, "{}: tensor '{}' has shape [{}], {}'s config needs [{}]",
              hf.file_of(t.name).path().string(), t.name, fmt::join(t.shape, ", "), architecture,
              fmt::join(shape, ", "));
    return t;
}

std::vector<float> hf_values(const SafetensorsModel& hf, const StTensor& t) {
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    hf.file_of(t.name).read_f32(t, v);
    return v;
}

int64_t positive_integer(const nlohmann::json& j, const char* key, const std::string& origin) {
    MWB_CHECK(j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() > 0,
              "{}: \"{}\" must be a positive integer", origin, key);
    return j[key].get<int64_t>();
}

LayerName split_layer(const std::string& name) {
    const std::string p = "decoder.layers.";
    if (!name.starts_with(p)) return {};
    const std::size_t dot = name.find('.', p.size());
    if (dot == std::string::npos || dot == p.size()) return {};
    int64_t layer = 0;
    for (std::size_t i = p.size(); i < dot; ++i) {
        if (name[i] < '0' || name[i] > '9') return {};
        layer = layer * 10 + (name[i] - '0');
    }
    return {layer, name.substr(dot + 1)};
}

std::vector<float> transposed(const std::vector<float>& a, int64_t rows, int64_t cols) {
    std::vector<float> out(a.size());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = a[r * cols + c];
    return out;
}

}  // namespace mwb::interop
