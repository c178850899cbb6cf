// What NcclCommunicator's host waits accept and say when they give up (backend/parallel/nccl_watch.h),
// on any machine: the timeout must be positive and finite, and the timeout and asynchronous-error
// messages name the group, the operation, every world rank of the group and this rank, the seconds
// waited and the flag that sets the timeout. The behaviour on a GPU (a receive nothing matches fails
// after the timeout) is `mwb-gpu-check nccl_timeout`.
#include "backend/parallel/nccl_watch.h"

#include "mwb/kernels/error.h"

#include "support/suite.h"

#include <QtTest>

#include <cmath>
#include <limits>

namespace test_parallel_nccl_watch {

using namespace mwb;

namespace {
bool contains(const std::string& text, const std::string& part) {
    if (text.find(part) != std::string::npos) return true;
    qWarning("'%s' not in '%s'", part.c_str(), text.c_str());
    return false;
}
}  // namespace

class TestNcclWatch : public QObject {
    Q_OBJECT
private slots:
    void timeoutMustBePositiveAndFinite() {
        QCOMPARE(checked_nccl_timeout(600, "dp"), 600.0);
        QCOMPARE(checked_nccl_timeout(0.5, "dp"), 0.5);
        for (const double bad :
             {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
            try {
                checked_nccl_timeout(bad, "tp");
                QFAIL(qPrintable(QString("timeout %1 accepted").arg(bad)));
            } catch (const Error& e) {
                QVERIFY(contains(e.what(), "distributed_timeout_minutes"));
                QVERIFY(contains(e.what(), "tp group"));
            }
        }
    }

    void ranksAreListedInGroupOrder() {
        QCOMPARE(describe_ranks({3}, 0), std::string("world rank 3 (this is group rank 0, world rank 3)"));
        QCOMPARE(describe_ranks({0, 2}, 1), std::string("world ranks 0 and 2 (this is group rank 1, world rank 2)"));
        QCOMPARE(describe_ranks({1, 3, 5, 7}, 2),
                 std::string("world ranks 1, 3, 5 and 7 (this is group rank 2, world rank 5)"));
    }

    void timeoutNamesGroupOperationRanksAndFlag() {
        const NcclWait w{"dp", "all-reduce of 4096 floats", {0, 2, 4, 6}, 3};
        const std::string m = nccl_timeout_message(w, 600.4, 600);
        QVERIFY(contains(m, "all-reduce of 4096 floats"));
        QVERIFY(contains(m, "dp group"));
        QVERIFY(contains(m, "world ranks 0, 2, 4 and 6"));
        QVERIFY(contains(m, "group rank 3, world rank 6"));
        QVERIFY(contains(m, "did not complete in 600 s"));
        QVERIFY(contains(m, "--distributed-timeout-minutes 10"));
        QVERIFY(contains(m, "aborted"));
    }

    void asyncErrorNamesGroupOperationAndNcclText() {
        const NcclWait w{"pp", "exchange (group ranks: send 8 floats to 1)", {4, 5}, 0};
        const std::string m = nccl_async_error_message(w, "remote process exited or there was a network error");
        QVERIFY(contains(m, "NCCL exchange (group ranks: send 8 floats to 1) on the pp group"));
        QVERIFY(contains(m, "world ranks 4 and 5 (this is group rank 0, world rank 4)"));
        QVERIFY(contains(m, "failed asynchronously: remote process exited"));
        QVERIFY(contains(m, "aborted"));
    }
};

MWB_TEST_SUITE_APPLESS(test_parallel_nccl_watch, TestNcclWatch)
}  // namespace test_parallel_nccl_watch
#include "test_nccl_watch.moc"
