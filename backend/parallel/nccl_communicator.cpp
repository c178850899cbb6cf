#include "backend/parallel/nccl_communicator.h"

#include "mwb/kernels/error.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <thread>

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

/// A send queued on the stream; complete once the event recorded after it has fired.
class NcclPendingSend final : public PendingSend {
public:
    explicit NcclPendingSend(cudaStream_t s) {
        if (cudaEventCreateWithFlags(&event_, cudaEventDisableTiming) == cudaSuccess) cudaEventRecord(event_, s);
    }
    ~NcclPendingSend() override {
        if (event_) {
            cudaEventSynchronize(event_);
            cudaEventDestroy(event_);
        }
    }
    void wait() override {
        if (event_) cudaEventSynchronize(event_);
    }
    bool done() override { return !event_ || cudaEventQuery(event_) == cudaSuccess; }

private:
    cudaEvent_t event_ = nullptr;
};

}  // namespace

struct NcclCommunicator::Impl {
    ncclComm_t comm = nullptr;
    cudaEvent_t compute_done = nullptr, collective_done = nullptr;
};

NcclCommunicator::NcclCommunicator(Communicator& host_group, void* compute_stream, bool blocking, double timeout_s)
    : impl_(std::make_unique<Impl>()), host_(host_group), name_(host_group.name()), rank_(host_group.rank()),
      size_(host_group.size()), compute_stream_(compute_stream), blocking_(blocking), timeout_s_(timeout_s) {
    ncclUniqueId id{};
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "unique id", name_);
    host_.broadcast(&id, sizeof(id), 0);
    check_nccl(ncclCommInitRank(&impl_->comm, size_, id, rank_), "communicator init", name_);
    cudaStream_t s = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream creation", name_);
    stream_ = s;
    check_cuda(cudaEventCreateWithFlags(&impl_->compute_done, cudaEventDisableTiming), "event creation", name_);
    check_cuda(cudaEventCreateWithFlags(&impl_->collective_done, cudaEventDisableTiming), "event creation", name_);
}

NcclCommunicator::~NcclCommunicator() {
    if (impl_->comm) {
        cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
        ncclCommDestroy(impl_->comm);
    }
    if (impl_->compute_done) cudaEventDestroy(impl_->compute_done);
    if (impl_->collective_done) cudaEventDestroy(impl_->collective_done);
    if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void NcclCommunicator::synchronize() {
    // NCCL's async error checking with abort (PyTorch's and Megatron-LM's watchdog): poll the stream
    // instead of blocking in it, and abort the communicator when a peer reported an error or the wait
    // passes the timeout (a hung or dead rank), so that this rank fails by name instead of waiting forever.
    const auto stream = static_cast<cudaStream_t>(stream_);
    const auto t0 = Clock::now();
    for (int polls = 0;; ++polls) {
        const cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) check_cuda(e, "stream synchronize", name_);
        if (polls % 64 == 0) {
            ncclResult_t async = ncclSuccess;
            check_nccl(ncclCommGetAsyncError(impl_->comm, &async), "async error query", name_);
            const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
            if ((async != ncclSuccess && async != ncclInProgress) || waited > timeout_s_) {
                ncclCommAbort(impl_->comm);
                impl_->comm = nullptr;
                if (async != ncclSuccess && async != ncclInProgress)
                    MWB_FAIL("NCCL on the {} group failed asynchronously: {}; communicator aborted", name_,
                             ncclGetErrorString(async));
                MWB_FAIL("NCCL on the {} group did not complete in {:.0f} s (--distributed-timeout-minutes): a rank of "
                         "the group is hung or gone; communicator aborted",
                         name_, waited);
            }
        }
        std::this_thread::sleep_for(std::chrono::microseconds(polls < 1000 ? 20 : 500));
    }
}

void NcclCommunicator::begin() {
    check_cuda(cudaEventRecord(impl_->compute_done, static_cast<cudaStream_t>(compute_stream_)), "event record", name_);
    check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), impl_->compute_done, 0), "stream wait", name_);
}

void NcclCommunicator::finish() {
    check_cuda(cudaEventRecord(impl_->collective_done, static_cast<cudaStream_t>(stream_)), "event record", name_);
    check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(compute_stream_), impl_->collective_done, 0),
               "stream wait", name_);
    if (blocking_) synchronize();
}

#define MWB_NCCL_STREAM static_cast<cudaStream_t>(stream_)

void NcclCommunicator::all_reduce(void* data, int64_t n, int element_bytes, int type, int op, const char* what) {
    Measure m(stats_, 2 * (size_ - 1) * n * element_bytes / size_);
    begin();
    check_nccl(ncclAllReduce(data, data, static_cast<size_t>(n), static_cast<ncclDataType_t>(type),
                             static_cast<ncclRedOp_t>(op), impl_->comm, MWB_NCCL_STREAM),
               what, name_);
    finish();
}

