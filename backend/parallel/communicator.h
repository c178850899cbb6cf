#pragma once
// A process group and its collectives: on host buffers (MPI, or a group of one) or on device buffers
// (NCCL) behind the same interface. Every call counts the bytes this rank
// sends by the ring algorithm's volume (the planner predicts exactly these numbers) and the time spent.
#include "mwb/kernels/error.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace mwb {

/// Traffic of one process group, accumulated since the last reset.
struct CommStats {
    int64_t bytes_sent = 0;  ///< per-rank volume: all-reduce 2(n-1)/n·size, all-gather and reduce-scatter (n-1)·shard, p2p size
    int64_t calls = 0;
    double seconds = 0;      ///< wall time inside collectives and point-to-point calls
    double wait_seconds = 0; ///< blocked in receives (pipeline bubbles show up here): MPI's host time in them;
                             ///< NCCL's: the GPU's op stream standing at a receive, event-timed (not in graphs)

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

/// One side of a point-to-point exchange: n floats to or from `peer`, matched by `tag`.
struct Message {
    float* data = nullptr;
    int64_t n = 0;
    int peer = 0;
    int tag = 0;
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
    /// The same for elements of `element_bytes` each (the 16-bit weights' working copy): moved as
    /// opaque 4-byte words, so n·element_bytes must be a multiple of 4; traffic counts their bytes.
    void all_gather_elements(const void* in, void* out, int64_t n, int64_t element_bytes) {
        MWB_CHECK(n * element_bytes % 4 == 0, "all-gather over {}: {} elements of {} bytes are not whole 4-byte words",
                  name(), n, element_bytes);
        all_gather(static_cast<const float*>(in), static_cast<float*>(out), n * element_bytes / 4);
    }
    /// out (n) = Σ over ranks of the rank()-th n-element block of in (size()·n). With out == in it
    /// works in place and the result lands in the first n elements.
    virtual void reduce_scatter_sum(const float* in, float* out, int64_t n) = 0;
    /// all_reduce_sum and reduce_scatter_sum on f16 elements (the f16 gradient arena of fp16 runs
    /// without accumulate_allreduce_grads_in_fp32), 2 bytes each on the wire: every pairwise combine
    /// widens both operands to fp32, adds, and rounds the sum once to fp16 (MPI: a user-defined op;
    /// NCCL: ncclFloat16's sum, the same per hop). With two ranks that is the fp32 sum rounded once.
    virtual void all_reduce_sum_f16(uint16_t* data, int64_t n) = 0;
    virtual void reduce_scatter_sum_f16(const uint16_t* in, uint16_t* out, int64_t n) = 0;
    virtual void broadcast(void* data, int64_t bytes, int root) = 0;
    /// Gathers `bytes` from every rank to root (out: size()·bytes, only read on root).
    virtual void gather(const void* in, void* out, int64_t bytes, int root) = 0;
    /// Point-to-point within the group: posts `sends` and `recvs` together (NCCL: one group) and
    /// returns once every receive has arrived; the sends may still be in flight (the handle's wait()
    /// before reusing their buffers). Either list may be empty. Messages between two ranks match by
    /// tag on MPI but in posting order on NCCL, whose sends complete only once received: ranks must
    /// post them in an order that pairs up, and two ranks sending to each other must do it in one call.
    virtual std::unique_ptr<PendingSend> exchange(std::span<const Message> sends, std::span<const Message> recvs) = 0;
    virtual void barrier() = 0;

    const CommStats& stats() const { return stats_; }
    void reset_stats() { stats_ = {}; }
    /// A replayed CUDA graph's traffic (StepGraph): the calls the graph captured run again without
    /// passing through this object, so the graph adds what its capture counted.
    void count_replay(const CommStats& captured) { stats_.add(captured); }

protected:
    CommStats stats_;
};

}  // namespace mwb
