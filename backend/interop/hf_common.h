#pragma once
// What the Hugging Face architecture mappings (hf_gpt2, hf_llama) share: whole tensors by name, reading
// a checked HF tensor as float32, and Megatron-core layer names.
#include "backend/interop/safetensors.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mwb::interop {

/// A whole tensor by its name (Megatron-core's or Hugging Face's).
struct NamedTensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;
};

/// HF tensor `name` with the shape the config implies; an error names the file, the tensor, both shapes
/// and `architecture`.
const StTensor& hf_tensor(const SafetensorsModel& hf, const std::string& name, const std::vector<int64_t>& shape,
                          const char* architecture);
/// Its values as float32.
std::vector<float> hf_values(const SafetensorsModel& hf, const StTensor& t);

/// config.json's `key` as a positive integer; an error names `origin` and the key.
int64_t positive_integer(const nlohmann::json& config, const char* key, const std::string& origin);

/// "decoder.layers.3.mlp.linear_fc1.weight" -> {3, "mlp.linear_fc1.weight"}; layer -1 outside the layers.
struct LayerName {
    int64_t layer = -1;
    std::string rest;
};
LayerName split_layer(const std::string& megatron_name);

/// (rows, cols) -> (cols, rows)
std::vector<float> transposed(const std::vector<float>& a, int64_t rows, int64_t cols);

}  // namespace mwb::interop
