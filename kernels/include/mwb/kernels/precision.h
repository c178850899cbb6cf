#pragma once
// Rounding float32 values to what a 16-bit store would keep, bit-exactly (round to nearest even,
// overflow to infinity, subnormals kept). The CPU emulates BF16/F16 storage with these.
#include <bit>
#include <cstdint>

namespace mwb {

inline float round_to_bf16(float x) {
    uint32_t b = std::bit_cast<uint32_t>(x);
    const bool is_nan = (b & 0x7FFFFFFFu) > 0x7F800000u;
    const uint32_t lsb = (b >> 16) & 1u;
    const uint32_t rounded = (b + 0x7FFFu + lsb) & 0xFFFF0000u;
    // A NaN stays a quiet NaN with its sign and top payload bits; like any bf16 value, its low 16 bits are 0.
    return std::bit_cast<float>(is_nan ? ((b | 0x00400000u) & 0xFFFF0000u) : rounded);
}

inline float round_to_fp16(float x) {
    const uint32_t b = std::bit_cast<uint32_t>(x);
    const uint32_t sign = b & 0x80000000u;
    const uint32_t mag = b & 0x7FFFFFFFu;
    // Normal range of fp16: keep 10 mantissa bits (drop 13), nearest even.
    const uint32_t lsb = (mag >> 13) & 1u;
    const uint32_t normal = (mag + 0xFFFu + lsb) & ~0x1FFFu;
    // Subnormal range (|x| < 2^-14): the quantum is 2^-24, which is the ulp of floats in [0.5, 1);
    // adding 0.5 rounds to it (nearest even), subtracting 0.5 is then exact.
    const float sub = (std::bit_cast<float>(mag) + 0.5f) - 0.5f;
    uint32_t out = mag < 0x38800000u ? std::bit_cast<uint32_t>(sub) : normal;
    out = mag >= 0x477FF000u ? 0x7F800000u : out;      // >= 65520 rounds to infinity
    out = mag > 0x7F800000u ? ((mag | 0x00400000u) & ~0x1FFFu) : out;  // NaN: quiet, top 10 payload bits
    return std::bit_cast<float>(out | sign);
}

}  // namespace mwb

namespace mwb {

// The 16-bit encodings themselves, for tensors stored in BF16/F16: a store rounds as above, a load
// widens exactly. Branch-free (selects only), so loops over them vectorise.

/// The bf16 bits of x rounded to nearest even (NaN stays a quiet NaN).
inline uint16_t bf16_bits(float x) {
    return static_cast<uint16_t>(std::bit_cast<uint32_t>(round_to_bf16(x)) >> 16);
}
inline float from_bf16_bits(uint16_t h) {
    return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

/// The IEEE binary16 bits of x rounded to nearest even (overflow to infinity, subnormals kept).
inline uint16_t fp16_bits(float x) {
    const uint32_t r = std::bit_cast<uint32_t>(round_to_fp16(x));
    const uint32_t sign = (r >> 16) & 0x8000u, mag = r & 0x7FFFFFFFu;
    const uint32_t normal = (mag - 0x38000000u) >> 13;  // exponent bias 127 -> 15, 10 mantissa bits
    // Subnormal: r is a multiple of 2^-24 below 2^-14; added to 0.5 (whose ulp is 2^-24) it lands
    // exactly in the low mantissa bits.
    const uint32_t sub = std::bit_cast<uint32_t>(std::bit_cast<float>(mag) + 0.5f) - 0x3F000000u;
    const uint32_t special = 0x7C00u | ((mag >> 13) & 0x3FFu);  // infinity, NaN with its top payload
    uint32_t out = mag < 0x38800000u ? sub : normal;
    out = mag >= 0x7F800000u ? special : out;
    return static_cast<uint16_t>(out | sign);
}
inline float from_fp16_bits(uint16_t h) {
    const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
    const uint32_t em = static_cast<uint32_t>(h) & 0x7FFFu;
    const uint32_t shifted = em << 13;
    const uint32_t exponent = shifted & 0x0F800000u;
    const uint32_t normal = shifted + 0x38000000u;   // rebias 15 -> 127
    const uint32_t special = shifted + 0x70000000u;  // infinity / NaN: exponent 255
    // Zero and subnormals: the mantissa as a float of exponent 2^-14 minus 2^-14 (exact, no subnormal floats).
    const float sub = std::bit_cast<float>(shifted + 0x38800000u) - std::bit_cast<float>(0x38800000u);
    uint32_t out = exponent == 0x0F800000u ? special : normal;
    out = exponent == 0 ? std::bit_cast<uint32_t>(sub) : out;
    return std::bit_cast<float>(out | sign);
}

}  // namespace mwb
