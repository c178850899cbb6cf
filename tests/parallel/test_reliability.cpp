// Multi-rank runs under failure, as real `mpirun` processes: a signal to any one rank (or the one that
// Slurm and mpirun forward, SIGUSR1) stops every rank at the same iteration with one checkpoint; the
// run directory ends gap-free. A hung rank (SIGSTOP) is found by the watchdog, named in an event, and
// every rank exits non-zero in bounded time. Times to exit are printed for docs/reliability.md.
#include "support/fixtures.h"
#include "support/jsonl.h"
#include "support/suite.h"
#include "support/trainer_process.h"

#include <QElapsedTimer>
#include <QProcess>
#include <QtTest>

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <thread>

namespace test_parallel_reliability {

namespace fs = std::filesystem;
using namespace mwb::test;

namespace {

/// `mpirun -np N mwb-train ...` logging to a file.
struct MpiRun {
    Child child;
    void start(int ranks, const QStringList& args) {
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert("OMPI_ALLOW_RUN_AS_ROOT", "1");
        env.insert("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        env.insert("OMPI_MCA_rmaps_base_oversubscribe", "1");
        env.insert("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
        env.insert("OMPI_MCA_btl", "self,vader");
        child.p.setProcessEnvironment(env);
        child.start(MWB_MPIEXEC, QStringList{"-np", QString::number(ranks), trainer_exe()} + args);
    }
    /// The pid of world rank `rank` (a child of mpirun whose environment says so); 0 when not yet started.
    pid_t rank_pid(int rank) const {
        const auto parent = static_cast<pid_t>(child.p.processId());
        for (const auto& e : fs::directory_iterator("/proc")) {
            const std::string name = e.path().filename().string();
            if (name.find_first_not_of("0123456789") != std::string::npos) continue;
            std::ifstream stat(e.path() / "stat");
            std::string pid, comm, state;
            long ppid = 0;
            if (!(stat >> pid >> comm >> state >> ppid) || ppid != parent) continue;
            std::ifstream environ(e.path() / "environ", std::ios::binary);
            const std::string vars{std::istreambuf_iterator<char>(environ), {}};
            if (vars.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos)
                return static_cast<pid_t>(std::stol(name));
        }
        return 0;
    }
};


/// Waits until the run has logged `n` iterations (false when it ended before).
bool wait_for_steps(const fs::path& run_dir, std::size_t n, const QProcess& p, int ms = 60000) {
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < ms && p.state() != QProcess::NotRunning) {
        if (jsonl_records(run_dir / "metrics.jsonl", "step", true).size() >= n) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
}

/// The run ended interrupted at iteration k with one checkpoint of k behind latest, and step records
/// 1..k without a gap.
void expect_stopped_with_one_checkpoint(const fs::path& run_dir, const fs::path& ckpt) {
    const auto ends = jsonl_records(run_dir / "events.jsonl", "run.end", true);
    QCOMPARE(ends.size(), std::size_t{1});
    QCOMPARE(ends[0]["status"], "interrupted");
    const int64_t k = ends[0]["iteration"].get<int64_t>();
    const auto steps = jsonl_records(run_dir / "metrics.jsonl", "step", true);
    QCOMPARE(static_cast<int64_t>(steps.size()), k);
    for (int64_t i = 0; i < k; ++i) QCOMPARE(steps[static_cast<std::size_t>(i)]["iteration"].get<int64_t>(), i + 1);
    std::ifstream latest(ckpt / "latest");
    std::string name;
    latest >> name;
    char want[32];
    std::snprintf(want, sizeof want, "iter_%07lld", static_cast<long long>(k));
    QCOMPARE(name, std::string(want));
    int folders = 0;
    for (const auto& e : fs::directory_iterator(ckpt)) folders += e.is_directory();
    QCOMPARE(folders, 1);
}

/// The tiny model, endless, one sample per micro-batch (any data-parallel size up to 4 divides the batch).
QStringList args(const fs::path& run_dir) { return tiny_run_args(run_dir, 100000) << "--micro-batch-size" << "1"; }

}  // namespace

class TestReliabilityParallel : public QObject {
    Q_OBJECT
private slots:
    void a_signal_to_one_rank_stops_every_rank_at_one_iteration_data() {
        QTest::addColumn<int>("signal");
        QTest::addColumn<int>("rank");
        QTest::newRow("SIGTERM to rank 1 of 2") << int(SIGTERM) << 1;
        QTest::newRow("SIGUSR1 to rank 2 of 4") << int(SIGUSR1) << 2;
    }
    void a_signal_to_one_rank_stops_every_rank_at_one_iteration() {
        QFETCH(int, signal);
        QFETCH(int, rank);
        TempDir t;
        MpiRun mpi;
        const int ranks = rank + 2 - rank % 2;
        mpi.start(ranks, args(t / "run") << "--save" << qpath(t / "ckpt"));
        QVERIFY2(wait_for_steps(t / "run", 3, mpi.child.p), qPrintable(mpi.child.output()));
        const pid_t pid = mpi.rank_pid(rank);
        QVERIFY(pid > 0);
        QElapsedTimer clock;
        clock.start();
        ::kill(pid, signal);
        QCOMPARE(mpi.child.wait(60000), 130);
        qInfo("all %d ranks exited %lld ms after the signal to rank %d", ranks, clock.elapsed(), rank);
        expect_stopped_with_one_checkpoint(t / "run", t / "ckpt");
    }

