#include "backend/parallel/watchdog.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace mwb {

namespace {

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

/// One heartbeat: a rank's communication state (fixed size, sent as bytes).
struct Beat {
    int32_t rank = 0;
    int32_t busy = 0;
    double seconds = 0;
    int64_t operations = 0;
    char what[24] = {};
    char group[16] = {};
};

void copy_name(char* dst, std::size_t n, const std::string& src) {
    std::snprintf(dst, n, "%s", src.c_str());
}

std::string describe(const OperationTracker::State& s) {
    if (!s.busy) return fmt::format("computing (no communication for {:.1f} s)", s.seconds);
    return fmt::format("waiting {:.1f} s in {} on the {} group", s.seconds, s.what, s.group);
}

}  // namespace

void OperationTracker::begin(const char* what, const char* group) {
    what_.store(what, std::memory_order_relaxed);
    group_.store(group, std::memory_order_relaxed);
    since_ns_.store(now_ns(), std::memory_order_relaxed);
    busy_.store(true, std::memory_order_release);
}

void OperationTracker::end() {
    busy_.store(false, std::memory_order_relaxed);
    since_ns_.store(now_ns(), std::memory_order_relaxed);
    operations_.fetch_add(1, std::memory_order_relaxed);
}

OperationTracker::State OperationTracker::state() const {
    State s;
    s.busy = busy_.load(std::memory_order_acquire);
    const int64_t since = since_ns_.load(std::memory_order_relaxed);
    s.seconds = since ? static_cast<double>(now_ns() - since) * 1e-9 : 0.0;
    const char* w = what_.load(std::memory_order_relaxed);
    const char* g = group_.load(std::memory_order_relaxed);
    s.what = w ? w : "";
    s.group = g ? g : "";
    s.operations = operations_.load(std::memory_order_relaxed);
    return s;
}

struct Watchdog::Impl {
    OperationTracker& tracker;
    double timeout;
    int rank, size;
    bool heartbeats;
    std::function<void(const std::string&)> report;
    std::mutex mutex;
    std::condition_variable wake;
    bool stop = false;
    MPI_Comm comm = MPI_COMM_NULL;
    std::thread thread;

    Impl(OperationTracker& t, double timeout_s, int r, int n, bool hb, std::function<void(const std::string&)> f)
        : tracker(t), timeout(timeout_s), rank(r), size(n), heartbeats(hb), report(std::move(f)) {}

    /// Reports on stderr and to `report`, then ends every rank.
    [[noreturn]] void abort_run(const std::string& why) {
        std::fprintf(stderr, "mwb-train: watchdog on rank %d: %s; aborting every rank\n", rank, why.c_str());
        std::function<void(const std::string&)> f;
        {
            std::lock_guard<std::mutex> lock(mutex);
            f = report;
        }
        if (f) {
            try {
                f(why);
            } catch (...) {  // the abort matters more than the record
            }
        }
        MPI_Abort(MPI_COMM_WORLD, 124);
        std::_Exit(124);
    }

    bool sleep_for(double s) {
        std::unique_lock<std::mutex> lock(mutex);
        return !wake.wait_for(lock, std::chrono::duration<double>(s), [&] { return stop; });
    }

    void run() {
        const double period = std::clamp(timeout / 4, 0.05, 1.0);
        if (rank == 0) run_leader(period);
        else run_follower(period);
    }

    void run_follower(double period) {
        Beat beat;
        MPI_Request pending = MPI_REQUEST_NULL;
        while (sleep_for(period)) {
            const OperationTracker::State s = tracker.state();
            if (heartbeats) {
                int done = 1;
                if (pending != MPI_REQUEST_NULL) MPI_Test(&pending, &done, MPI_STATUS_IGNORE);
                if (done) {
                    beat.rank = rank;
                    beat.busy = s.busy;
                    beat.seconds = s.seconds;
                    beat.operations = s.operations;
                    copy_name(beat.what, sizeof beat.what, s.what);
                    copy_name(beat.group, sizeof beat.group, s.group);
                    MPI_Isend(&beat, sizeof beat, MPI_BYTE, 0, 0, comm, &pending);
                }
            }
            // Rank 0 acts after one timeout; past 1.5 it cannot (stopped itself, or gone).
            if (s.busy && s.seconds > 1.5 * timeout + 2 * period)
                abort_run(fmt::format("{} and rank 0 has not ended the run (is rank 0 stalled?)", describe(s)));
        }
        if (pending != MPI_REQUEST_NULL) {
            MPI_Cancel(&pending);
            MPI_Request_free(&pending);
        }
    }

