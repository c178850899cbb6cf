#pragma once
// One row of the residual connection out = residual + dropout(x [+ bias]): bias_dropout_add_forward's
// row loop, shared with the fused residual + norm op (norm.cpp) so that both round the same sums.
#include "dropout_mask.h"
#include "storage.h"

#include <algorithm>
#include <cstdint>

namespace mwb::cpu {

/// Columns per run of dropout multipliers.
constexpr int64_t kDropoutChunk = 1024;

/// orow[c] = rrow[c] + (xrow[c] + bias[c])·mult (bias null: + xrow[c]·mult) for the `cols` elements of a
/// row whose first element has global dropout index `first`; mult = 1 when p = 0. O: storage of orow and
/// rrow (out may alias residual or x), X: of xrow. Each element rounded once into O.
template <DType O, DType X>
void residual_row(typename Storage<O>::type* orow, const typename Storage<O>::type* rrow,
                  const typename Storage<X>::type* xrow, const float* bias, int64_t cols, uint64_t first,
                  const DropoutDraw& draw, float p) {
    using SO = Storage<O>;
    using SX = Storage<X>;
    float mult[kDropoutChunk];
    for (int64_t c0 = 0; c0 < cols; c0 += kDropoutChunk) {
        const int64_t len = std::min(kDropoutChunk, cols - c0);
        if (p > 0.0f) {
            draw.multipliers(first + static_cast<uint64_t>(c0), len, mult);
        } else {
            for (int64_t k = 0; k < len; ++k) mult[k] = 1.0f;
        }
        if (bias) {
#pragma omp simd
            for (int64_t k = 0; k < len; ++k)
                orow[c0 + k] = SO::store(SO::load(rrow[c0 + k]) + (SX::load(xrow[c0 + k]) + bias[c0 + k]) * mult[k]);
        } else {
#pragma omp simd
            for (int64_t k = 0; k < len; ++k)
                orow[c0 + k] = SO::store(SO::load(rrow[c0 + k]) + SX::load(xrow[c0 + k]) * mult[k]);
        }
    }
}

}  // namespace mwb::cpu
