#include "backend/data/split.h"

#include "mwb/kernels/error.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

namespace mwb::data {

std::string_view split_name(Split split) {
    switch (split) {
        case Split::Train:
            return "train";
        case Split::Valid:
            return "valid";
        case Split::Test:
            return "test";
    }
    return "?";
}

std::array<double, 3> parse_split(std::string_view split) {
    // Megatron reads every run of [.0-9] as a number, whatever separates them.
    std::array<double, 3> w{0, 0, 0};
    std::size_t n = 0;
    for (std::size_t i = 0; i < split.size();) {
        if (!(std::isdigit(static_cast<unsigned char>(split[i])) || split[i] == '.')) {
            MWB_CHECK(split[i] == ',' || split[i] == ' ' || split[i] == '/',
                      "split '{}': expected proportions like 969,30,1 (found '{}')", split, split[i]);
            ++i;
            continue;
        }
        std::size_t j = i;
        while (j < split.size() && (std::isdigit(static_cast<unsigned char>(split[j])) || split[j] == '.')) ++j;
        MWB_CHECK(n < 3, "split '{}': at most three proportions (train,valid,test)", split);
        const std::string number(split.substr(i, j - i));
        char* end = nullptr;
        w[n++] = std::strtod(number.c_str(), &end);
        MWB_CHECK(end == number.c_str() + number.size(), "split '{}': '{}' is not a number", split, number);
        i = j;
    }
    const double sum = (w[0] + w[1]) + w[2];  // numpy.sum of three values: left to right
    MWB_CHECK(n > 0 && sum > 0, "split '{}': expected proportions like 969,30,1 with a positive sum", split);
    for (double& x : w) x /= sum;
    return w;
}

std::array<SequenceRange, 3> split_ranges(std::string_view split, int64_t count) {
    const std::array<double, 3> w = parse_split(split);
    std::array<SequenceRange, 3> out{};
    double lo = 0;
    for (std::size_t i = 0; i < 3; ++i) {
        const double hi = lo + w[i];
        // A zero proportion is no split at all (Megatron's None bookend).
        if (w[i] > 0) {
            const double n = static_cast<double>(count);
            // Python's round(): half to even, which nearbyint does in the default rounding mode.
            out[i] = {static_cast<int64_t>(std::nearbyint(lo * n)), static_cast<int64_t>(std::nearbyint(hi * n))};
        }
        lo = hi;
    }
    return out;
}

}  // namespace mwb::data
