#pragma once
// The hung-rank watchdog (--distributed-timeout-minutes, Megatron-LM's name). Every MPI call of a
// group is bracketed by an OperationTracker (what, which group, since when: two relaxed stores), and a
// thread per rank watches it: non-zero ranks send rank 0 a heartbeat with their state about every
// second on a communicator of their own; rank 0 ends the run when a rank has sent no heartbeat for the
// timeout (stopped, or its node gone) or any rank has waited that long in one operation. Its report
// names the stalled ranks and the operation the others wait in, goes to stderr and to the run
// directory (an event), and then MPI_Abort ends every rank (exit status 124) in bounded time. If rank 0
// itself is the one stalled, the others abort on their own after 1.5 timeouts.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace mwb {

/// What this rank is doing in communication now; written by the thread that communicates.
class OperationTracker {
public:
    /// Bracket of one call: `what` and `group` must outlive it (string literals, a group's name).
    class Scope {
    public:
        Scope(OperationTracker* t, const char* what, const char* group) : t_(t) {
            if (t_) t_->begin(what, group);
        }
        ~Scope() {
            if (t_) t_->end();
        }
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

    private:
        OperationTracker* t_;
    };

    void begin(const char* what, const char* group);
    void end();
    struct State {
        bool busy = false;
        double seconds = 0;  ///< in the operation (busy) or since the last one ended
        std::string what, group;
        int64_t operations = 0;
    };
    State state() const;

private:
    std::atomic<int64_t> since_ns_{0};
    std::atomic<const char*> what_{nullptr}, group_{nullptr};
    std::atomic<bool> busy_{false};
    std::atomic<int64_t> operations_{0};
};

class Watchdog {
public:
    /// Starts watching (collective over MPI_COMM_WORLD: it duplicates it for heartbeats; needs
    /// MPI_THREAD_MULTIPLE, else only each rank's own waits are timed). `report` (rank 0) receives the
    /// diagnosis before the abort.
    Watchdog(OperationTracker& tracker, double timeout_s, int rank, int size, bool heartbeats,
             std::function<void(const std::string&)> report);
    ~Watchdog();
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;
    /// Replaces the report callback (e.g. once the run directory exists).
    void set_report(std::function<void(const std::string&)> report);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mwb
