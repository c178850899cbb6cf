#pragma once
// Timing for the C++ benchmarks: wall and CPU seconds per call. The CPU time of the process (with
// OMP_WAIT_POLICY=passive, so idle threads do not count) is what a loaded machine disturbs least.
#include <time.h>

#include <chrono>
#include <functional>

namespace mwb::bench {

inline double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
    double wall = 0, cpu = 0;  ///< seconds per call
};

/// One call to warm up (page faults, packing buffers, JIT), then `reps` timed calls.
inline Timing time_it(const std::function<void()>& f, int reps) {
    f();
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps,
            (cpu_seconds() - c0) / reps};
}

}  // namespace mwb::bench
