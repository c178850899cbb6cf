#include "backend/model/rope.h"

#include <cmath>
#include <numbers>

namespace mwb {

namespace {
// Llama 3.1's constants besides the factor (Meta's reference code and Hugging Face's "llama3" rope type).
constexpr double kLowFreqFactor = 1, kHighFreqFactor = 4, kOriginalContext = 8192;

/// Llama 3.1: wavelengths shorter than original/high are kept, longer than original/low divided by the
/// factor, and those in between interpolated linearly in original/wavelength.
double llama31_scaled(double f, double factor) {
    const double wavelength = 2 * std::numbers::pi / f;
    if (wavelength < kOriginalContext / kHighFreqFactor) return f;
    if (wavelength > kOriginalContext / kLowFreqFactor) return f / factor;
    const double smooth = (kOriginalContext / wavelength - kLowFreqFactor) / (kHighFreqFactor - kLowFreqFactor);
    return (1 - smooth) * f / factor + smooth * f;
}
}  // namespace

std::vector<double> rotary_frequencies(const GptDims& d) {
    std::vector<double> f(static_cast<std::size_t>(d.rotary_dim / 2));
    for (std::size_t i = 0; i < f.size(); ++i) {
        f[i] = std::pow(d.rotary_base, -2.0 * static_cast<double>(i) / static_cast<double>(d.rotary_dim));
        if (d.rope_scaling) f[i] = llama31_scaled(f[i], d.rope_scaling_factor);
    }
    return f;
}

void rotary_tables(const GptDims& d, int64_t positions, float* cos, float* sin) {
    const std::vector<double> f = rotary_frequencies(d);
    const auto half = static_cast<int64_t>(f.size());
    for (int64_t p = 0; p < positions; ++p)
        for (int64_t i = 0; i < half; ++i) {
            const double angle = static_cast<double>(p) * f[static_cast<std::size_t>(i)];
            cos[p * half + i] = static_cast<float>(std::cos(angle));
            sin[p * half + i] = static_cast<float>(std::sin(angle));
        }
}

}  // namespace mwb
