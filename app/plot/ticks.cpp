#include "app/plot/ticks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mwb::app {

namespace {

/// 1, 2, 5 or 10 times a power of ten near `x`.
double nice_number(double x, bool round) {
    const double z = std::pow(10.0, std::floor(std::log10(x)));
    const double q = x / z;
    if (round) return (q < 1.5 ? 1 : q < 3 ? 2 : q < 7 ? 5 : 10) * z;
    return (q <= 1 ? 1 : q <= 2 ? 2 : q <= 5 ? 5 : 10) * z;
}

}  // namespace

double nice_step(double lo, double hi, int count) {
    const double span = hi - lo;
    if (!(span > 0) || !std::isfinite(span)) return 1;
    return nice_number(span / std::max(1, count), true);
}

std::vector<double> nice_ticks(double lo, double hi, int count) {
    std::vector<double> out;
    if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return out;
    const double step = nice_step(lo, hi, count);
    const double eps = step * 1e-9;
    for (double k = std::ceil((lo - eps) / step); k * step <= hi + eps && out.size() < 100; k += 1) {
        const double v = k * step;
        out.push_back(std::abs(v) < eps ? 0.0 : v);
    }
    return out;
}

std::vector<double> log_ticks(double lo, double hi, int count) {
    std::vector<double> out;
    if (!(lo > 0) || !(hi > lo) || !std::isfinite(hi)) return out;
    const double eps = 1e-9;
    const auto decades = [&](const std::vector<double>& mantissas, int every) {
        std::vector<double> t;
        const int d0 = static_cast<int>(std::floor(std::log10(lo))), d1 = static_cast<int>(std::ceil(std::log10(hi)));
        for (int d = d0; d <= d1; ++d) {
            if ((d % every + every) % every) continue;
            for (double m : mantissas) {
                const double v = m * std::pow(10.0, d);
                if (v >= lo * (1 - eps) && v <= hi * (1 + eps)) t.push_back(v);
            }
        }
        return t;
    };
    out = decades({1, 2, 5}, 1);
    if (out.size() > static_cast<std::size_t>(2 * count)) {  // many decades: decades only, thinned
        const double span = std::log10(hi / lo);
        const int every = std::max(1, static_cast<int>(std::ceil(span / (2 * count))));
        out = decades({1}, every);
    }
    if (out.size() < 3) out = decades({1, 2, 3, 4, 5, 6, 7, 8, 9}, 1);
    if (out.size() < 3) out = nice_ticks(lo, hi, count);  // a narrow range: round numbers in it
    return out;
}

std::string format_tick(double v, double step, double magnitude) {
    if (!std::isfinite(v)) return "—";
    if (v == 0) return "0";
    struct Prefix {
        double scale;
        const char* name;
    };
    static constexpr Prefix kPrefixes[] = {{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}, {1, ""},
                                           {1e-3, "m"}, {1e-6, "µ"}, {1e-9, "n"}, {1e-12, "p"}};
    const double a = magnitude > 0 ? magnitude : std::abs(v);
    Prefix p = kPrefixes[std::size(kPrefixes) - 1];
    if (a >= 0.01 && a < 1000) {
        p = {1, ""};  // 0.25, 2.5, 994: plain numbers read best
    } else {
        for (const Prefix& q : kPrefixes) {
            if (a >= q.scale * (1 - 1e-9)) {
                p = q;
                break;
            }
        }
    }
    // decimals that tell ticks `step` apart, in the prefix's unit
    const double s = step > 0 && std::isfinite(step) ? step / p.scale : 1;
    int decimals = s >= 1 ? 0 : std::min(6, static_cast<int>(std::ceil(-std::log10(s) - 1e-9)));
    char text[48];
    std::snprintf(text, sizeof text, "%.*f", decimals, v / p.scale);
    std::string out = text;
    if (out.find('.') != std::string::npos) {  // 2.50 -> 2.5, 3.0 -> 3
        while (out.back() == '0') out.pop_back();
        if (out.back() == '.') out.pop_back();
    }
    return out + p.name;
}

}  // namespace mwb::app
