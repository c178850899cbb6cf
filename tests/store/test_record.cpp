// mwb-record with real mwb-train processes on loopback: a recorder started late, a recorder killed
// and restarted, a trainer stopped and resumed into the same run directory (new ephemeral ports), all
// ending with the run directory's complete series in the store, once; control requests round trip
// through the trainer; CURVE off loopback; import and the command line's errors.
#include "ipc/wire_fixtures.h"
#include "support/trainer_process.h"

#include "mwb/ipc/control_client.h"
#include "mwb/ipc/follower.h"
#include "mwb/ipc/run_dir_log.h"
#include "mwb/store/store.h"

#include <QProcess>
#include "support/skip.h"
#include "support/suite.h"

#include <QtTest>

#include <sys/stat.h>

#include <csignal>
#include <fstream>
#include <set>

namespace test_record {

using namespace mwb;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

QString exe(const char* dir, const char* name) {
    return QString::fromStdString((test::binary_dir() / dir / name).string());
}
QString q(const fs::path& p) {
    return QString::fromStdString(p.string());
}

int lines(const fs::path& file) {
    std::ifstream in(file);
    return static_cast<int>(std::count(std::istreambuf_iterator<char>(in), {}, '\n'));
}
int messages(const fs::path& run_dir) {
    return lines(run_dir / "metrics.jsonl") + lines(run_dir / "events.jsonl");
}

struct Result {
    int code = -1;
    QString out;
};
Result run_record(const QStringList& args) {
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(exe("store", "mwb-record"), args);
    if (!p.waitForFinished(30000)) p.kill();
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAll())};
}

bool wait_for(const std::function<bool()>& f, std::chrono::milliseconds timeout = 20s) {
    return test::wait_until(f, timeout);
}

std::string run_id_of(const fs::path& run_dir) {
    return ipc::read_run_endpoints(run_dir).run_id;
}

/// The store holds exactly the run directory's messages: every seq once, none missing, none extra.
void check_store_matches(const fs::path& store_file, const fs::path& run_dir) {
    std::vector<int64_t> expected;
    std::string run_id;
    int64_t steps = 0;
    ipc::for_each_run_dir_message(run_dir, [&](ipc::Message&& m) {
        expected.push_back(m.seq);
        run_id = m.run_id;
        steps += m.topic == "step";
    });
    store::Store s(store_file);
    auto st =
        s.database().prepare("SELECT m.seq FROM messages m JOIN runs r ON r.id = m.run WHERE r.uid = ? ORDER BY m.seq");
    st.bind(1, run_id);
    std::vector<int64_t> stored;
    while (st.step()) stored.push_back(st.int64(0));
    QCOMPARE(stored.size(), expected.size());
    QVERIFY(stored == expected);
    for (std::size_t i = 0; i < expected.size(); ++i) QCOMPARE(expected[i], static_cast<int64_t>(i));  // gap-free
    QCOMPARE(s.next_seq(run_id), static_cast<int64_t>(expected.size()));
    QCOMPARE(s.counts(run_id).at("steps"), steps);
}

int64_t stored(const fs::path& store_file, const std::string& run_id) {
    store::Store s(store_file);
    return s.next_seq(run_id);
}

nlohmann::json control(const fs::path& run_dir, const std::string& action) {
    return ipc::ControlClient::for_run_dir(run_dir).request(action, 20s);
}

}  // namespace

class TestRecord : public QObject {
    Q_OBJECT
private slots:
    void a_late_recorder_stores_the_complete_series() {
        test::TempDir t;
        const fs::path run = t / "run", db = t / "h.sqlite";
        test::Child trainer;
        trainer.start(test::trainer_exe(), test::tiny_run_args(run, 1000000));
        QVERIFY(wait_for([&] { return lines(run / "metrics.jsonl") >= 150; }));
        // Joins late, through the PUB endpoint (snapshot endpoint learned from the heartbeats).
        test::Child recorder;
        recorder.start(exe("store", "mwb-record"),
                       {"--store", q(db), "--until-end", QString::fromStdString(ipc::read_run_endpoints(run).publish)});
        const std::string id = run_id_of(run);
        QVERIFY(wait_for([&] { return stored(db, id) >= 200; }));
        QCOMPARE(control(run, "stop")["ok"], true);
        QCOMPARE(trainer.wait(), 3);  // stopped over the control channel
        QCOMPARE(recorder.wait(), 0);
        const QString out = recorder.output();
        QVERIFY2(out.contains("ended: stopped"), qPrintable(out));
        check_store_matches(db, run);
        store::Store s(db);
        QCOMPARE(s.run(id)->status, "stopped");
    }

