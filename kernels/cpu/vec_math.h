#pragma once
// Scalar math written so that GCC vectorises it inside `#pragma omp simd` loops (no libm calls,
// no branches): exp accurate to a few ulp, enough for softmax, GELU and cross-entropy.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace mwb::cpu {

/// e^x for float x; 0 below -87.3 (also for -inf), +inf above 88.72 (where float overflows), NaN
/// propagates. Cephes-style: x = n·ln2 + r, degree-6 polynomial for e^r, 2^n assembled in the
/// exponent bits.
inline float exp_approx(float x) {
    const float underflow = x < -87.3f ? 0.0f : 1.0f;
    const float overflow = x > 88.72283f ? std::numeric_limits<float>::infinity() : 1.0f;
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.3f ? 88.3f : x;
    const float n = std::nearbyint(x * 1.44269504088896341f);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    return p * std::bit_cast<float>(bits) * underflow * overflow;
}

}  // namespace mwb::cpu
