// Slurm for real: a one-node cluster (munged, slurmctld, slurmd from Debian's slurm-wlm, started in a
// temp dir by slurm/one_node_cluster.sh), the batch script the Launch tab generates (slurm_script, the
// same code path), a tiny model on 2 CPU tasks. The job is signalled as the time limit would signal it
// (scancel --signal=USR1): every rank checkpoints and exits 130, the script requeues the job, the
// requeued job resumes from that checkpoint with the same script and finishes. Then the run directory
// and the store (mwb-record import) must hold every iteration once. Exit 77 (skipped) when Slurm is not
// installed or cannot start here.
#include "app/launch/commands.h"
#include "backend/config/config_io.h"
#include "mwb/ipc/curve.h"
#include "mwb/store/store.h"
#include "support/fixtures.h"
#include "support/jsonl.h"
#include "support/suite.h"

#include <QElapsedTimer>
#include <QProcess>
#include <QRegularExpression>
#include <QtTest>

#include <fstream>
#include <random>
#include <thread>

namespace test_slurm {

using namespace mwb;
using test::jsonl_records;
using namespace mwb::app;
namespace fs = std::filesystem;

namespace {

const fs::path kClusterScript = test::source_dir() / "tests" / "app" / "slurm" / "one_node_cluster.sh";
constexpr int kIterations = 400;

QString q(const fs::path& p) { return QString::fromStdString(p.string()); }

/// Runs a Slurm client command against the test cluster; stdout (trimmed), or a null string on failure.
QString slurm(const fs::path& conf, const QString& program, const QStringList& args) {
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("SLURM_CONF", q(conf));
    p.setProcessEnvironment(env);
    p.start(program, args);
    if (!p.waitForFinished(20000) || p.exitCode() != 0) {
        qWarning("%s %s: %s", qPrintable(program), qPrintable(args.join(' ')), p.readAllStandardError().constData());
        return {};
    }
    const QString out = QString::fromUtf8(p.readAllStandardOutput()).trimmed();
    return out.isNull() ? QStringLiteral("") : out;  // empty, not null: it succeeded
}


/// A field of `scontrol show job` ("JobState", "Restarts").
QString job_field(const fs::path& conf, const QString& job, const QString& field) {
    const QString text = slurm(conf, "scontrol", {"show", "job", job});
    const QRegularExpression re("\\b" + field + "=(\\S+)");
    const auto m = re.match(text);
    return m.hasMatch() ? m.captured(1) : QString();
}

template <typename Pred>
bool wait_until(Pred done, int ms) {
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < ms) {
        if (done()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

}  // namespace

class TestSlurm : public QObject {
    Q_OBJECT
public:
    fs::path cluster;

private slots:
    void generated_script_checkpoints_requeues_and_resumes() {
        const fs::path conf = cluster / "slurm.conf";
        test::TempDir t;
        // The job's keys as the connection details tell the user to make them.
        const fs::path keys = t / "keys";
        fs::create_directories(keys / "clients");
        ipc::write_key_files(keys / "run", ipc::generate_key_pair());
        ipc::write_key_files(keys / "clients" / "me", ipc::generate_key_pair());

        Config c;  // a tiny design on mock data (the script says so)
        c.model.num_layers = 1;
        c.model.hidden_size = 64;
        c.model.num_attention_heads = 2;
        c.model.seq_length = 64;
        c.model.vocab_size = 100;
        c.data.tokenizer_type = "NullTokenizer";
        c.data.mock_data = true;
        c.data.eval_interval = 0;
        c.training.micro_batch_size = 1;
        c.training.global_batch_size = 2;
        c.training.train_iters = kIterations;
        c.training.lr = 1e-3;
        c.logging.log_interval = 1;
        c.runtime.threads = 1;
        SlurmOptions o;
        o.job_name = QStringLiteral("mwbtest");
        o.nodes = 1;
        o.gpus_per_node = 2;  // tasks
        o.gpus = false;
        o.cpus_per_task = 1;
        o.time_limit = QStringLiteral("00:10:00");
        o.trainer = q(test::binary_dir() / "backend" / "mwb-train");
        o.run_root = q(t.path());
        o.key_dir = q(keys);
        o.port = 20000 + static_cast<int>(std::random_device{}() % 20000);
        const QString script = slurm_script(c, o);
        QVERIFY(script.contains(QStringLiteral("WARNING: this design has no dataset")));
        const fs::path script_file = t / "mwbtest.sbatch";
        std::ofstream(script_file) << script.toStdString();

        const QString submitted =
            slurm(conf, "sbatch", {"--parsable", "--chdir", q(t.path()), "--partition", "test", q(script_file)});
        QVERIFY2(!submitted.isEmpty(), "sbatch failed");
        const QString job = submitted.section(';', 0, 0);
        const fs::path run_dir = t / "mwbtest", output = t / ("mwbtest-" + job.toStdString() + ".out");
        const auto log = [&] {
            std::ifstream in(output);
            return std::string(std::istreambuf_iterator<char>(in), {});
        };

        const auto events_text = [&] {
            std::ifstream in(run_dir / "events.jsonl");
            std::string all, line;
            while (std::getline(in, line)) all += line.substr(0, 160) + "\n";
            return all;
        };
        // Signalled mid-run, as #SBATCH --signal=USR1@N does before the time limit.
        QVERIFY2(wait_until([&] { return jsonl_records(run_dir / "metrics.jsonl", "step", true).size() >= 10; }, 30000),
                 log().c_str());
        QElapsedTimer clock;
        clock.start();
        QVERIFY(!slurm(conf, "scancel", {"--signal=USR1", job}).isNull());
        QVERIFY2(wait_until([&] { return !jsonl_records(run_dir / "events.jsonl", "run.end", true).empty(); }, 30000), log().c_str());
        qInfo("checkpointed and stopped %lld ms after scancel --signal=USR1", clock.elapsed());
        // The script requeues the job; the same script resumes from the checkpoint and finishes. Slurm
        // holds a requeued job for two minutes (BeginTime); the test lets it start at once.
        QVERIFY2(wait_until([&] {
                     return job_field(conf, job, "Restarts") == "1" && job_field(conf, job, "JobState") == "PENDING";
                 }, 30000),
                 log().c_str());
        // Not within the second the first run ended: slurmd revokes the job's credentials with a time
        // stamp in seconds, and a launch credential of that same second counts as revoked.
        std::this_thread::sleep_for(std::chrono::milliseconds(2500));
        QVERIFY(!slurm(conf, "scontrol", {"update", "JobId=" + job, "StartTime=now"}).isNull());
        QVERIFY2(wait_until([&] {
                     return job_field(conf, job, "JobState") == "COMPLETED" &&
                            jsonl_records(run_dir / "events.jsonl", "run.end", true).size() == 2;
                 }, 45000),
                 qPrintable(job_field(conf, job, "JobState") + "\n" + QString::fromStdString(log()) + "\n" +
                            QString::fromStdString(events_text())));
        qInfo("requeued job completed %lld ms after the signal", clock.elapsed());
        QCOMPARE(job_field(conf, job, "Restarts"), QStringLiteral("1"));
        QCOMPARE(job_field(conf, job, "ExitCode"), QStringLiteral("0:0"));

        const auto ends = jsonl_records(run_dir / "events.jsonl", "run.end", true);
        QVERIFY2(ends.size() == 2, log().c_str());
        QCOMPARE(ends[0]["status"], "interrupted");
        QCOMPARE(ends[1]["status"], "finished");
        const int64_t k = ends[0]["iteration"].get<int64_t>();
        QVERIFY(k >= 10 && k < kIterations);
        bool loaded = false;
        for (const auto& e : jsonl_records(run_dir / "events.jsonl", "event", true))
            loaded |= e["kind"] == "checkpoint_loaded" && e["iteration"] == k;
        QVERIFY2(loaded, "the requeued job did not resume from the signalled checkpoint");
        const auto steps = jsonl_records(run_dir / "metrics.jsonl", "step", true);
        QCOMPARE(static_cast<int64_t>(steps.size()), int64_t{kIterations});
        for (int64_t i = 0; i < kIterations; ++i) QCOMPARE(steps[static_cast<std::size_t>(i)]["iteration"].get<int64_t>(), i + 1);
        QVERIFY(log().find("requeueing job " + job.toStdString()) != std::string::npos);

        // Recorded: the store holds the finished run, every iteration's loss once.
        QProcess record;
        record.start(q(test::binary_dir() / "store" / "mwb-record"),
                     {"import", "--store", q(t / "history.sqlite"), q(run_dir)});
        QVERIFY(record.waitForFinished(30000));
        QVERIFY2(record.exitCode() == 0, record.readAllStandardError().constData());
        store::Store s(t / "history.sqlite");
        const auto runs = s.runs();
        QCOMPARE(runs.size(), std::size_t{1});
        QCOMPARE(runs[0].status, std::string("finished"));
        QCOMPARE(runs[0].iteration, int64_t{kIterations});
        store::SeriesQuery all;
        all.buckets = 100000;
        const store::Series loss = s.series(runs[0].uid, "lm_loss", all);
        QCOMPARE(loss.points, int64_t{kIterations});
    }
};

int run_suite(int argc, char** argv) {
    test::TempDir cluster;
    QProcess start;
    start.setProcessChannelMode(QProcess::MergedChannels);
    start.start("bash", {q(kClusterScript), "start", q(cluster.path())});
    if (!start.waitForFinished(60000)) start.kill();
    const QByteArray said = start.readAll();
    if (start.exitStatus() != QProcess::NormalExit || start.exitCode() != 0) {
        std::fprintf(stderr, "skipped: no Slurm cluster here: %s\n", said.constData());
        return start.exitCode() == 77 ? 77 : 1;
    }
    TestSlurm test;
    test.cluster = cluster.path();
    const int result = QTest::qExec(&test, argc, argv);
    QProcess stop;
    stop.start("bash", {q(kClusterScript), "stop", q(cluster.path())});
    stop.waitForFinished(30000);
    return result;
}

MWB_TEST_SUITE_MAIN(test_slurm, run_suite)
}  // namespace test_slurm
#include "test_slurm.moc"
