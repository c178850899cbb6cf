#include "backend/parallel/mpi_communicator.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/precision.h"

#include <chrono>
#include <climits>
#include <vector>

namespace mwb {

namespace {

using Clock = std::chrono::steady_clock;

void check(int rc, const char* what, const std::string& group) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    MWB_FAIL("MPI {} on the {} group failed: {}", what, group, std::string(text, static_cast<std::size_t>(len)));
}

/// The sum of f16 elements (MPI_UINT16_T holding fp16 bits): each combine widens both to fp32, adds,
/// and rounds once (Communicator::all_reduce_sum_f16).
void f16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
    const auto* a = static_cast<const uint16_t*>(in);
    auto* b = static_cast<uint16_t*>(inout);
    for (int i = 0; i < *len; ++i) b[i] = fp16_bits(from_fp16_bits(a[i]) + from_fp16_bits(b[i]));
}

/// The op, created once per process (after MPI_Init: the first f16 reduction runs inside it).
MPI_Op f16_sum_op() {
    static const MPI_Op op = [] {
        MPI_Op o = MPI_OP_NULL;
        MPI_Op_create(&f16_sum, /*commute=*/1, &o);
        return o;
    }();
    return op;
}

int count_of(int64_t n, const std::string& group) {
    MWB_CHECK(n >= 0 && n <= INT_MAX, "{} group: a message of {} elements exceeds MPI's int count", group, n);
    return static_cast<int>(n);
}

/// Times a call, adds its bytes to the stats and tells the watchdog what this rank waits in.
class Measure {
public:
    Measure(CommStats& s, int64_t bytes, OperationTracker* t, const char* what, const std::string& group)
        : s_(s), t0_(Clock::now()), scope_(t, what, group.c_str()) {
        s_.bytes_sent += bytes;
        ++s_.calls;
    }
    ~Measure() { s_.seconds += std::chrono::duration<double>(Clock::now() - t0_).count(); }

private:
    CommStats& s_;
    Clock::time_point t0_;
    OperationTracker::Scope scope_;
};

/// The sends of one exchange. Under Nccl semantics the requests are shared with the communicator
/// (its next call waits for them); MPI sets a completed request to MPI_REQUEST_NULL, so whoever
/// waits second returns at once.
class MpiPendingSend final : public PendingSend {
public:
    MpiPendingSend(std::vector<std::shared_ptr<MPI_Request>> r, CommStats& s, OperationTracker* t, const char* group)
        : requests_(std::move(r)), stats_(s), tracker_(t), group_(group) {}
    ~MpiPendingSend() override { wait(); }
    void wait() override {
        const OperationTracker::Scope scope(done() ? nullptr : tracker_, "send", group_);
        const auto t0 = Clock::now();
        for (const auto& r : requests_)
            if (*r != MPI_REQUEST_NULL) MPI_Wait(r.get(), MPI_STATUS_IGNORE);
        stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    bool done() override {
        for (const auto& r : requests_) {
            if (*r == MPI_REQUEST_NULL) continue;
            int flag = 0;
            MPI_Test(r.get(), &flag, MPI_STATUS_IGNORE);
            if (!flag) return false;
        }
        return true;
    }

private:
    std::vector<std::shared_ptr<MPI_Request>> requests_;
    CommStats& stats_;
    OperationTracker* tracker_;
    const char* group_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, P2PSemantics p2p, OperationTracker* tracker)
    : comm_(comm), name_(std::move(name)), p2p_(p2p), tracker_(tracker) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

// Ring volumes per rank: all-reduce = reduce-scatter + all-gather = 2(n-1)/n of the buffer.
void MpiCommunicator::all_reduce_sum(float* data, int64_t n) {
    Measure m(stats_, 2 * (size_ - 1) * n * 4 / size_, tracker_, "all-reduce", name_);
    check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(n, name_), MPI_FLOAT, MPI_SUM, comm_), "all-reduce", name_);
}

void MpiCommunicator::all_reduce_sum(double* data, int64_t n) {
    Measure m(stats_, 2 * (size_ - 1) * n * 8 / size_, tracker_, "all-reduce", name_);
    check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(n, name_), MPI_DOUBLE, MPI_SUM, comm_), "all-reduce", name_);
}

void MpiCommunicator::all_reduce_max(float* data, int64_t n) {
    Measure m(stats_, 2 * (size_ - 1) * n * 4 / size_, tracker_, "all-reduce", name_);
    check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(n, name_), MPI_FLOAT, MPI_MAX, comm_), "all-reduce", name_);
}

