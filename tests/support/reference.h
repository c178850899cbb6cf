#pragma once
// Helpers shared by the test suites: random inputs, float64 comparisons and central finite differences.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace mwb::test {

inline std::vector<float> random_floats(std::size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// max_i |a_i - b_i| / (|b_i| + floor): relative error that tolerates values near zero.
inline double max_rel_error(const float* a, const double* b, std::size_t n, double floor = 1e-3) {
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double e = std::abs(static_cast<double>(a[i]) - b[i]) / (std::abs(b[i]) + floor);
        if (!(e <= worst)) worst = e;  // NaN counts as worst
    }
    return worst;
}
inline double max_rel_error(const std::vector<float>& a, const std::vector<double>& b, double floor = 1e-3) {
    return max_rel_error(a.data(), b.data(), std::min(a.size(), b.size()), floor) +
           (a.size() == b.size() ? 0.0 : 1e9);
}

/// max_i |a_i - b_i| / max_i |b_i|: error relative to the size of the result as a whole (right for
/// sums with cancellation, where single elements near zero carry the rounding of large terms).
inline double normwise_error(const std::vector<float>& a, const std::vector<double>& b) {
    if (a.size() != b.size()) return 1e9;
    double diff = 0, scale = 1e-30;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double e = std::abs(static_cast<double>(a[i]) - b[i]);
        if (!(e <= diff)) diff = e;
        scale = std::max(scale, std::abs(b[i]));
    }
    return diff / scale;
}

/// Central differences of a scalar function of x (float64): grad_i = (f(x + h e_i) - f(x - h e_i)) / 2h.
inline std::vector<double> finite_difference(std::vector<double> x, const std::function<double(const std::vector<double>&)>& f,
                                             double h = 1e-6) {
    std::vector<double> g(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double keep = x[i];
        x[i] = keep + h;
        const double up = f(x);
        x[i] = keep - h;
        const double down = f(x);
        x[i] = keep;
        g[i] = (up - down) / (2 * h);
    }
    return g;
}

}  // namespace mwb::test
