#pragma once
// Dropout multipliers (0 or 1/(1-p)) for a run of consecutive global element indices, drawn from
// Philox four at a time. Shared by the dropout ops and attention.
#include "mwb/kernels/philox.h"

#include <cstdint>

namespace mwb::cpu {

struct DropoutDraw {
    RngStream rng;
    uint32_t threshold;  ///< keep when draw < threshold
    float scale;         ///< 1/(1-p)

    DropoutDraw(RngStream r, float p)
        : rng(r), threshold(dropout_keep_threshold(p)), scale(p < 1.0f ? 1.0f / (1.0f - p) : 0.0f) {}

    /// out[k] = multiplier of global element first + k, for k < count.
    void multipliers(uint64_t first, int64_t count, float* out) const {
        int64_t k = 0;
        for (; k < count && ((first + static_cast<uint64_t>(k)) & 3u) != 0; ++k)
            out[k] = dropout_keep(rng, first + static_cast<uint64_t>(k), threshold) ? scale : 0.0f;
        const uint64_t group0 = (first + static_cast<uint64_t>(k)) >> 2;
        const int64_t groups = (count - k) / 4;
        float* o = out + k;
#pragma omp simd
        for (int64_t g = 0; g < groups; ++g) {
            const Philox4 d = philox_draw(rng, group0 + static_cast<uint64_t>(g));
            o[4 * g + 0] = d.v[0] < threshold ? scale : 0.0f;
            o[4 * g + 1] = d.v[1] < threshold ? scale : 0.0f;
            o[4 * g + 2] = d.v[2] < threshold ? scale : 0.0f;
            o[4 * g + 3] = d.v[3] < threshold ? scale : 0.0f;
        }
        for (k += groups * 4; k < count; ++k)
            out[k] = dropout_keep(rng, first + static_cast<uint64_t>(k), threshold) ? scale : 0.0f;
    }
};

}  // namespace mwb::cpu