    void sigusr1_to_mpirun_reaches_every_rank() {
        // mpirun forwards SIGUSR1 (and Slurm sends it before the time limit): checkpoint, exit 130.
        TempDir t;
        MpiRun mpi;
        mpi.start(2, args(t / "run") << "--save" << qpath(t / "ckpt"));
        QVERIFY2(wait_for_steps(t / "run", 3, mpi.child.p), qPrintable(mpi.child.output()));
        QElapsedTimer clock;
        clock.start();
        mpi.child.signal(SIGUSR1);
        QCOMPARE(mpi.child.wait(60000), 130);
        qInfo("mpirun exited %lld ms after SIGUSR1", clock.elapsed());
        expect_stopped_with_one_checkpoint(t / "run", t / "ckpt");
    }

    void a_dead_rank_ends_every_rank() {
        // SIGKILL (the OOM killer, a node lost): mpirun sees the rank die and ends the others.
        TempDir t;
        MpiRun mpi;
        mpi.start(2, args(t / "run") << "--save" << qpath(t / "ckpt") << "--save-interval" << "5");
        QVERIFY2(wait_for_steps(t / "run", 7, mpi.child.p), qPrintable(mpi.child.output()));
        const pid_t pid = mpi.rank_pid(1);
        QVERIFY(pid > 0);
        QElapsedTimer clock;
        clock.start();
        ::kill(pid, SIGKILL);
        const int code = mpi.child.wait(60000);
        qInfo("all ranks exited %d %lld ms after rank 1 was killed", code, clock.elapsed());
        QVERIFY(code != 0 && code != -1);
        QVERIFY(clock.elapsed() < 20000);
        // What was saved stays loadable: latest names a complete checkpoint.
        std::ifstream latest(t / "ckpt" / "latest");
        std::string name;
        latest >> name;
        QVERIFY(fs::exists(t / "ckpt" / name / "metadata.json"));
    }

    void a_hung_rank_is_named_and_every_rank_exits_in_bounded_time_data() {
        QTest::addColumn<int>("ranks");
        QTest::addColumn<int>("hung");
        QTest::newRow("rank 1 of 2 stopped") << 2 << 1;
        QTest::newRow("rank 2 of 4 stopped") << 4 << 2;
        QTest::newRow("rank 0 of 2 stopped") << 2 << 0;
    }
    void a_hung_rank_is_named_and_every_rank_exits_in_bounded_time() {
        QFETCH(int, ranks);
        QFETCH(int, hung);
        TempDir t;
        MpiRun mpi;
        const double timeout_s = 3;
        mpi.start(ranks, args(t / "run") << "--distributed-timeout-minutes" << QString::number(timeout_s / 60));
        QVERIFY2(wait_for_steps(t / "run", 3, mpi.child.p), qPrintable(mpi.child.output()));
        const pid_t pid = mpi.rank_pid(hung);
        QVERIFY(pid > 0);
        QElapsedTimer clock;
        clock.start();
        ::kill(pid, SIGSTOP);  // a hung rank: it neither computes nor answers
        const int code = mpi.child.wait(60000);
        const qint64 ms = clock.elapsed();
        qInfo("all %d ranks exited %d %lld ms after rank %d stopped (timeout %.0f s)", ranks, code, ms, hung, timeout_s);
        QVERIFY2(code != 0 && code != -1, qPrintable(mpi.child.output()));
        QVERIFY(ms < 4 * timeout_s * 1000 + 5000);
        const QString out = mpi.child.output();
        if (hung != 0) {
            // Rank 0 names it, on stderr and in the run directory.
            const QString named = QString("rank %1 sent no heartbeat").arg(hung);
            QVERIFY2(out.contains(named), qPrintable(out));
            const auto events = jsonl_records(t / "run/events.jsonl", "event", true);
            QVERIFY(!events.empty());
            QCOMPARE(events.back()["kind"], "watchdog_timeout");
            QVERIFY(QString::fromStdString(events.back()["reason"].get<std::string>()).contains(named));
            QCOMPARE(jsonl_records(t / "run/events.jsonl", "run.end", true).back()["status"], "failed");
        } else {
            // Rank 0 itself hung: the others time out on their own and say what they waited in.
            QVERIFY2(out.contains("rank 0 has not ended the run (is rank 0 stalled?)"), qPrintable(out));
        }
    }
};

MWB_TEST_SUITE_APPLESS(test_parallel_reliability, TestReliabilityParallel)
}  // namespace test_parallel_reliability
#include "test_reliability.moc"
