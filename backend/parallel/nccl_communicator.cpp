#include "backend/parallel/nccl_communicator.h"

#include "backend/parallel/nccl_watch.h"

#include "mwb/kernels/error.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

namespace mwb {

namespace {

using Clock = std::chrono::steady_clock;

void check_nccl(ncclResult_t r, const char* what, const std::string& group) {
    if (r != ncclSuccess) MWB_FAIL("NCCL {} on the {} group failed: {}", what, group, ncclGetErrorString(r));
}
void check_cuda(cudaError_t e, const char* what, const std::string& group) {
    if (e != cudaSuccess) MWB_FAIL("CUDA {} on the {} group failed: {}", what, group, cudaGetErrorString(e));
}

class Measure {
public:
    Measure(CommStats& s, int64_t bytes) : s_(s), t0_(Clock::now()) {
        s_.bytes_sent += bytes;
        ++s_.calls;
    }
    ~Measure() { s_.seconds += std::chrono::duration<double>(Clock::now() - t0_).count(); }

private:
    CommStats& s_;
    Clock::time_point t0_;
};

/// This process's rank in MPI_COMM_WORLD (0 when MPI is not running: a group of one).
int world_rank() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    int r = 0;
    if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

/// Sends queued on the communicator's stream; complete once the event recorded after them has fired.
/// wait() orders the compute stream after them on the GPU (cudaStreamWaitEvent): the buffers they read
/// go back to the allocator, whose next users are queued behind on that stream, and a dead peer is
/// noticed where the step's end waits (NcclCommunicator::await). An event recorded inside a capture
/// cannot be queried: done() says false until wait(), which a capture needs anyway (every stream the
/// capture forked must join the capturing stream again before it ends).
class NcclPendingSend final : public PendingSend {
public:
    NcclPendingSend(NcclCommunicator& comm, cudaStream_t s, cudaStream_t compute, bool captured, std::string what)
        : comm_(comm), compute_(compute), captured_(captured), what_(std::move(what)) {
        check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "event creation", comm.name());
        check_cuda(cudaEventRecord(event_, s), "event record", comm.name());
    }
    ~NcclPendingSend() override {
        if (!event_) return;
        if (!waited_) {
            try {
                if (captured_) wait();
                else comm_.wait_event(event_, what_);
            } catch (const std::exception& e) {  // a destructor must not throw: say it, the run fails later
                std::fprintf(stderr, "mwb: %s\n", e.what());
            }
        }
        cudaEventDestroy(event_);
    }
    void wait() override {
        check_cuda(cudaStreamWaitEvent(compute_, event_, 0), "stream wait", comm_.name());
        waited_ = true;
    }
    bool done() override { return waited_ || (!captured_ && cudaEventQuery(event_) == cudaSuccess); }

private:
    NcclCommunicator& comm_;
    cudaStream_t compute_;
    bool captured_;
    std::string what_;
    cudaEvent_t event_ = nullptr;
    bool waited_ = false;
};

std::string floats(const char* op, int64_t n) { return fmt::format("{} of {} floats", op, n); }

}  // namespace

struct NcclCommunicator::Impl {
    ncclComm_t comm = nullptr;
    cudaEvent_t compute_done = nullptr, collective_done = nullptr;
    /// Timing events around each receive's wait on the compute stream (exchange), until settle_waits
    /// reads them, and spare pairs for the next ones.
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> waits, spare;
};