    void a_killed_trainer_is_marked_interrupted_by_the_recorder() {
        test::TempDir t;
        const fs::path run = t / "run", db = t / "h.sqlite";
        test::Child trainer;
        trainer.start(test::trainer_exe(), test::tiny_run_args(run, 1000000));
        QVERIFY(wait_for([&] { return fs::exists(run / "telemetry.json"); }));
        const std::string id = run_id_of(run);
        test::Child recorder;
        recorder.start(exe("store", "mwb-record"), {"--store", q(db), "--until-end", "--gone-after", "2", q(run)});
        QVERIFY(wait_for([&] { return stored(db, id) >= 20; }));
        {
            store::Store s(db);
            QCOMPARE(s.run(id)->status, "running");  // heard from every second: not gone
        }
        trainer.signal(SIGKILL);
        trainer.wait();
        // no run.end will come: the recorder marks it after 2 s of silence, and --until-end returns
        QCOMPARE(recorder.wait(30000), 0);
        const QString out = recorder.output();
        QVERIFY2(out.contains("marked interrupted"), qPrintable(out));
        store::Store s(db);
        QCOMPARE(s.run(id)->status, "interrupted");
        QVERIFY2(s.run(id)->reason.rfind(store::Store::kSilentReason, 0) == 0, s.run(id)->reason.c_str());
    }

    void a_killed_recorder_resumes_without_gaps_or_duplicates() {
        test::TempDir t;
        const fs::path run = t / "run", db = t / "h.sqlite";
        test::Child trainer;
        trainer.start(test::trainer_exe(), test::tiny_run_args(run, 1000000));
        QVERIFY(wait_for([&] { return fs::exists(run / "telemetry.json"); }));
        const std::string id = run_id_of(run);
        {
            test::Child recorder;
            recorder.start(exe("store", "mwb-record"), {"--store", q(db), q(run)});
            QVERIFY(wait_for([&] { return stored(db, id) >= 100; }));
            recorder.signal(SIGKILL);
            recorder.wait();
        }
        const int at_kill = messages(run);
        QVERIFY(wait_for([&] { return messages(run) >= at_kill + 150; }));  // the run goes on unrecorded
        test::Child again;
        again.start(exe("store", "mwb-record"), {"--store", q(db), "--until-end", q(run)});
        QVERIFY(wait_for([&] { return stored(db, id) >= at_kill + 200; }));
        QCOMPARE(control(run, "stop")["ok"], true);
        QCOMPARE(trainer.wait(), 3);
        QCOMPARE(again.wait(), 0);
        check_store_matches(db, run);
    }

    void a_restarted_trainer_continues_the_same_history() {
        test::TempDir t;
        const fs::path run = t / "run", db = t / "h.sqlite";
        test::Child recorder;  // started first: it waits for telemetry.json
        recorder.start(exe("store", "mwb-record"), {"--store", q(db), q(run)});
        {
            test::Child first;
            first.start(test::trainer_exe(), test::tiny_run_args(run, 1000000) + QStringList{"--save", q(t / "ckpt")});
            QVERIFY(wait_for([&] { return lines(run / "metrics.jsonl") >= 100; }));
            first.signal(SIGTERM);
            QCOMPARE(first.wait(), 130);  // checkpointed, run.end "interrupted"
        }
        const std::string first_endpoint = ipc::read_run_endpoints(run).publish;
        const int before = messages(run);
        test::Child second;
        second.start(test::trainer_exe(),
                     test::tiny_run_args(run, 1000000) + QStringList{"--save", q(t / "ckpt"), "--load", q(t / "ckpt")});
        QVERIFY(wait_for([&] { return messages(run) >= before + 100; }));
        QVERIFY(ipc::read_run_endpoints(run).publish != first_endpoint);  // new ephemeral ports
        QCOMPARE(control(run, "stop")["ok"], true);
        QCOMPARE(second.wait(), 3);
        const std::string id = run_id_of(run);
        QVERIFY(wait_for([&] { return stored(db, id) == messages(run); }));
        recorder.signal(SIGTERM);
        QCOMPARE(recorder.wait(), 0);
        check_store_matches(db, run);
        store::Store s(db);
        QCOMPARE(s.events(id, "run.start").size(), std::size_t{2});
        QCOMPARE(s.events(id, "run.end").front().body["status"], "interrupted");
        QCOMPARE(s.run(id)->status, "stopped");
    }

