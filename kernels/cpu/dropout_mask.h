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
        : rng(resolved(r)), threshold(dropout_keep_threshold(p)), scale(p < 1.0f ? 1.0f / (1.0f - p) : 0.0f) {}

    static constexpr int kLanes = 16;

    /// Philox4x32-10 on kLanes consecutive groups at once, written lane-parallel so that it
    /// vectorises (32x32->64-bit multiplies); the same values as philox_draw() group by group.
    void block(uint64_t group, float* out) const {
        uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
        for (int l = 0; l < kLanes; ++l) {
            const uint64_t ctr = group + static_cast<uint64_t>(l);
            c0[l] = static_cast<uint32_t>(ctr);
            c1[l] = static_cast<uint32_t>(ctr >> 32);
            c2[l] = static_cast<uint32_t>(rng.stream);
            c3[l] = static_cast<uint32_t>(rng.stream >> 32);
        }
        uint32_t k0 = static_cast<uint32_t>(rng.seed), k1 = static_cast<uint32_t>(rng.seed >> 32);
        for (int round = 0; round < 10; ++round) {
#pragma omp simd
            for (int l = 0; l < kLanes; ++l) {
                const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0[l];
                const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2[l];
                const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
                const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
                c1[l] = static_cast<uint32_t>(p1);
                c3[l] = static_cast<uint32_t>(p0);
                c0[l] = n0;
                c2[l] = n2;
            }
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) {
            out[4 * l + 0] = c0[l] < threshold ? scale : 0.0f;
            out[4 * l + 1] = c1[l] < threshold ? scale : 0.0f;
            out[4 * l + 2] = c2[l] < threshold ? scale : 0.0f;
            out[4 * l + 3] = c3[l] < threshold ? scale : 0.0f;
        }
    }

    /// out[k] = multiplier of global element first + k, for k < count.
    void multipliers(uint64_t first, int64_t count, float* out) const {
        int64_t k = 0;
        for (; k < count && ((first + static_cast<uint64_t>(k)) & 3u) != 0; ++k)
            out[k] = dropout_keep(rng, first + static_cast<uint64_t>(k), threshold) ? scale : 0.0f;
        const uint64_t group0 = (first + static_cast<uint64_t>(k)) >> 2;
        const int64_t groups = (count - k) / 4;
        float* o = out + k;
        int64_t g = 0;
        for (; g + kLanes <= groups; g += kLanes) block(group0 + static_cast<uint64_t>(g), o + 4 * g);
        for (; g < groups; ++g) {
            const Philox4 d = philox_draw(rng, group0 + static_cast<uint64_t>(g));
            for (int j = 0; j < 4; ++j) o[4 * g + j] = d.v[j] < threshold ? scale : 0.0f;
        }
        for (k += groups * 4; k < count; ++k)
            out[k] = dropout_keep(rng, first + static_cast<uint64_t>(k), threshold) ? scale : 0.0f;
    }
};

}  // namespace mwb::cpu
