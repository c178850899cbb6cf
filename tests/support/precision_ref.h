#pragma once
// Independent references for 16-bit storage rounding, used to check mwb::round_to_bf16/_fp16 bit-exactly:
// fp16 through the compiler's IEEE binary16 type (GCC 12 `_Float16`, correctly rounded, nearest even),
// bf16 written from its definition (the top 16 bits of a float32, rounded to nearest even).
#include <bit>
#include <cstdint>

namespace mwb::test {

inline uint32_t bits_of(float x) {
    return std::bit_cast<uint32_t>(x);
}
inline float float_of(uint32_t b) {
    return std::bit_cast<float>(b);
}

/// float -> IEEE binary16 -> float, as the compiler converts (overflow to ±inf, subnormals kept, NaN quieted
/// with its top payload bits).
inline float fp16_ref(float x) {
    return static_cast<float>(static_cast<_Float16>(x));
}

/// float -> bfloat16 -> float from the definition: keep the top 16 bits, round the dropped 16 to nearest even
/// (a carry may ripple into the exponent, so FLT_MAX rounds to inf). NaN stays NaN: quiet bit set, sign and
/// the top payload bits kept, and, as for any bf16 value, the low 16 bits are zero.
inline float bf16_ref(float x) {
    const uint32_t b = bits_of(x);
    uint32_t hi = b >> 16;
    const uint32_t lo = b & 0xFFFFu;
    if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0) return float_of((hi | 0x0040u) << 16);
    if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u) != 0)) ++hi;
    return float_of(hi << 16);
}

}  // namespace mwb::test
