// NcclCommunicator against the values MPI's collectives give, on device buffers: all-reduce (sum,
// max, double), all-gather, reduce-scatter (also in place), broadcast, gather, point-to-point exchanges (lone and grouped) and byte
// counts equal to MpiCommunicator's; an all-reduce and a ring exchange captured in a CUDA graph by a
// blocking communicator (its host waits skipped while capturing) and replayed twice, waited for by
// NcclCommunicator::await. ctest runs it as one rank (a size-1 group); under
// `mpirun -np N` on N GPUs it checks the real multi-rank collectives. Exits 77 without a GPU.
#include "backend/parallel/mpi_communicator.h"
#include "backend/parallel/nccl_communicator.h"

#include "mwb/kernels/device.h"
#include "mwb/kernels/device_runtime.h"

#include "support/skip.h"

#include <QtTest>

#include <mpi.h>

#include <cstdio>
#include <vector>

using namespace mwb;

namespace {

/// A device copy of host values, read back on demand.
struct DeviceVec {
    explicit DeviceVec(const std::vector<float>& v) : n(static_cast<int64_t>(v.size())) {
        ptr = static_cast<float*>(device::cuda_malloc(n * 4));
        device::copy_to_device(ptr, v.data(), n * 4);
    }
    ~DeviceVec() { device::cuda_free(ptr); }
    std::vector<float> host() const {
        std::vector<float> v(static_cast<size_t>(n));
        device::copy_to_host(v.data(), ptr, n * 4);
        return v;
    }
    float* ptr = nullptr;
    int64_t n = 0;
};

std::vector<float> rank_values(int rank, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(rank * 1000 + i);
    return v;
}

}  // namespace

