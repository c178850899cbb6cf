#pragma once
// The threads of one CPU decode step, inside a single OpenMP parallel region (decoder.cpp).
// A step of a small model is ~100 dependent ops in ~20 ms. Opening a parallel region per linear layer
// costs, under OMP_WAIT_POLICY=PASSIVE (which this machine's tests and benchmarks need), a futex wake of
// the other threads and a sleeping barrier each time, and a sleeping thread takes tens of microseconds
// to wake (longer on a virtual machine, whose idle vCPU halts). Here the threads stay in one region for
// the whole step and meet at sync(): each spins for a bounded time (their slices of a layer are equal,
// so they usually arrive microseconds apart), then sleeps on the counter (std::atomic::wait, a futex);
// the bound shrinks while meetings end asleep, so an oversubscribed machine does not lose its cores to
// spinning.
#include <atomic>
#include <cstdint>

namespace mwb::generate {

class StepTeam {
public:
    StepTeam() = default;
    StepTeam(const StepTeam&) = delete;
    StepTeam& operator=(const StepTeam&) = delete;

    /// Whether `threads` threads would each have a CPU now: the machine's running threads (the
    /// running count of /proc/loadavg, the caller included) plus the others <= its online CPUs.
    /// Only then does the team pay: on an oversubscribed machine a team's threads measured slower than
    /// per-layer regions whose threads sleep at once (docs/performance.md, "Generation").
    static bool cpus_free_for(int threads);
    /// Waits until all `threads` threads of the region (omp_get_num_threads(): what the region really
    /// got) have called it as often as this one.
    void sync(int threads);

private:
    std::atomic<int> arrived_{0};
    std::atomic<uint32_t> generation_{0};
    std::atomic<int> sleepers_{0};          // threads in generation_.wait()
    std::atomic<int64_t> spin_ns_{50'000};  // how long the next meeting spins (step_team.cpp)
};

/// One thread of a team (team nullptr: a thread on its own).
struct TeamMember {
    StepTeam* team = nullptr;
    int thread = 0, threads = 1;
};

}  // namespace mwb::generate
