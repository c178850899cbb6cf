#pragma once
// Rotary position embedding tables (Su et al. 2021): the angle of frequency i at position p is
// p·f_i with f_i = base^(-2i/R), optionally rescaled as Llama 3.1 does (docs/architecture.md).
#include "backend/model/gpt_dims.h"

#include <vector>

namespace mwb {

/// The R/2 frequencies f_i in float64, Llama 3.1-scaled when dims.rope_scaling.
std::vector<double> rotary_frequencies(const GptDims& dims);
/// cos and sin (positions, R/2) of p·f_i, computed in float64 and rounded once to float.
void rotary_tables(const GptDims& dims, int64_t positions, float* cos, float* sin);

}  // namespace mwb
