#pragma once
// FLOP counts with one definition used everywhere (trainer, planner, app).
//
// Model FLOPs per iteration follow Narayanan et al. 2021 (eq. 3) without the recompute term: every
// GEMM of forward + backward (backward = 2× forward), attention scores and context counted over the
// full s×s matrix:
//     F_model = 3 · T · [ L·(8h² + 4h·f + 4s·h) + 2h·V ]      (T = tokens per iteration)
// which with f = 4h is 72·T·L·h²·(1 + s/(6h) + V/(12·L·h)). Hardware FLOPs add the recomputed
// forward work: full recompute adds one forward of every layer (giving Narayanan's 96·... variant),
// selective adds the attention core (4·s·h per token and layer).
#include "config/config.h"

#include <cstdint>

namespace mwb {

struct FlopCounts {
    double model = 0;     ///< per iteration, no recomputation counted (the basis of MFU)
    double hardware = 0;  ///< per iteration, including recomputation
};

FlopCounts flops_per_iteration(const Config& resolved);

}  // namespace mwb
