#include "backend/generate/step_team.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>

namespace mwb::generate {

namespace {
// How long a thread spins before it sleeps, at most: longer than the threads' usual skew at a meeting
// on an idle machine, shorter than a time slice. On a busy machine the other thread is often not
// running at all, and spinning for it only burns this thread's share of a core: a meeting that ends
// asleep halves the team's spin for the next ones, one that ends spinning doubles it again.
constexpr int64_t kMaxSpinNs = 50'000, kMinSpinNs = 1'000;

// The futex itself, not std::atomic::wait: libstdc++'s wait first calls sched_yield() a dozen times,
// and on a busy machine each yield can hand the core to another process for a whole time slice.
uint32_t* word(std::atomic<uint32_t>& a) {
    static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
    return reinterpret_cast<uint32_t*>(&a);
}
void futex_wait(std::atomic<uint32_t>& a, uint32_t expected) {
    syscall(SYS_futex, word(a), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>& a) {
    syscall(SYS_futex, word(a), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}
}  // namespace

bool StepTeam::cpus_free_for(int threads) {
    // "0.52 0.58 0.59 3/209 12345": the fourth field is running/total scheduling entities.
    char text[128] = {};
    const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return true;
    const ssize_t n = ::read(fd, text, sizeof(text) - 1);
    ::close(fd);
    int running = 0;
    if (n <= 0 || std::sscanf(text, "%*f %*f %*f %d/", &running) != 1) return true;
    return running - 1 + threads <= sysconf(_SC_NPROCESSORS_ONLN);
}

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
        if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(generation_);
        return;
    }
    const int64_t spin = spin_ns_.load(std::memory_order_relaxed);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin);
    for (unsigned i = 1; generation_.load(std::memory_order_acquire) == gen; ++i) {
        __builtin_ia32_pause();
        if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) {
            spin_ns_.store(std::max(kMinSpinNs, spin / 2), std::memory_order_relaxed);
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            while (generation_.load(std::memory_order_seq_cst) == gen) futex_wait(generation_, gen);
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
            return;
        }
    }
    if (spin < kMaxSpinNs) spin_ns_.store(std::min(kMaxSpinNs, spin * 2), std::memory_order_relaxed);
}

}  // namespace mwb::generate