NcclCommunicator::NcclCommunicator(Communicator& host_group, void* compute_stream, bool blocking, double timeout_s)
    : impl_(std::make_unique<Impl>()), host_(host_group), name_(host_group.name()), rank_(host_group.rank()),
      size_(host_group.size()), compute_stream_(compute_stream), blocking_(blocking),
      timeout_s_(checked_nccl_timeout(timeout_s, host_group.name())) {
    // The group's world ranks, for the errors: every rank's, gathered on rank 0 and broadcast.
    world_ranks_.assign(static_cast<std::size_t>(size_), 0);
    const int me = world_rank();
    host_.gather(&me, world_ranks_.data(), sizeof(int), 0);
    host_.broadcast(world_ranks_.data(), static_cast<int64_t>(world_ranks_.size() * sizeof(int)), 0);

    ncclUniqueId id{};
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "unique id", name_);
    host_.broadcast(&id, sizeof(id), 0);
    cudaStream_t s = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream creation", name_);
    stream_ = s;
    check_cuda(cudaEventCreateWithFlags(&impl_->compute_done, cudaEventDisableTiming), "event creation", name_);
    check_cuda(cudaEventCreateWithFlags(&impl_->collective_done, cudaEventDisableTiming), "event creation", name_);
    // Nonblocking: the init returns at once (ncclInProgress) and is polled like every other wait, so a
    // rank that never joins fails this one by name instead of hanging it.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    last_op_ = "communicator init";
    const ncclResult_t r = ncclCommInitRankConfig(&impl_->comm, size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
        if (impl_->comm) ncclCommAbort(impl_->comm);
        impl_->comm = nullptr;
        check_nccl(r, "communicator init", name_);
    }
    enqueued(r, last_op_);
}

NcclCommunicator::~NcclCommunicator() {
    if (impl_->comm) {
        // Bounded: a peer that is gone must not hang the exit. Finalize flushes, then destroy frees.
        try {
            synchronize();
            enqueued(ncclCommFinalize(impl_->comm), "communicator finalize");
            ncclCommDestroy(impl_->comm);
        } catch (const std::exception& e) {  // synchronize/enqueued aborted the communicator already
            std::fprintf(stderr, "mwb: %s\n", e.what());
        }
        impl_->comm = nullptr;
    }
    for (auto* list : {&impl_->waits, &impl_->spare})
        for (auto [a, b] : *list) {
            cudaEventDestroy(a);
            cudaEventDestroy(b);
        }
    if (impl_->compute_done) cudaEventDestroy(impl_->compute_done);
    if (impl_->collective_done) cudaEventDestroy(impl_->collective_done);
    if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void NcclCommunicator::abort_and_fail(const std::string& message) {
    if (impl_->comm) ncclCommAbort(impl_->comm);
    impl_->comm = nullptr;
    MWB_FAIL("{}", message);
}

// NCCL's asynchronous error checking with abort (PyTorch's and Megatron-LM's watchdog): poll instead
// of blocking, and abort the communicator when NCCL reports an error or the wait passes the timeout
// (a hung or dead rank), so that this rank fails by name instead of waiting forever.
template <class Done>
void NcclCommunicator::poll(const Done& done, const std::string& op) {
    MWB_CHECK(impl_->comm, "NCCL {} on the {} group: the communicator was aborted by an earlier failure", op, name_);
    const NcclWait who{name_, op, world_ranks_, rank_};
    const auto t0 = Clock::now();
    for (int polls = 0;; ++polls) {
        const bool finished = done();
        if (finished || polls % 64 == 0) {
            check_async(op);
            if (finished) return;
            const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
            if (waited > timeout_s_) abort_and_fail(nccl_timeout_message(who, waited, timeout_s_));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(polls < 1000 ? 20 : 500));
    }
}

void NcclCommunicator::check_async(const std::string& op) {
    if (!impl_->comm) return;  // aborted: the failure that did it has been raised
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(impl_->comm, &async), "async error query", name_);
    if (async != ncclSuccess && async != ncclInProgress)
        abort_and_fail(nccl_async_error_message({name_, op, world_ranks_, rank_},
                                                fmt::format("{} ({})", ncclGetErrorString(async), ncclGetLastError(impl_->comm))));
}

void NcclCommunicator::enqueued(int nccl_result, const std::string& op) {
    const auto r = static_cast<ncclResult_t>(nccl_result);
    if (r != ncclSuccess && r != ncclInProgress)
        abort_and_fail(nccl_async_error_message({name_, op, world_ranks_, rank_},
                                                fmt::format("{} ({})", ncclGetErrorString(r), ncclGetLastError(impl_->comm))));
    if (r == ncclInProgress) {
        poll(
            [&] {
                ncclResult_t state = ncclInProgress;
                return ncclCommGetAsyncError(impl_->comm, &state) == ncclSuccess && state != ncclInProgress;
            },
            op);
    }
}