    void control_requests_round_trip_through_the_trainer() {
        test::TempDir t;
        const fs::path run = t / "run";
        test::Child trainer;
        trainer.start(test::trainer_exe(), test::tiny_run_args(run, 1000000));
        QVERIFY(wait_for([&] { return lines(run / "metrics.jsonl") >= 5; }));
        auto client = ipc::ControlClient::for_run_dir(run);
        auto status = client.request("status", 20s, "s1");
        QCOMPARE(status["ok"], true);
        QCOMPARE(status["id"], "s1");
        QCOMPARE(status["state"], "running");
        QCOMPARE(client.request("pause", 20s, "p1")["ok"], true);
        status = client.request("status", 20s);
        QCOMPARE(status["state"], "paused");
        const int64_t paused_at = status["iteration"];
        std::this_thread::sleep_for(300ms);
        QCOMPARE(client.request("status", 20s)["iteration"], paused_at);  // nothing moves while paused
        const auto ckpt = client.request("checkpoint", 20s, "c1");
        QCOMPARE(ckpt["ok"], true);
        QVERIFY(fs::exists(ckpt["path"].get<std::string>()));
        const Result cli = run_record({"control", q(run), "status"});
        QVERIFY2(cli.code == 0 && cli.out.contains("\"state\":\"paused\""), qPrintable(cli.out));
        QCOMPARE(client.request("resume", 20s, "r1")["ok"], true);
        QVERIFY(wait_for([&] { return client.request("status", 20s)["iteration"].get<int64_t>() > paused_at; }));
        // Another local user without the token (mode 0600) is refused.
        struct stat st {};
        ::stat((run / "control.token").c_str(), &st);
        QCOMPARE(st.st_mode & 0777, 0600u);
        ipc::ControlClient stranger({ipc::read_run_endpoints(run).control, "guess", std::nullopt});
        const auto refused = stranger.request("stop", 20s);
        QCOMPARE(refused["ok"], false);
        std::ofstream(t / "wrong.token") << "0000\n";
        const Result wrong = run_record({"control", "--token-file", q(t / "wrong.token"),
                                         QString::fromStdString(ipc::read_run_endpoints(run).control), "stop"});
        QVERIFY2(wrong.code == 1 && wrong.out.contains("unauthorized"), qPrintable(wrong.out));
        QCOMPARE(client.request("stop", 20s, "x1")["ok"], true);
        QCOMPARE(trainer.wait(), 3);
        // Each applied request is an event carrying its id.
        std::map<std::string, std::string> applied;
        std::ifstream events(run / "events.jsonl");
        for (std::string line; std::getline(events, line);) {
            const auto j = nlohmann::json::parse(line);
            if (j.value("kind", "") == "control_applied") applied[j["action"]] = j["request_id"];
        }
        QCOMPARE(applied, (std::map<std::string, std::string>{
                              {"pause", "p1"}, {"checkpoint", "c1"}, {"resume", "r1"}, {"stop", "x1"}}));
    }

    void curve_is_required_off_loopback_and_works_with_keys() {
        test::TempDir t;
        const fs::path run = t / "run", db = t / "h.sqlite";
        QCOMPARE(run_record({"keygen", q(t / "server")}).code, 0);
        const Result kg = run_record({"keygen", q(t / "client")});
        QVERIFY2(kg.code == 0 && kg.out.contains("public key"), qPrintable(kg.out));
        const QStringList open = {"--telemetry-endpoint", "tcp://0.0.0.0:0",    "--telemetry-snapshot-endpoint",
                                  "tcp://0.0.0.0:0",      "--control-endpoint", "tcp://0.0.0.0:0"};
        {
            test::Child refused;
            refused.start(test::trainer_exe(), test::tiny_run_args(run, 1000000) + open);
            QCOMPARE(refused.wait(), 2);
            const QString out = refused.output();
            QVERIFY2(out.contains("telemetry_endpoint") && out.contains("not a loopback address") &&
                         out.contains("curve_secret_key_file"),
                     qPrintable(out));
            QVERIFY(!fs::exists(run / "metrics.jsonl"));
        }
        test::Child trainer;
        trainer.start(test::trainer_exe(),
                      test::tiny_run_args(run, 1000000) + open +
                          QStringList{"--curve-secret-key-file", q(t / "server.key_secret"), "--curve-client-keys",
                                      q(t / "client.key")});
        QVERIFY(wait_for([&] { return lines(run / "metrics.jsonl") >= 20; }));
        QVERIFY(!fs::exists(run / "control.token"));  // CURVE authenticates the client instead
        test::Child recorder;
        recorder.start(exe("store", "mwb-record"),
                       {"--store", q(db), "--until-end", "--curve-key", q(t / "client.key_secret"), q(run)});
        const std::string id = run_id_of(run);
        QVERIFY(wait_for([&] { return stored(db, id) >= 50; }));
        const Result plain = run_record({"control", q(run), "stop"});
        QVERIFY2(plain.code == 1 && plain.out.contains("CURVE"), qPrintable(plain.out));
        const Result stop = run_record({"control", "--curve-key", q(t / "client.key_secret"), q(run), "stop"});
        QVERIFY2(stop.code == 0 && stop.out.contains("\"ok\":true"), qPrintable(stop.out));
        QCOMPARE(trainer.wait(), 3);
        QCOMPARE(recorder.wait(), 0);
        check_store_matches(db, run);
    }

