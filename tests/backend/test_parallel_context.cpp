// The process groups' setup that needs no second process: which GPU each rank of a node drives,
// and the MWB_P2P_SEMANTICS switch (multi-rank behaviour is in tests/parallel, under mpirun).
#include "backend/parallel/parallel_context.h"

#include "mwb/kernels/error.h"

#include "support/suite.h"

#include <QtTest>

#include <cstdlib>

namespace test_backend_parallel_context {

using namespace mwb;

class TestParallelContext : public QObject {
    Q_OBJECT
private slots:
    void each_rank_of_a_node_gets_its_own_gpu() {
        // Enough visible GPUs: the node's rank i takes GPU i, whatever the launcher set.
        for (bool launcher : {false, true}) {
            QCOMPARE(gpu_of_rank(0, 1, 1, launcher), 0);
            QCOMPARE(gpu_of_rank(3, 4, 8, launcher), 3);
            QCOMPARE(gpu_of_rank(7, 8, 8, launcher), 7);
        }
        // One visible GPU per rank, bound by the launcher: each rank's own device 0.
        QCOMPARE(gpu_of_rank(2, 4, 1, true), 0);
        // Fewer GPUs than ranks otherwise: no assignment (two ranks would share a GPU).
        QCOMPARE(gpu_of_rank(2, 4, 1, false), -1);
        QCOMPARE(gpu_of_rank(2, 4, 2, true), -1);
        QCOMPARE(gpu_of_rank(0, 2, 0, true), -1);
        QCOMPARE(gpu_of_rank(4, 4, 8, false), -1);  // not a rank of this node
    }

    void p2p_semantics_switch_names_the_variable_when_wrong() {
        World world(nullptr, nullptr);  // one process: no MPI
        ParallelConfig p;
        ::setenv("MWB_P2P_SEMANTICS", "nccl", 1);
        QCOMPARE(ParallelContext(world, p).world_size(), 1);
        ::setenv("MWB_P2P_SEMANTICS", "fast", 1);
        QString message;
        try {
            ParallelContext bad(world, p);
        } catch (const Error& e) {
            message = e.what();
        }
        ::unsetenv("MWB_P2P_SEMANTICS");
        QVERIFY2(message.contains("MWB_P2P_SEMANTICS is 'fast'") && message.contains("expected mpi"), qPrintable(message));
    }
};

MWB_TEST_SUITE_GUILESS(test_backend_parallel_context, TestParallelContext)
}  // namespace test_backend_parallel_context
#include "test_parallel_context.moc"
