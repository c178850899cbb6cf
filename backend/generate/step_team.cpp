#include "backend/generate/step_team.h"

#include <chrono>

namespace mwb::generate {

namespace {
// How long a thread spins before it sleeps: longer than the threads' usual skew at a meeting, shorter
// than a time slice of an oversubscribed machine.
constexpr std::chrono::microseconds kSpin{50};
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
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (unsigned i = 1; generation_.load(std::memory_order_acquire) == gen; ++i) {
        __builtin_ia32_pause();
        if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) {
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            while (generation_.load(std::memory_order_seq_cst) == gen) generation_.wait(gen, std::memory_order_acquire);
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
            return;
        }
    }
}

}  // namespace mwb::generate
