#pragma once
// A process group and its collectives, on host buffers (MPI) — the CUDA path adds an NCCL
// implementation for device buffers behind the same interface. Every call counts the bytes this rank
// sends by the ring algorithm's volume (the planner predicts exactly these numbers) and the time spent.
#include <cstdint>
#include <memory>
#include <string>

namespace mwb {

/// Traffic of one process group, accumulated since the last reset.
struct CommStats {
    int64_t bytes_sent = 0;  ///< per-rank volume: all-reduce 2(n-1)/n·size, all-gather and reduce-scatter (n-1)·shard, p2p size
    int64_t calls = 0;
    double seconds = 0;      ///< wall time inside collectives and point-to-point calls
    double wait_seconds = 0; ///< of which blocked in receives (pipeline bubbles show up here)

    void add(const CommStats& o) {
        bytes_sent += o.bytes_sent;
        calls += o.calls;
        seconds += o.seconds;
        wait_seconds += o.wait_seconds;
    }
};

/// A pending non-blocking send; wait() before reusing its buffer.
class PendingSend {
public:
    virtual ~PendingSend() = default;
    virtual void wait() = 0;
    /// True once the send has completed (never blocks).
    virtual bool done() = 0;
};

class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    /// A name for messages and telemetry ("tp", "dp", "pp", "embedding", "model", "world").
    virtual const std::string& name() const = 0;

    virtual void all_reduce_sum(float* data, int64_t n) = 0;
    virtual void all_reduce_sum(double* data, int64_t n) = 0;
    virtual void all_reduce_max(float* data, int64_t n) = 0;
    /// out (size()·n) = the n-element inputs of every rank, in rank order.
    virtual void all_gather(const float* in, float* out, int64_t n) = 0;
    /// out (n) = Σ over ranks of the rank()-th n-element block of in (size()·n). With out == in it
    /// works in place and the result lands in the first n elements.
    virtual void reduce_scatter_sum(const float* in, float* out, int64_t n) = 0;
    virtual void broadcast(void* data, int64_t bytes, int root) = 0;
    /// Gathers `bytes` from every rank to root (out: size()·bytes, only read on root).
    virtual void gather(const void* in, void* out, int64_t bytes, int root) = 0;
    /// Point-to-point within the group; `tag` distinguishes concurrent messages.
    virtual std::unique_ptr<PendingSend> send(const float* data, int64_t n, int peer, int tag) = 0;
    virtual void recv(float* data, int64_t n, int peer, int tag) = 0;
    virtual void barrier() = 0;

    const CommStats& stats() const { return stats_; }
    void reset_stats() { stats_ = {}; }

protected:
    CommStats stats_;
};

}  // namespace mwb
