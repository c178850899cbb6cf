#include "backend/generate/step_team.h"

#include <algorithm>
#include <chrono>

namespace mwb::generate {

namespace {
// How long a thread spins before it sleeps, at most: longer than the threads' usual skew at a meeting
// on an idle machine, shorter than a time slice. On a busy machine the other thread is often not
// running at all, and spinning for it only burns this thread's share of a core: a meeting that ends
// asleep halves the team's spin for the next ones, one that ends spinning doubles it again.
constexpr int64_t kMaxSpinNs = 50'000, kMinSpinNs = 1'000;
}  // namespace

void StepTeam::sync(int threads) {
    if (threads == 1) return;
    const uint32_t gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads) {
        // The last to arrive: reset the count before the others may leave (they next touch it after
        // seeing the new generation), then release them.
        arrived_.store(0, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_seq_cst);
        // A futex wake is a system call even with nobody asleep: only when someone is (a sleeper counts
        // itself before it checks the generation a last time, so one of the two sees the other).
        if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
        return;
    }
    const int64_t spin = spin_ns_.load(std::memory_order_relaxed);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin);
    for (unsigned i = 1; generation_.load(std::memory_order_acquire) == gen; ++i) {
        __builtin_ia32_pause();
        if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) {
            spin_ns_.store(std::max(kMinSpinNs, spin / 2), std::memory_order_relaxed);
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            while (generation_.load(std::memory_order_seq_cst) == gen) generation_.wait(gen, std::memory_order_acquire);
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
            return;
        }
    }
    if (spin < kMaxSpinNs) spin_ns_.store(std::min(kMaxSpinNs, spin * 2), std::memory_order_relaxed);
}

}  // namespace mwb::generate
