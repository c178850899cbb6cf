#pragma once
// Runs a scope with a given number of op threads and restores the previous count afterwards, so one test's
// thread setting never leaks into the next.
#include "mwb/kernels/ops.h"

namespace mwb::test {

class ScopedThreads {
public:
    explicit ScopedThreads(int n) : previous_(ops::num_threads()) { ops::set_num_threads(n); }
    ~ScopedThreads() { ops::set_num_threads(previous_); }
    ScopedThreads(const ScopedThreads&) = delete;
    ScopedThreads& operator=(const ScopedThreads&) = delete;

private:
    int previous_;
};

}  // namespace mwb::test