    void the_python_example_follows_a_run_from_its_start() {
        // docs/protocol.md's example, as written (skipped where Debian's python3-zmq is missing).
        if (QProcess::execute("/usr/bin/python3", {"-c", "import zmq"}) != 0)
            MWB_SKIP("/usr/bin/python3 has no zmq module");
        test::TempDir t;
        const fs::path run = t / "run";
        test::Child trainer;
        trainer.start(test::trainer_exe(), test::tiny_run_args(run, 600));
        QVERIFY(wait_for([&] { return lines(run / "metrics.jsonl") >= 40; }));
        test::Child python;  // joins late
        python.start("/usr/bin/python3", {q(test::source_dir() / "examples" / "follow_run.py"), q(run)});
        const int code = python.wait();
        const QString out = python.output();
        QVERIFY2(code == 0, qPrintable(out.right(500)));
        QCOMPARE(trainer.wait(), 0);
        QVERIFY2(out.startsWith("iteration 1: loss ") && out.contains("iteration 600: loss ") &&
                     out.count("iteration ") == 600 && out.endsWith("run ended: finished\n"),
                 qPrintable(out.right(300)));
    }

    void import_and_command_line_errors() {
        test::TempDir t;
        const fs::path run = t / "run", db = t / "h.sqlite";
        test::Child trainer;
        trainer.start(test::trainer_exe(), test::tiny_run_args(run, 30));
        QCOMPARE(trainer.wait(), 0);
        const int n = messages(run);
        Result r = run_record({"import", "--store", q(db), q(run)});
        QVERIFY2(r.code == 0 && r.out.contains(QString("%1 messages, %1 new").arg(n)), qPrintable(r.out));
        r = run_record({"import", "--store", q(db), q(run)});
        QVERIFY2(r.code == 0 && r.out.contains(QString("%1 messages, 0 new").arg(n)), qPrintable(r.out));
        check_store_matches(db, run);
        r = run_record({"runs", "--store", q(db)});
        QVERIFY2(r.code == 0 && r.out.contains(QString::fromStdString(run_id_of(run))) && r.out.contains("finished"),
                 qPrintable(r.out));

        r = run_record({"import", "--store", q(db), q(t / "nothing")});
        QVERIFY2(r.code == 1 && r.out.contains("nothing"), qPrintable(r.out));
        r = run_record({"--store", q(db), "udp://127.0.0.1:5"});
        QVERIFY2(r.code == 2 && r.out.contains("unsupported transport"), qPrintable(r.out));
        r = run_record({"--store", q(db), "tcp://127.0.0.1:notaport"});
        QVERIFY2(r.code == 2 && r.out.contains("0..65535"), qPrintable(r.out));
        r = run_record({"--store", q(db), "tcp://10.1.2.3:5555"});
        QVERIFY2(r.code == 2 && r.out.contains("CURVE"), qPrintable(r.out));
        r = run_record({"--store", q(db)});
        QVERIFY2(r.code == 2 && r.out.contains("at least one endpoint"), qPrintable(r.out));
        r = run_record({"control", q(run), "explode"});
        QCOMPARE(r.code, 2);
        r = run_record({"control", q(t / "nowhere"), "status"});
        QVERIFY2(r.code == 1 && r.out.contains("telemetry.json"), qPrintable(r.out));
        std::ofstream(t / "junk.sqlite") << std::string(4096, 'x');
        r = run_record({"import", "--store", q(t / "junk.sqlite"), q(run)});
        QVERIFY2(r.code == 1 && r.out.contains("junk.sqlite") && r.out.contains("not an SQLite database"),
                 qPrintable(r.out));
        r = run_record({"keygen"});
        QCOMPARE(r.code, 2);
    }
};

MWB_TEST_SUITE_GUILESS(test_record, TestRecord)
}  // namespace test_record
#include "test_record.moc"