namespace {
/// A stream or event query's answer: true when complete, false when not yet, an Error when it failed.
bool completed(cudaError_t e, const char* what, const std::string& group) {
    if (e != cudaSuccess && e != cudaErrorNotReady) check_cuda(e, what, group);
    return e == cudaSuccess;
}
}  // namespace

void NcclCommunicator::synchronize() {
    const auto stream = static_cast<cudaStream_t>(stream_);
    poll([&] { return completed(cudaStreamQuery(stream), "stream synchronize", name_); }, last_op_);
}

void NcclCommunicator::wait_event(void* event, const std::string& op) {
    const auto ev = static_cast<cudaEvent_t>(event);
    poll([&] { return completed(cudaEventQuery(ev), "event synchronize", name_); }, op);
}

void NcclCommunicator::await(void* stream, const std::vector<NcclCommunicator*>& groups) {
    if (groups.empty()) return;
    const std::string& first = groups.front()->name_;
    cudaEvent_t ev = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "event creation", first);
    struct Release {
        cudaEvent_t e;
        ~Release() { cudaEventDestroy(e); }
    } release{ev};
    check_cuda(cudaEventRecord(ev, static_cast<cudaStream_t>(stream)), "event record", first);
    double timeout_s = 0;
    for (const NcclCommunicator* g : groups) timeout_s = std::max(timeout_s, g->timeout_s_);
    const auto t0 = Clock::now();
    for (int polls = 0;; ++polls) {
        const bool finished = completed(cudaEventQuery(ev), "step synchronize", first);
        if (finished || polls % 64 == 0) {
            for (NcclCommunicator* g : groups) g->check_async(g->last_op_);
            if (finished) {
                // The step's receive timings have fired: add them and recycle their events now, not
                // only when stats() is read (between log intervals they would pile up, two per receive).
                for (NcclCommunicator* g : groups) g->settle_waits();
                return;
            }
            const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
            if (waited > timeout_s) {
                // Which groups hold it: those whose own stream still has work (eager collectives);
                // a replayed graph's run on the graph's stream instead, so then every real group.
                std::vector<NcclCommunicator*> stuck;
                for (NcclCommunicator* g : groups)
                    if (g->impl_->comm && g->size_ > 1 &&
                        !completed(cudaStreamQuery(static_cast<cudaStream_t>(g->stream_)), "stream query", g->name_))
                        stuck.push_back(g);
                if (stuck.empty())
                    for (NcclCommunicator* g : groups)
                        if (g->impl_->comm && g->size_ > 1) stuck.push_back(g);
                if (!stuck.empty()) {
                    std::string message;
                    for (NcclCommunicator* g : stuck) {
                        const NcclWait who{g->name_, g->last_op_ + " (the latest operation queued on the group)",
                                           g->world_ranks_, g->rank_};
                        message += (message.empty() ? "" : "; ") + nccl_timeout_message(who, waited, timeout_s);
                        ncclCommAbort(g->impl_->comm);  // ends its kernels, so the stream can drain
                        g->impl_->comm = nullptr;
                    }
                    MWB_FAIL("{}", message);
                }
            }
        }
        std::this_thread::sleep_for(std::chrono::microseconds(polls < 1000 ? 20 : 500));
    }
}

void NcclCommunicator::settle_waits() {
    auto& waits = impl_->waits;
    for (auto it = waits.begin(); it != waits.end();) {
        if (cudaEventQuery(it->second) != cudaSuccess) {
            ++it;
            continue;
        }
        float ms = 0;
        if (cudaEventElapsedTime(&ms, it->first, it->second) == cudaSuccess) stats_.wait_seconds += ms * 1e-3;
        impl_->spare.push_back(*it);
        it = waits.erase(it);
    }
}

std::pair<std::size_t, std::size_t> NcclCommunicator::timing_events() const {
    return {impl_->waits.size(), impl_->spare.size()};
}

bool NcclCommunicator::capturing() const {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(static_cast<cudaStream_t>(compute_stream_), &status), "capture query", name_);
    return status != cudaStreamCaptureStatusNone;
}

void NcclCommunicator::begin() {
    check_cuda(cudaEventRecord(impl_->compute_done, static_cast<cudaStream_t>(compute_stream_)), "event record", name_);
    check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), impl_->compute_done, 0), "stream wait", name_);
}

