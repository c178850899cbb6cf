#pragma once
// A process group on NCCL, for device buffers: the same Communicator interface (and the same byte
// counts) as MpiCommunicator, with every collective queued on one CUDA stream so that it can overlap
// compute queued on other streams. The NCCL unique id travels over the group's host communicator
// (MPI), so each group (tp, dp, pp, ...) gets its own NCCL communicator.
#include "backend/parallel/communicator.h"

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mwb {

class NcclCommunicator final : public Communicator {
public:
    /// Builds the NCCL communicator of the ranks of `host_group` (collective over that group: rank 0
    /// creates the unique id and broadcasts it). Collectives run on a stream of their own; each one
    /// first waits (on the GPU) for the work queued so far on `compute_stream` (the ops' stream,
    /// nullptr = the legacy default stream) and the compute stream then waits for it, so results are
    /// ordered with the ops while work on other streams can overlap. With `blocking` every call also
    /// waits on the host before returning, as MPI does. `host_group` must outlive this object.
    ///
    /// The NCCL communicator itself is nonblocking (ncclConfig_t::blocking = 0, as PyTorch's watchdog
    /// runs it): no NCCL call can hang the host thread, and every host wait — the communicator's
    /// creation, an enqueue NCCL reports in progress, a stream or send completion — polls
    /// ncclCommGetAsyncError. An asynchronous error, or a wait longer than `timeout_s`
    /// (--distributed-timeout-minutes; positive and finite), aborts the communicator (ncclCommAbort)
    /// and throws an Error naming the group, the operation and the group's world ranks (nccl_watch.h).
    ///
    /// CUDA graphs (StepGraph): while `compute_stream` is capturing (cudaStreamIsCapturing) every call
    /// only queues — the stream dependencies are events, which a capture records as graph edges, and
    /// nothing waits or polls a stream on the host (not even with `blocking`); a replay runs the
    /// captured NCCL kernels without this object, so StepGraph adds their byte counts
    /// (Communicator::count_replay). NCCL captures since 2.9; every rank of a group must capture, and
    /// replay, the same sequence (the step is the same on every rank).
    NcclCommunicator(Communicator& host_group, void* compute_stream = nullptr, bool blocking = true,
                     double timeout_s = 600);
    ~NcclCommunicator() override;
    NcclCommunicator(const NcclCommunicator&) = delete;
    NcclCommunicator& operator=(const NcclCommunicator&) = delete;

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const std::string& name() const override { return name_; }
    void* stream() const { return stream_; }
    /// Waits for every queued collective (polling NCCL's asynchronous errors; see the constructor).
    void synchronize();
    /// Waits for `event` (a cudaEvent_t recorded on this communicator's stream) as synchronize() does;
    /// `op` names what it marks in the error.
    void wait_event(void* event, const std::string& op);
    /// Waits on the host until the work queued so far on `stream` is done, polling every group's
    /// asynchronous errors (an error aborts that group and throws naming it, its ranks and its latest
    /// operation). Past the groups' timeout, the groups whose own stream still has work — or, when
    /// none has (a replayed graph's NCCL kernels run on the graph's stream), every group of more than
    /// one rank — are aborted, which ends their kernels, and the Error names each with its latest
    /// operation. The end of a training step's one wait (ParallelContext::await_device_step).
    static void await(void* stream, const std::vector<NcclCommunicator*>& groups);
    /// The pipeline receives' waits, timed on the GPU (exchange): adds to wait_seconds those whose
    /// events have fired and keeps their events for the next receives; never blocks. await() calls it
    /// once the step's work is done (every event of the step has fired then), so the events in use are
    /// bounded by one step's receives.
    void settle_waits();
    /// Timing event pairs of receives not yet settled, and spare pairs (for the checks).
    std::pair<std::size_t, std::size_t> timing_events() const;
    /// The world ranks of the group, in group order.
    const std::vector<int>& world_ranks() const { return world_ranks_; }

    void all_reduce_sum(float* data, int64_t n) override;
    void all_reduce_sum(double* data, int64_t n) override;
    void all_reduce_max(float* data, int64_t n) override;
    void all_gather(const float* in, float* out, int64_t n) override;
    void reduce_scatter_sum(const float* in, float* out, int64_t n) override;
    void all_reduce_sum_f16(uint16_t* data, int64_t n) override;
    void reduce_scatter_sum_f16(const uint16_t* in, uint16_t* out, int64_t n) override;
    void broadcast(void* data, int64_t bytes, int root) override;
    void gather(const void* in, void* out, int64_t bytes, int root) override;
    /// One NCCL group of every send and receive (Megatron-LM's batched isend/irecv). NCCL has no tags:
    /// messages between two ranks match in posting order, and `tag` is only checked to be
    /// non-negative. Nothing waits on the host: with receives, the compute stream waits on the GPU for
    /// the group (cudaStreamWaitEvent), so the ops queued next read the data once it has arrived; a
    /// dead peer stalls the GPU, not the host, and is noticed at the step's end (await). The returned
    /// sends' wait() orders the compute stream after them, on the GPU too. wait_seconds: the time the
    /// compute stream stood at a receive's wait before the data came, from two timing events around
    /// it (settle_waits adds it once they fired; not timed inside a capture: a replayed step's
    /// receives add none).
    std::unique_ptr<PendingSend> exchange(std::span<const Message> sends, std::span<const Message> recvs) override;
    void barrier() override;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    Communicator& host_;
    std::string name_;
    int rank_ = 0, size_ = 1;
    void* stream_ = nullptr;          // the collectives' own stream
    void* compute_stream_ = nullptr;  // the ops' stream the collectives are ordered with
    bool blocking_ = true;
    double timeout_s_ = 600;
    std::vector<int> world_ranks_;
    std::string last_op_ = "communicator init";  // the latest operation queued, for the errors

    /// Polls until `done()` is true, NCCL's state stays clean and the timeout has not passed; else
    /// aborts and throws (nccl_watch.h's messages, naming `op`).
    template <class Done>
    void poll(const Done& done, const std::string& op);
    /// After an NCCL call: fails on an error; on ncclInProgress (a nonblocking communicator still
    /// enqueueing) waits until NCCL's state is ncclSuccess before the next call, as NCCL requires.
    void enqueued(int nccl_result, const std::string& op);
    [[noreturn]] void abort_and_fail(const std::string& message);

    /// In-place all-reduce of n elements (NCCL data type and reduction op, as ints: no NCCL header here).
    void all_reduce(void* data, int64_t n, int element_bytes, int type, int op, const char* what);
    void reduce_scatter(const void* in, void* out, int64_t n, int element_bytes, int type);
    void begin();   // the collective stream waits for the compute stream
    void finish();  // the compute stream waits for the collective; the host too when blocking (not capturing)
    /// Whether the compute stream is being captured into a CUDA graph (no host waits then).
    bool capturing() const;
    /// ncclCommGetAsyncError: aborts and throws (naming `op`) on an error.
    void check_async(const std::string& op);
};

}  // namespace mwb
