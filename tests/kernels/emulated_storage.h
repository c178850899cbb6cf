#pragma once
// Helpers of the emulated CUDA kernel tests for 16-bit views: tensors encoded with the CPU's bits
// (precision.h), decoded, and compared in units of the 16-bit format's last place.
#include "mwb/kernels/precision.h"
#include "mwb/kernels/tensor.h"

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace mwb::test {

/// x encoded as `dt` (bf16 or f16) by the CPU's store-rounding.
inline std::vector<uint16_t> encode16(DType dt, const std::vector<float>& x) {
    std::vector<uint16_t> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = dt == DType::BF16 ? bf16_bits(x[i]) : fp16_bits(x[i]);
    return out;
}

/// The values of 16-bit `bits` of dtype `dt`, widened exactly.
inline std::vector<float> decode16(DType dt, const std::vector<uint16_t>& bits) {
    std::vector<float> out(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i)
        out[i] = dt == DType::BF16 ? from_bf16_bits(bits[i]) : from_fp16_bits(bits[i]);
    return out;
}

/// x rounded as a store of `dt` keeps it (f32: unchanged): an emulated 16-bit tensor.
inline std::vector<float> rounded16(DType dt, std::vector<float> x) {
    if (dt == DType::F32) return x;
    return decode16(dt, encode16(dt, x));
}

/// The largest distance between a[i] and b[i] in steps of the 16-bit format (sign-magnitude bits
/// mapped onto a line, so neighbours across zero are 1 apart); a NaN against a number counts 1 << 16.
inline int max_ulp16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
    const auto line = [](uint16_t h) { return (h & 0x8000u) ? -static_cast<int>(h & 0x7FFFu) : static_cast<int>(h); };
    int worst = a.size() == b.size() ? 0 : 1 << 16;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(line(a[i]) - line(b[i])));
    return worst;
}

}  // namespace mwb::test