void NcclCommunicator::finish() {
    check_cuda(cudaEventRecord(impl_->collective_done, static_cast<cudaStream_t>(stream_)), "event record", name_);
    check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(compute_stream_), impl_->collective_done, 0),
               "stream wait", name_);
    if (blocking_ && !capturing()) synchronize();
}

#define MWB_NCCL_STREAM static_cast<cudaStream_t>(stream_)

namespace {
/// A call between ncclGroupStart and ncclGroupEnd only queues: success, or in progress on a
/// nonblocking communicator (ncclGroupEnd's result is the one to wait on).
void grouped(ncclResult_t r, const char* what, const std::string& group) {
    if (r != ncclInProgress) check_nccl(r, what, group);
}
}  // namespace

void NcclCommunicator::all_reduce(void* data, int64_t n, int element_bytes, int type, int op, const char* what) {
    Measure m(stats_, 2 * (size_ - 1) * n * element_bytes / size_);
    last_op_ = fmt::format("{} of {} {}", what, n, element_bytes == 8 ? "doubles" : element_bytes == 2 ? "halves" : "floats");
    begin();
    enqueued(ncclAllReduce(data, data, static_cast<size_t>(n), static_cast<ncclDataType_t>(type),
                           static_cast<ncclRedOp_t>(op), impl_->comm, MWB_NCCL_STREAM),
             last_op_);
    finish();
}

void NcclCommunicator::all_reduce_sum(float* data, int64_t n) { all_reduce(data, n, 4, ncclFloat, ncclSum, "all-reduce"); }
void NcclCommunicator::all_reduce_sum(double* data, int64_t n) { all_reduce(data, n, 8, ncclDouble, ncclSum, "all-reduce"); }
void NcclCommunicator::all_reduce_max(float* data, int64_t n) {
    all_reduce(data, n, 4, ncclFloat, ncclMax, "all-reduce (max)");
}

void NcclCommunicator::all_gather(const float* in, float* out, int64_t n) {
    Measure m(stats_, (size_ - 1) * n * 4);
    last_op_ = floats("all-gather", n);
    begin();
    enqueued(ncclAllGather(in, out, static_cast<size_t>(n), ncclFloat, impl_->comm, MWB_NCCL_STREAM), last_op_);
    finish();
}

void NcclCommunicator::reduce_scatter_sum(const float* in, float* out, int64_t n) {
    reduce_scatter(in, out, n, 4, ncclFloat);
}

// ncclFloat16's sum adds two halves per hop and rounds the sum once (Communicator::all_reduce_sum_f16).
void NcclCommunicator::all_reduce_sum_f16(uint16_t* data, int64_t n) {
    all_reduce(data, n, 2, ncclFloat16, ncclSum, "all-reduce");
}
void NcclCommunicator::reduce_scatter_sum_f16(const uint16_t* in, uint16_t* out, int64_t n) {
    reduce_scatter(in, out, n, 2, ncclFloat16);
}

void NcclCommunicator::reduce_scatter(const void* in, void* out, int64_t n, int element_bytes, int type) {
    Measure m(stats_, (size_ - 1) * n * element_bytes);
    last_op_ = fmt::format("reduce-scatter of {} {}", n, element_bytes == 2 ? "halves" : "floats");
    begin();
    const auto t = static_cast<ncclDataType_t>(type);
    if (out == in) {
        // NCCL's in-place form puts rank r's block at in + r·n; the interface wants it first. The copy
        // is on the collective's stream, behind the reduce-scatter; finish() orders the ops after both.
        char* own = static_cast<char*>(const_cast<void*>(in)) + static_cast<int64_t>(rank_) * n * element_bytes;
        enqueued(ncclReduceScatter(in, own, static_cast<size_t>(n), t, ncclSum, impl_->comm, MWB_NCCL_STREAM),
                 last_op_);
        if (rank_ != 0)
            check_cuda(cudaMemcpyAsync(out, own, static_cast<size_t>(n * element_bytes), cudaMemcpyDeviceToDevice,
                                       MWB_NCCL_STREAM),
                       "reduce-scatter copy", name_);
    } else {
        enqueued(ncclReduceScatter(in, out, static_cast<size_t>(n), t, ncclSum, impl_->comm, MWB_NCCL_STREAM),
                 last_op_);
    }
    finish();
}

