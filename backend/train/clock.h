#pragma once
// The train loop's clock: steady, in seconds.
#include <chrono>

namespace mwb {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace mwb
