#pragma once
// Scalar math written so that GCC vectorises it inside `#pragma omp simd` loops (no libm calls,
// no branches): exp accurate to a few ulp, enough for softmax, GELU and cross-entropy.
//
// Loops that call exp_approx ask for 16 lanes (`simdlen(16)`): GCC's default tuning stops at 256-bit
// vectors, and exp_approx is compute-bound, so AVX-512 runs it ~1.5x faster; without AVX-512 the
// compiler uses two 256-bit (or four 128-bit) vectors instead, which is no slower.
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

/// max(x[0], …, x[n-1]) for n >= 1, vectorised. `std::max` in an `omp simd reduction(max)` loop
/// compiles to a scalar chain with GCC 12; this select form becomes vmaxps. Like std::max, a NaN in
/// x[0] is kept and a NaN elsewhere is skipped (the exp of a NaN row still turns its sum into NaN).
inline float max_of(const float* x, int64_t n) {
    float mx = x[0];
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
    return mx;
}

}  // namespace mwb::cpu