class TestNcclCommunicator : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        world_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world");
        const DeviceReport r = probe_devices();
        device::set_device(world_->rank() % r.cuda_devices);
        nccl_ = std::make_unique<NcclCommunicator>(*world_);
        QCOMPARE(nccl_->rank(), world_->rank());
        QCOMPARE(nccl_->size(), world_->size());
    }
    void cleanupTestCase() { nccl_.reset(); }

    void collectives_match_mpi() {
        const int n_ranks = world_->size(), me = world_->rank();
        const int64_t n = 1000;
        {
            std::vector<float> expect = rank_values(me, n);
            world_->all_reduce_sum(expect.data(), n);
            DeviceVec d(rank_values(me, n));
            nccl_->all_reduce_sum(d.ptr, n);
            QCOMPARE(d.host(), expect);
        }
        {
            std::vector<float> expect = rank_values(me, n);
            world_->all_reduce_max(expect.data(), n);
            DeviceVec d(rank_values(me, n));
            nccl_->all_reduce_max(d.ptr, n);
            QCOMPARE(d.host(), expect);
        }
        {
            std::vector<float> expect(static_cast<size_t>(n * n_ranks));
            const std::vector<float> mine = rank_values(me, n);
            world_->all_gather(mine.data(), expect.data(), n);
            DeviceVec in(mine), out(std::vector<float>(static_cast<size_t>(n * n_ranks)));
            nccl_->all_gather(in.ptr, out.ptr, n);
            QCOMPARE(out.host(), expect);
        }
        {
            const std::vector<float> all = rank_values(me, n * n_ranks);
            std::vector<float> expect(static_cast<size_t>(n));
            world_->reduce_scatter_sum(all.data(), expect.data(), n);
            DeviceVec in(all), out(std::vector<float>(static_cast<size_t>(n)));
            nccl_->reduce_scatter_sum(in.ptr, out.ptr, n);
            QCOMPARE(out.host(), expect);
            DeviceVec in_place(all);
            nccl_->reduce_scatter_sum(in_place.ptr, in_place.ptr, n);
            std::vector<float> got = in_place.host();
            got.resize(static_cast<size_t>(n));
            QCOMPARE(got, expect);
        }
        {
            DeviceVec d(rank_values(me, n));
            nccl_->broadcast(d.ptr, n * 4, 0);
            QCOMPARE(d.host(), rank_values(0, n));
        }
        {
            DeviceVec in(rank_values(me, n)), out(std::vector<float>(static_cast<size_t>(n * n_ranks)));
            nccl_->gather(in.ptr, out.ptr, n * 4, 0);
            std::vector<float> expect;
            for (int r = 0; r < n_ranks; ++r) {
                const auto v = rank_values(r, n);
                expect.insert(expect.end(), v.begin(), v.end());
            }
            if (me == 0) QCOMPARE(out.host(), expect);
        }
        nccl_->barrier();
    }

    void point_to_point_in_a_ring() {
        const int n_ranks = world_->size(), me = world_->rank();
        if (n_ranks < 2) MWB_SKIP("point-to-point needs two ranks (mpirun -np 2 on two GPUs)");
        DeviceVec out(rank_values(me, 100)), in(std::vector<float>(100));
        // An NCCL send completes only once its peer receives: even ranks send first, odd ranks receive
        // first, so lone calls around the ring cannot deadlock.
        const int next = (me + 1) % n_ranks, prev = (me + n_ranks - 1) % n_ranks;
        const Message send{out.ptr, 100, next, 0}, recv{in.ptr, 100, prev, 0};
        if (me % 2 == 0) {
            auto pending = nccl_->exchange({&send, 1}, {});
            nccl_->exchange({}, {&recv, 1});
            pending->wait();
        } else {
            nccl_->exchange({}, {&recv, 1});
            nccl_->exchange({&send, 1}, {})->wait();
        }
        QCOMPARE(in.host(), rank_values(prev, 100));
    }

    void exchange_shifts_a_ring_in_one_group() {
        // Every rank sends to the next and receives from the previous in one call (the pipeline's
        // exchange point): lone rendezvous sends posted this way would wait on each other forever.
        const int n_ranks = world_->size(), me = world_->rank();
        if (n_ranks < 2) MWB_SKIP("point-to-point needs two ranks (mpirun -np 2 on two GPUs)");
        DeviceVec out(rank_values(me, 1 << 20)), in(std::vector<float>(1 << 20));
        const int next = (me + 1) % n_ranks, prev = (me + n_ranks - 1) % n_ranks;
        const Message send{out.ptr, out.n, next, 0}, recv{in.ptr, in.n, prev, 0};
        nccl_->exchange({&send, 1}, {&recv, 1})->wait();
        QCOMPARE(in.host(), rank_values(prev, 1 << 20));
    }

    void collectives_and_exchange_in_a_cuda_graph() {
        const int n_ranks = world_->size(), me = world_->rank();
        void* stream = device::create_stream();
        {
            // Blocking: every call would wait on the host — which a capture must not (it would fail).
            NcclCommunicator comm(*world_, stream, /*blocking=*/true);
            const int64_t n = 1000;
            DeviceVec x(rank_values(me, n)), out(rank_values(me, n)), in(std::vector<float>(static_cast<size_t>(n)));
            std::vector<float> once = rank_values(me, n);  // Σ over ranks, then N · Σ: what two replays give
            world_->all_reduce_sum(once.data(), n);
            std::vector<float> twice = once;
            world_->all_reduce_sum(twice.data(), n);
            // A ring in one group (one rank sends to itself).
            const int next = (me + 1) % n_ranks, prev = (me + n_ranks - 1) % n_ranks;
            const Message send{out.ptr, n, next, 0}, recv{in.ptr, n, prev, 0};
            comm.reset_stats();
            device::begin_capture(stream);
            comm.all_reduce_sum(x.ptr, n);
            comm.exchange({&send, 1}, {&recv, 1})->wait();  // the sends' stream rejoins the capture
            void* graph = device::end_capture(stream);
            QCOMPARE(comm.stats().calls, 2);  // counted once, at the capture (StepGraph adds replays)
            QCOMPARE(x.host(), rank_values(me, n));  // a capture only records
            device::launch_graph(graph, stream);
            NcclCommunicator::await(stream, {&comm});
            QCOMPARE(x.host(), once);
            QCOMPARE(in.host(), rank_values(prev, n));
            device::launch_graph(graph, stream);
            NcclCommunicator::await(stream, {&comm});
            QCOMPARE(x.host(), twice);
            device::destroy_graph(graph);
        }
        device::destroy_stream(stream);
    }

    void receive_timing_events_are_recycled_at_the_steps_await() {
        // Each eager receive times the compute stream's wait with two events; the step's await settles
        // them (their time added) and keeps them for the next step's receives: the pool stays at one
        // step's receives however many steps pass between two reads of stats().
        const int n_ranks = world_->size(), me = world_->rank();
        void* stream = device::create_stream();
        {
            NcclCommunicator comm(*world_, stream, /*blocking=*/false);
            const int64_t n = 1000;
            DeviceVec out(rank_values(me, n)), in(std::vector<float>(static_cast<size_t>(n)));
            const int next = (me + 1) % n_ranks, prev = (me + n_ranks - 1) % n_ranks;
            const Message send{out.ptr, n, next, 0}, recv{in.ptr, n, prev, 0};
            constexpr std::size_t kReceives = 3;
            for (int step = 0; step < 4; ++step) {
                for (std::size_t r = 0; r < kReceives; ++r) comm.exchange({&send, 1}, {&recv, 1})->wait();
                QCOMPARE(comm.timing_events().first, kReceives);  // in flight until the step's await
                NcclCommunicator::await(stream, {&comm});
                QCOMPARE(comm.timing_events(), std::make_pair(std::size_t{0}, kReceives));
            }
            QCOMPARE(in.host(), rank_values(prev, n));
        }
        device::destroy_stream(stream);
    }

    void counts_bytes_as_mpi() {
        world_->reset_stats();
        nccl_->reset_stats();
        std::vector<float> h(4096, 1.0f);
        DeviceVec d(h);
        world_->all_reduce_sum(h.data(), 4096);
        nccl_->all_reduce_sum(d.ptr, 4096);
        QCOMPARE(nccl_->stats().bytes_sent, world_->stats().bytes_sent);
        QCOMPARE(nccl_->stats().calls, 1);
    }

private:
    std::unique_ptr<MpiCommunicator> world_;
    std::unique_ptr<NcclCommunicator> nccl_;
};

int main(int argc, char** argv) {
    const DeviceReport r = probe_devices();
    if (r.cuda_devices == 0) {
        std::printf("no CUDA device: %s\n", r.reason.c_str());
        return 77;
    }
    MPI_Init(&argc, &argv);
    int rc = 0;
    {
        QCoreApplication app(argc, argv);
        TestNcclCommunicator t;
        rc = QTest::qExec(&t, argc, argv);
    }
    MPI_Finalize();
    return mwb::test::exit_status(rc);  // 77 when the point-to-point checks were skipped (one rank)
}

#include "test_nccl_communicator.moc"