void NcclCommunicator::broadcast(void* data, int64_t bytes, int root) {
    Measure m(stats_, rank_ == root ? bytes : 0);
    last_op_ = fmt::format("broadcast of {} bytes from group rank {}", bytes, root);
    begin();
    enqueued(ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root, impl_->comm, MWB_NCCL_STREAM),
             last_op_);
    finish();
}

void NcclCommunicator::gather(const void* in, void* out, int64_t bytes, int root) {
    Measure m(stats_, rank_ == root ? 0 : bytes);
    last_op_ = fmt::format("gather of {} bytes per rank to group rank {}", bytes, root);
    begin();
    // NCCL has no gather: the root receives every rank's block in one group of point-to-point calls
    // (its own block copied on the collective's stream, in the same order).
    check_nccl(ncclGroupStart(), "group start", name_);
    if (rank_ == root) {
        for (int r = 0; r < size_; ++r) {
            char* dst = static_cast<char*>(out) + static_cast<int64_t>(r) * bytes;
            if (r == root)
                check_cuda(cudaMemcpyAsync(dst, in, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, MWB_NCCL_STREAM),
                           "gather copy", name_);
            else
                grouped(ncclRecv(dst, static_cast<size_t>(bytes), ncclUint8, r, impl_->comm, MWB_NCCL_STREAM), "gather",
                        name_);
        }
    } else {
        grouped(ncclSend(in, static_cast<size_t>(bytes), ncclUint8, root, impl_->comm, MWB_NCCL_STREAM), "gather", name_);
    }
    enqueued(ncclGroupEnd(), last_op_);
    finish();
}

std::unique_ptr<PendingSend> NcclCommunicator::exchange(std::span<const Message> sends, std::span<const Message> recvs) {
    int64_t bytes = 0;
    std::string peers;
    for (const Message& m : sends) {
        MWB_CHECK(m.tag >= 0, "{} group: negative tag {}", name_, m.tag);
        bytes += m.n * 4;
        peers += fmt::format(" send {} floats to {}", m.n, m.peer);
    }
    for (const Message& r : recvs) peers += fmt::format(" recv {} floats from {}", r.n, r.peer);
    Measure m(stats_, bytes);
    last_op_ = "exchange (group ranks:" + peers + ")";
    const bool captured = capturing();
    begin();  // the data to send is computed
    check_nccl(ncclGroupStart(), "group start", name_);
    for (const Message& s : sends)
        grouped(ncclSend(s.data, static_cast<size_t>(s.n), ncclFloat, s.peer, impl_->comm, MWB_NCCL_STREAM), "send",
                name_);
    for (const Message& r : recvs)
        grouped(ncclRecv(r.data, static_cast<size_t>(r.n), ncclFloat, r.peer, impl_->comm, MWB_NCCL_STREAM), "recv",
                name_);
    enqueued(ncclGroupEnd(), last_op_);
    if (!recvs.empty()) {
        // The caller's passes read the data next: queued behind the group on the GPU, no host wait.
        // Outside a capture two timing events around the compute stream's wait measure how long it
        // stood there (settle_waits); a capture cannot time (its events are graph edges).
        const auto compute = static_cast<cudaStream_t>(compute_stream_);
        std::pair<cudaEvent_t, cudaEvent_t> timing{nullptr, nullptr};
        if (!captured) {
            if (impl_->spare.empty()) {
                check_cuda(cudaEventCreate(&timing.first), "event creation", name_);
                check_cuda(cudaEventCreate(&timing.second), "event creation", name_);
            } else {
                timing = impl_->spare.back();
                impl_->spare.pop_back();
            }
            impl_->waits.push_back(timing);
            check_cuda(cudaEventRecord(timing.first, compute), "event record", name_);
        }
        finish();
        if (!captured) check_cuda(cudaEventRecord(timing.second, compute), "event record", name_);
    }
    return std::make_unique<NcclPendingSend>(*this, MWB_NCCL_STREAM, static_cast<cudaStream_t>(compute_stream_),
                                             captured, last_op_);
}

void NcclCommunicator::barrier() {
    Measure m(stats_, 0);
    synchronize();
    host_.barrier();
}

}  // namespace mwb