void NcclCommunicator::all_reduce_sum(float* data, int64_t n) { all_reduce(data, n, 4, ncclFloat, ncclSum, "all-reduce"); }
void NcclCommunicator::all_reduce_sum(double* data, int64_t n) { all_reduce(data, n, 8, ncclDouble, ncclSum, "all-reduce"); }
void NcclCommunicator::all_reduce_max(float* data, int64_t n) {
    all_reduce(data, n, 4, ncclFloat, ncclMax, "all-reduce (max)");
}

void NcclCommunicator::all_gather(const float* in, float* out, int64_t n) {
    Measure m(stats_, (size_ - 1) * n * 4);
    begin();
    check_nccl(ncclAllGather(in, out, static_cast<size_t>(n), ncclFloat, impl_->comm, MWB_NCCL_STREAM), "all-gather",
               name_);
    finish();
}

void NcclCommunicator::reduce_scatter_sum(const float* in, float* out, int64_t n) {
    Measure m(stats_, (size_ - 1) * n * 4);
    begin();
    if (out == in) {
        // NCCL's in-place form puts rank r's block at in + r·n; the interface wants it first.
        float* own = const_cast<float*>(in) + static_cast<int64_t>(rank_) * n;
        check_nccl(ncclReduceScatter(in, own, static_cast<size_t>(n), ncclFloat, ncclSum, impl_->comm, MWB_NCCL_STREAM),
                   "reduce-scatter", name_);
        if (rank_ != 0)
            check_cuda(cudaMemcpyAsync(out, own, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToDevice, MWB_NCCL_STREAM),
                       "reduce-scatter copy", name_);
    } else {
        check_nccl(ncclReduceScatter(in, out, static_cast<size_t>(n), ncclFloat, ncclSum, impl_->comm, MWB_NCCL_STREAM),
                   "reduce-scatter", name_);
    }
    finish();
}

void NcclCommunicator::broadcast(void* data, int64_t bytes, int root) {
    Measure m(stats_, rank_ == root ? bytes : 0);
    begin();
    check_nccl(ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root, impl_->comm, MWB_NCCL_STREAM),
               "broadcast", name_);
    finish();
}

void NcclCommunicator::gather(const void* in, void* out, int64_t bytes, int root) {
    Measure m(stats_, rank_ == root ? 0 : bytes);
    begin();
    // NCCL has no gather: the root receives every rank's block in one group of point-to-point calls.
    check_nccl(ncclGroupStart(), "group start", name_);
    if (rank_ == root) {
        for (int r = 0; r < size_; ++r) {
            char* dst = static_cast<char*>(out) + static_cast<int64_t>(r) * bytes;
            if (r == root)
                check_cuda(cudaMemcpyAsync(dst, in, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, MWB_NCCL_STREAM),
                           "gather copy", name_);
            else
                check_nccl(ncclRecv(dst, static_cast<size_t>(bytes), ncclUint8, r, impl_->comm, MWB_NCCL_STREAM), "gather",
                           name_);
        }
    } else {
        check_nccl(ncclSend(in, static_cast<size_t>(bytes), ncclUint8, root, impl_->comm, MWB_NCCL_STREAM), "gather",
                   name_);
    }
    check_nccl(ncclGroupEnd(), "group end", name_);
    finish();
}

std::unique_ptr<PendingSend> NcclCommunicator::exchange(std::span<const Message> sends, std::span<const Message> recvs) {
    int64_t bytes = 0;
    for (const Message& m : sends) {
        MWB_CHECK(m.tag >= 0, "{} group: negative tag {}", name_, m.tag);
        bytes += m.n * 4;
    }
    Measure m(stats_, bytes);
    const auto t0 = Clock::now();
    begin();  // the data to send is computed
    check_nccl(ncclGroupStart(), "group start", name_);
    for (const Message& s : sends)
        check_nccl(ncclSend(s.data, static_cast<size_t>(s.n), ncclFloat, s.peer, impl_->comm, MWB_NCCL_STREAM), "send",
                   name_);
    for (const Message& r : recvs)
        check_nccl(ncclRecv(r.data, static_cast<size_t>(r.n), ncclFloat, r.peer, impl_->comm, MWB_NCCL_STREAM), "recv",
                   name_);
    check_nccl(ncclGroupEnd(), "group end", name_);
    if (!recvs.empty()) {
        finish();
        synchronize();  // the caller's passes read the data next
        stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    return std::make_unique<NcclPendingSend>(MWB_NCCL_STREAM);
}

void NcclCommunicator::barrier() {
    Measure m(stats_, 0);
    synchronize();
    host_.barrier();
}

}  // namespace mwb
