#include "backend/generate/sampler.h"

#include "backend/model/runtime.h"
#include "mwb/kernels/error.h"

#include <algorithm>
#include <cmath>

namespace mwb::generate {

int32_t argmax(const float* logits, int64_t vocab) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i)
        if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
}

std::vector<std::pair<int32_t, double>> filtered_distribution(const float* logits, int64_t vocab,
                                                              const SamplingParams& p) {
    MWB_CHECK(vocab >= 1 && p.temperature > 0 && p.top_k >= 0 && p.top_p > 0 && p.top_p <= 1,
              "sampling: temperature {} (> 0), top_k {} (>= 0), top_p {} (in (0, 1]) over {} tokens", p.temperature,
              p.top_k, p.top_p, vocab);
    std::vector<std::pair<int32_t, double>> c(static_cast<std::size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i)
        c[i] = {static_cast<int32_t>(i), static_cast<double>(logits[i]) / p.temperature};
    const auto more_likely = [](const auto& a, const auto& b) {
        return a.second > b.second || (a.second == b.second && a.first < b.first);
    };
    // Only the top k need ordering; without top-k the whole row is sorted (top-p needs the order).
    const std::size_t k = p.top_k > 0 ? static_cast<std::size_t>(std::min(p.top_k, vocab)) : c.size();
    std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k), c.end(), more_likely);
    c.resize(k);
    const double max = c.front().second;
    double sum = 0;
    for (auto& [id, v] : c) sum += (v = std::exp(v - max));
    std::size_t keep = c.size();
    if (p.top_p < 1) {
        // The smallest prefix whose mass reaches top_p (at least one token).
        double mass = 0;
        for (std::size_t i = 0; i < c.size(); ++i) {
            mass += c[i].second / sum;
            if (mass >= p.top_p) {
                keep = i + 1;
                break;
            }
        }
        c.resize(keep);
        sum = 0;
        for (const auto& [id, v] : c) sum += v;
    }
    for (auto& [id, v] : c) v /= sum;
    return c;
}

Sampler::Sampler(const SamplingParams& p, int64_t row)
    : p_(p), state_(mix64(mix64(p.seed) ^ static_cast<uint64_t>(row))) {}

double Sampler::uniform() {
    state_ += 0x9E3779B97F4A7C15ull;  // splitmix64's sequence; mix64 adds the same constant again
    return static_cast<double>(mix64(state_) >> 11) * 0x1.0p-53;
}

int32_t Sampler::next(const float* logits, int64_t vocab) {
    if (p_.is_greedy()) return argmax(logits, vocab);
    const auto dist = filtered_distribution(logits, vocab, p_);
    const double u = uniform();
    double cdf = 0;
    for (const auto& [id, prob] : dist) {
        cdf += prob;
        if (u < cdf) return id;
    }
    return dist.back().first;  // u within rounding of 1
}

}  // namespace mwb::generate
