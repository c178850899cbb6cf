#include "parallel/mpi_communicator.h"

#include "mwb/kernels/error.h"

#include <chrono>
#include <climits>

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

int count_of(int64_t n, const std::string& group) {
    MWB_CHECK(n >= 0 && n <= INT_MAX, "{} group: a message of {} elements exceeds MPI's int count", group, n);
    return static_cast<int>(n);
}

/// Times a call and adds its bytes to the stats.
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

class MpiPendingSend final : public PendingSend {
public:
    MpiPendingSend(MPI_Request r, CommStats& s) : request_(r), stats_(s) {}
    ~MpiPendingSend() override { wait(); }
    void wait() override {
        if (request_ == MPI_REQUEST_NULL) return;
        const auto t0 = Clock::now();
        MPI_Wait(&request_, MPI_STATUS_IGNORE);
        stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    bool done() override {
        if (request_ == MPI_REQUEST_NULL) return true;
        int flag = 0;
        MPI_Test(&request_, &flag, MPI_STATUS_IGNORE);
        return flag != 0;
    }

private:
    MPI_Request request_;
    CommStats& stats_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
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
    Measure m(stats_, 2 * (size_ - 1) * n * 4 / size_);
    check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(n, name_), MPI_FLOAT, MPI_SUM, comm_), "all-reduce", name_);
}

void MpiCommunicator::all_reduce_sum(double* data, int64_t n) {
    Measure m(stats_, 2 * (size_ - 1) * n * 8 / size_);
    check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(n, name_), MPI_DOUBLE, MPI_SUM, comm_), "all-reduce", name_);
}

void MpiCommunicator::all_reduce_max(float* data, int64_t n) {
    Measure m(stats_, 2 * (size_ - 1) * n * 4 / size_);
    check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(n, name_), MPI_FLOAT, MPI_MAX, comm_), "all-reduce", name_);
}

void MpiCommunicator::all_gather(const float* in, float* out, int64_t n) {
    Measure m(stats_, (size_ - 1) * n * 4);
    const int c = count_of(n, name_);
    const void* send = in == out + static_cast<int64_t>(rank_) * n ? MPI_IN_PLACE : in;
    check(MPI_Allgather(send, c, MPI_FLOAT, out, c, MPI_FLOAT, comm_), "all-gather", name_);
}

void MpiCommunicator::reduce_scatter_sum(const float* in, float* out, int64_t n) {
    Measure m(stats_, (size_ - 1) * n * 4);
    check(MPI_Reduce_scatter_block(in == out ? MPI_IN_PLACE : in, out, count_of(n, name_), MPI_FLOAT, MPI_SUM, comm_),
          "reduce-scatter", name_);
}

void MpiCommunicator::broadcast(void* data, int64_t bytes, int root) {
    Measure m(stats_, rank_ == root ? bytes : 0);
    check(MPI_Bcast(data, count_of(bytes, name_), MPI_BYTE, root, comm_), "broadcast", name_);
}

void MpiCommunicator::gather(const void* in, void* out, int64_t bytes, int root) {
    Measure m(stats_, rank_ == root ? 0 : bytes);
    const int c = count_of(bytes, name_);
    check(MPI_Gather(in, c, MPI_BYTE, out, c, MPI_BYTE, root, comm_), "gather", name_);
}

std::unique_ptr<PendingSend> MpiCommunicator::send(const float* data, int64_t n, int peer, int tag) {
    Measure m(stats_, n * 4);
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Isend(data, count_of(n, name_), MPI_FLOAT, peer, tag, comm_, &r), "send", name_);
    return std::make_unique<MpiPendingSend>(r, stats_);
}

void MpiCommunicator::recv(float* data, int64_t n, int peer, int tag) {
    Measure m(stats_, 0);
    const auto t0 = Clock::now();
    check(MPI_Recv(data, count_of(n, name_), MPI_FLOAT, peer, tag, comm_, MPI_STATUS_IGNORE), "receive", name_);
    stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

void MpiCommunicator::barrier() {
    Measure m(stats_, 0);
    check(MPI_Barrier(comm_), "barrier", name_);
}

}  // namespace mwb
