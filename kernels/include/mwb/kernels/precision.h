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
