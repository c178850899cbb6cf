#pragma once
// Weight initialisation from the counter-based RNG: element i of a tensor is a pure function of
// (seed, tensor name, i), so a tensor initialises the same whatever else the model holds, and a
// shard of it draws exactly the values of its part of the whole tensor.
#include "backend/model/param_layout.h"
#include "mwb/kernels/tensor.h"

#include <cstdint>
#include <string_view>

namespace mwb {

/// Stream id of a named tensor (FNV-1a of the name, mixed).
uint64_t tensor_stream(std::string_view name);
/// out[i] = std · z(seed, stream, first_index + i), z standard normal (Box–Muller on Philox draws).
void normal_init(const TensorView& out, uint64_t seed, uint64_t stream, float std, int64_t first_index = 0);
/// N(0, std) into this rank's slice `local` of the parameter `p`, indexed as in the global tensor.
void normal_init_slice(const TensorView& local, const ParamInfo& p, uint64_t seed, float std);

}  // namespace mwb
