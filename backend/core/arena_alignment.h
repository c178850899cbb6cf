#pragma once
// The one rule for where tensors start in a rank's parameter arena. Parameters, gradients, fp32 master
// weights and Adam moments share the arena layout (backend/model/param_layout.h), and the planner
// predicts their bytes from the same rule (planner/src/parameters.cpp), so both read it from here.
#include <cstdint>

namespace mwb {

/// Tensors start at multiples of this many elements: 256 bytes of fp32 (128 of a 16-bit copy), the
/// widest alignment cuBLASLt's heuristic asks about, so every weight and bias that is an arena slice
/// qualifies for its vectorised kernels and fused bias epilogues (on a GPU the arena itself comes from
/// cudaMalloc, 256-byte aligned).
inline constexpr int64_t kArenaAlignment = 64;

/// Arena elements a tensor of `numel` elements occupies: rounded up to kArenaAlignment (the padding
/// stays zero).
constexpr int64_t arena_footprint(int64_t numel) {
    return (numel + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

/// An arena of `elements` padded to a multiple of `shards` aligned blocks, so that it splits into that
/// many equal, aligned shards (the distributed optimizer's); `shards` <= 1 leaves it as it is.
constexpr int64_t arena_padded_to_shards(int64_t elements, int64_t shards) {
    if (shards <= 1) return elements;
    const int64_t block = shards * kArenaAlignment;
    return (elements + block - 1) / block * block;
}

}  // namespace mwb