    void run_leader(double period) {
        const int64_t start = now_ns();
        std::vector<Beat> last(static_cast<std::size_t>(size)), incoming(static_cast<std::size_t>(size));
        std::vector<int64_t> heard(static_cast<std::size_t>(size), start);
        std::vector<MPI_Request> requests(static_cast<std::size_t>(size), MPI_REQUEST_NULL);
        const auto post = [&](int r) {
            MPI_Irecv(&incoming[static_cast<std::size_t>(r)], sizeof(Beat), MPI_BYTE, r, 0, comm,
                      &requests[static_cast<std::size_t>(r)]);
        };
        if (heartbeats)
            for (int r = 1; r < size; ++r) post(r);
        while (sleep_for(period)) {
            const int64_t now = now_ns();
            std::vector<std::string> stalled, waiting;
            for (int r = 1; heartbeats && r < size; ++r) {
                auto& req = requests[static_cast<std::size_t>(r)];
                int done = 0;
                while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {  // drain every beat
                    last[static_cast<std::size_t>(r)] = incoming[static_cast<std::size_t>(r)];
                    heard[static_cast<std::size_t>(r)] = now;
                    post(r);
                }
                const double silent = static_cast<double>(now - heard[static_cast<std::size_t>(r)]) * 1e-9;
                const Beat& b = last[static_cast<std::size_t>(r)];
                if (silent > timeout)
                    stalled.push_back(fmt::format("rank {} sent no heartbeat for {:.1f} s (last seen {})", r, silent,
                                                  b.operations || b.busy
                                                      ? describe({b.busy != 0, b.seconds, b.what, b.group, b.operations})
                                                      : std::string("before its first heartbeat")));
                else if (b.busy && b.seconds > timeout)
                    waiting.push_back(fmt::format("rank {} {}", r, describe({true, b.seconds, b.what, b.group, 0})));
                else if (!b.busy && b.operations && b.seconds > timeout)
                    stalled.push_back(fmt::format("rank {} {}", r, describe({false, b.seconds, "", "", 0})));
            }
            const OperationTracker::State mine = tracker.state();
            if (mine.busy && mine.seconds > timeout) waiting.push_back("rank 0 " + describe(mine));
            if (stalled.empty() && waiting.empty()) continue;
            std::string why;
            if (!stalled.empty()) why += fmt::format("stalled: {}", fmt::join(stalled, "; "));
            if (!waiting.empty()) why += fmt::format("{}waiting: {}", why.empty() ? "" : "; ", fmt::join(waiting, "; "));
            abort_run(fmt::format("no progress for {:.0f} s (--distributed-timeout-minutes {:g}): {}", timeout,
                                  timeout / 60, why));
        }
        for (auto& req : requests)
            if (req != MPI_REQUEST_NULL) {
                MPI_Cancel(&req);
                MPI_Request_free(&req);
            }
    }
};

Watchdog::Watchdog(OperationTracker& tracker, double timeout_s, int rank, int size, bool heartbeats,
                   std::function<void(const std::string&)> report)
    : impl_(std::make_unique<Impl>(tracker, timeout_s, rank, size, heartbeats && size > 1, std::move(report))) {
    if (impl_->heartbeats) MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm);
    impl_->thread = std::thread([this] { impl_->run(); });
}

Watchdog::~Watchdog() {
    {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        impl_->stop = true;
    }
    impl_->wake.notify_all();
    impl_->thread.join();
    // No MPI_Comm_free: a peer may have stopped watching already; MPI_Finalize releases it.
}

void Watchdog::set_report(std::function<void(const std::string&)> report) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->report = std::move(report);
}

}  // namespace mwb