void MpiCommunicator::all_gather(const float* in, float* out, int64_t n) {
    Measure m(stats_, (size_ - 1) * n * 4, tracker_, "all-gather", name_);
    const int c = count_of(n, name_);
    const void* send = in == out + static_cast<int64_t>(rank_) * n ? MPI_IN_PLACE : in;
    check(MPI_Allgather(send, c, MPI_FLOAT, out, c, MPI_FLOAT, comm_), "all-gather", name_);
}

void MpiCommunicator::reduce_scatter_sum(const float* in, float* out, int64_t n) {
    Measure m(stats_, (size_ - 1) * n * 4, tracker_, "reduce-scatter", name_);
    check(MPI_Reduce_scatter_block(in == out ? MPI_IN_PLACE : in, out, count_of(n, name_), MPI_FLOAT, MPI_SUM, comm_),
          "reduce-scatter", name_);
}

void MpiCommunicator::all_reduce_sum_f16(uint16_t* data, int64_t n) {
    Measure m(stats_, 2 * (size_ - 1) * n * 2 / size_, tracker_, "all-reduce", name_);
    check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(n, name_), MPI_UINT16_T, f16_sum_op(), comm_), "all-reduce",
          name_);
}

void MpiCommunicator::reduce_scatter_sum_f16(const uint16_t* in, uint16_t* out, int64_t n) {
    Measure m(stats_, (size_ - 1) * n * 2, tracker_, "reduce-scatter", name_);
    check(MPI_Reduce_scatter_block(in == out ? MPI_IN_PLACE : in, out, count_of(n, name_), MPI_UINT16_T,
                                   f16_sum_op(), comm_),
          "reduce-scatter", name_);
}

void MpiCommunicator::broadcast(void* data, int64_t bytes, int root) {
    Measure m(stats_, rank_ == root ? bytes : 0, tracker_, "broadcast", name_);
    check(MPI_Bcast(data, count_of(bytes, name_), MPI_BYTE, root, comm_), "broadcast", name_);
}

void MpiCommunicator::gather(const void* in, void* out, int64_t bytes, int root) {
    Measure m(stats_, rank_ == root ? 0 : bytes, tracker_, "gather", name_);
    const int c = count_of(bytes, name_);
    check(MPI_Gather(in, c, MPI_BYTE, out, c, MPI_BYTE, root, comm_), "gather", name_);
}

void MpiCommunicator::wait_for_last_sends() {
    if (last_sends_.empty()) return;
    const auto t0 = Clock::now();
    for (const auto& r : last_sends_) check(MPI_Wait(r.get(), MPI_STATUS_IGNORE), "send", name_);
    last_sends_.clear();
    stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

std::unique_ptr<PendingSend> MpiCommunicator::exchange(std::span<const Message> sends, std::span<const Message> recvs) {
    int64_t bytes = 0;
    for (const Message& m : sends) bytes += m.n * 4;
    Measure m(stats_, bytes, tracker_, "exchange", name_);
    const bool nccl = p2p_ == P2PSemantics::Nccl;
    // Nccl semantics: this call starts once the previous one is complete (one stream), tags are
    // ignored and sends are synchronous (complete only when matched).
    if (nccl) wait_for_last_sends();
    const auto t0 = Clock::now();
    std::vector<std::shared_ptr<MPI_Request>> send_requests;
    for (const Message& s : sends) {
        auto r = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
        const int c = count_of(s.n, name_);
        if (nccl) check(MPI_Issend(s.data, c, MPI_FLOAT, s.peer, 0, comm_, r.get()), "send", name_);
        else check(MPI_Isend(s.data, c, MPI_FLOAT, s.peer, s.tag, comm_, r.get()), "send", name_);
        send_requests.push_back(std::move(r));
    }
    std::vector<MPI_Request> recv_requests(recvs.size(), MPI_REQUEST_NULL);
    for (std::size_t i = 0; i < recvs.size(); ++i)
        check(MPI_Irecv(recvs[i].data, count_of(recvs[i].n, name_), MPI_FLOAT, recvs[i].peer, nccl ? 0 : recvs[i].tag,
                        comm_, &recv_requests[i]),
              "receive", name_);
    if (!recv_requests.empty()) {
        check(MPI_Waitall(static_cast<int>(recv_requests.size()), recv_requests.data(), MPI_STATUSES_IGNORE), "receive",
              name_);
        stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    if (nccl) {
        last_sends_ = send_requests;
        // A group with receives completes as a whole: NCCL's caller synchronizes the stream.
        if (!recvs.empty()) wait_for_last_sends();
    }
    return std::make_unique<MpiPendingSend>(std::move(send_requests), stats_, tracker_, name_.c_str());
}

void MpiCommunicator::barrier() {
    Measure m(stats_, 0, tracker_, "barrier", name_);
    check(MPI_Barrier(comm_), "barrier", name_);
}

}  // namespace mwb
