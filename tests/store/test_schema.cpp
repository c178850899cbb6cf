// The store file: a new one gets the current schema in WAL mode; a version-1 file as users have it
// (tests/store/fixtures/store_v1.sql, frozen) migrates with its data; newer, foreign and broken files
// are refused with the file named.
#include "ipc/wire_fixtures.h"
#include "store_fixtures.h"
#include "support/fixtures.h"
#include "support/suite.h"

#include "mwb/ipc/message.h"
#include "mwb/store/error.h"
#include "mwb/store/schema.h"
#include "mwb/store/store.h"

#include <QtTest>

#include <sqlite3.h>

#include <fstream>
#include <sstream>

namespace test_store_schema {

using namespace mwb;
namespace fs = std::filesystem;

namespace {

const std::string kRunA = "20250301-101500-gpt-0a1b2c3d", kRunB = "20250302-090000-gpt-99887766";

/// A real version-1 file, made from the frozen dump.
fs::path make_v1(const test::TempDir& t) {
    return test::store_from_dump("store_v1.sql", t / "old.sqlite");
}

template <typename F>
QString error_of(F&& f) {
    try {
        f();
    } catch (const store::Error& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

}  // namespace

class TestStoreSchema : public QObject {
    Q_OBJECT
private slots:
    void a_new_store_has_the_current_schema_in_wal_mode() {
        test::TempDir t;
        store::Store s(t / "sub" / "history.sqlite");
        QCOMPARE(s.database().user_version(), store::kSchemaVersion);
        auto mode = s.database().prepare("PRAGMA journal_mode");
        QVERIFY(mode.step());
        QCOMPARE(mode.text(0), "wal");
        QCOMPARE(s.database().scalar_int("PRAGMA page_size"), 8192);
        for (const char* table : {"runs", "messages", "steps", "evals", "events", "memory", "run_tags", "step_blocks"})
            QVERIFY2(s.database().scalar_int(std::string("SELECT count(*) FROM sqlite_schema WHERE name = '") + table +
                                             "'") == 1,
                     table);
        QVERIFY(s.runs().empty());
    }

    void version_one_files_migrate_with_their_data() {
        test::TempDir t;
        const fs::path file = make_v1(t);
        {
            store::Database raw(file);
            QCOMPARE(raw.user_version(), 1);
        }
        store::Store s(file);
        QCOMPARE(s.database().user_version(), store::kSchemaVersion);
        const auto runs = s.runs();
        QCOMPARE(runs.size(), std::size_t{2});
        QCOMPARE(runs[0].uid, kRunB);  // newest first
        const auto a = s.run(kRunA);
        QVERIFY(a);
        QCOMPARE(a->status, "finished");
        QCOMPARE(a->tags, (std::vector<std::string>{"baseline", "lr-sweep"}));  // text column -> run_tags rows
        QCOMPARE(a->notes, "first try");
        QCOMPARE(a->config["hidden_size"], 64);
        QCOMPARE(a->hosts, nlohmann::json::array({"node1"}));
        QCOMPARE(a->next_seq, 205);
        QCOMPARE(*a->train_iters, 200);
        QCOMPARE(s.run(kRunB)->tags, std::vector<std::string>{"lr-sweep"});
        store::RunFilter by_tag;
        by_tag.tag = "lr-sweep";
        QCOMPARE(s.runs(by_tag).size(), std::size_t{2});
        // Old steps are downsampled through blocks built by the migration, exactly as the brute force.
        store::SeriesQuery q;
        q.buckets = 10;
        const auto fast = s.series(kRunA, "lm_loss", q), slow = s.series_brute_force(kRunA, "lm_loss", q);
        QCOMPARE(fast.points, 200);
        QCOMPARE(fast.buckets.size(), std::size_t{10});
        for (std::size_t i = 0; i < fast.buckets.size(); ++i) {
            QCOMPARE(fast.buckets[i].y_max, slow.buckets[i].y_max);
            QCOMPARE(fast.buckets[i].n, slow.buckets[i].n);
        }
        // Columns added by version 2 are there, empty, for old rows; the unknown field survived in extra.
        QCOMPARE(s.series(kRunA, "forward_s").points, 0);
        QCOMPARE(s.series(kRunA, "iterations_in_interval").points, 4);
        QCOMPARE(s.evals(kRunA).size(), std::size_t{2});
        QCOMPARE(s.events(kRunA, "event").front().kind, "checkpoint_saved");
        // The recorder resumes run B where version 1 stopped, and replays are still ignored.
        QCOMPARE(s.next_seq(kRunB), 41);
        QVERIFY(!s.ingest(*ipc::parse_message(test::wire_message(kRunB, 40, "step", {{"iteration", 40}}))));
        QVERIFY(s.ingest(*ipc::parse_message(
            test::wire_message(kRunB, 41, "step", {{"iteration", 41}, {"mem_peak_bytes_max_rank", 7}}))));
        QCOMPARE(s.next_seq(kRunB), 42);
        QCOMPARE(s.series(kRunB, "mem_peak_bytes_max_rank").points, 1);
        // Version 3 starts each run's last_seen at its newest step's time.
        auto seen = s.database().prepare(
            "SELECT r.last_seen, (SELECT max(time) FROM steps WHERE run = r.id) FROM runs r WHERE r.uid = ?");
        seen.bind(1, kRunA);
        QVERIFY(seen.step());
        QCOMPARE(seen.real(0), seen.real(1));
    }

    void a_silent_or_gone_run_is_no_longer_running() {
        test::TempDir t;
        store::Store s(t / "h.sqlite");
        const std::string a = "20260101-000000-a-00000001", b = "20260101-000000-b-00000002";
        for (const auto& uid : {a, b})
            QVERIFY(s.ingest(*ipc::parse_message(test::wire_message(uid, 0, "run.start", {{"config", {}}}))));
        QCOMPARE(s.run(a)->status, "running");
        s.note_alive(a, 1000);
        s.note_alive(b, 1050);
        // a is silent for 70 s at t = 1070, b for 20 s: only a goes
        QCOMPARE(s.mark_silent_runs(1070, 60), std::vector<std::string>{a});
        QCOMPARE(s.run(a)->status, "interrupted");
        QVERIFY2(s.run(a)->reason.rfind(store::Store::kSilentReason, 0) == 0, s.run(a)->reason.c_str());
        QCOMPARE(*s.run(a)->finished, 1000.0);
        QCOMPARE(s.run(b)->status, "running");
        // heard again (a network outage, not a death): running again
        s.note_alive(a, 1080);
        QCOMPARE(s.run(a)->status, "running");
        QVERIFY(s.run(a)->reason.empty());
        // a local process killed: interrupted by the app, once; a run that said how it ended keeps that
        QVERIFY(s.mark_gone(b, "interrupted", "killed by signal 9 (SIGKILL)", 1090));
        QCOMPARE(s.run(b)->status, "interrupted");
        QCOMPARE(s.run(b)->reason, "killed by signal 9 (SIGKILL)");
        QVERIFY(!s.mark_gone(b, "failed", "again", 1100));
        QCOMPARE(s.run(b)->reason, "killed by signal 9 (SIGKILL)");
        s.note_alive(b, 1110);  // only silence is undone by hearing from the run
        QCOMPARE(s.run(b)->status, "interrupted");
        QVERIFY(s.ingest(*ipc::parse_message(test::wire_message(a, 1, "run.end", {{"status", "finished"}}))));
        QVERIFY(!s.mark_gone(a, "failed", "exit status 1", 1200));
        QCOMPARE(s.run(a)->status, "finished");
        QVERIFY(s.mark_silent_runs(5000, 60).empty());
        QVERIFY(!error_of([&] { s.mark_gone(a, "finished", "", 1); }).isEmpty());
    }

    void two_processes_opening_an_old_file_migrate_it_once() {
        test::TempDir t;
        const fs::path file = make_v1(t);
        store::Store a(file);
        store::Store b(file);
        QCOMPARE(b.database().user_version(), store::kSchemaVersion);
        QCOMPARE(b.runs().size(), std::size_t{2});
    }

    void migrations_run_one_version_at_a_time() {
        test::TempDir t;
        store::Database db(t / "x.sqlite");
        QCOMPARE(store::migrate(db, 1), 0);
        QCOMPARE(db.user_version(), 1);
        db.exec("INSERT INTO runs (uid, tags) VALUES ('r', 'a,b,,a')");
        QCOMPARE(store::migrate(db), 1);
        QCOMPARE(db.scalar_int("SELECT count(*) FROM run_tags"), 2);
        QCOMPARE(store::migrate(db), store::kSchemaVersion);  // nothing left to do
    }

    void newer_foreign_and_broken_files_are_refused() {
        test::TempDir t;
        {
            store::Database db(t / "future.sqlite");
            db.exec("PRAGMA user_version = 99");
        }
        QString err = error_of([&] { store::Store s(t / "future.sqlite"); });
        QVERIFY2(err.contains("future.sqlite") && err.contains("schema version 99") && err.contains(QString("up to %1").arg(store::kSchemaVersion)),
                 qPrintable(err));
        {
            store::Database db(t / "foreign.sqlite");
            db.exec("CREATE TABLE photos (id INTEGER)");
        }
        err = error_of([&] { store::Store s(t / "foreign.sqlite"); });
        QVERIFY2(err.contains("foreign.sqlite") && err.contains("not an mwb store"), qPrintable(err));
        std::ofstream(t / "junk.sqlite") << std::string(5000, 'j');
        err = error_of([&] { store::Store s(t / "junk.sqlite"); });
        QVERIFY2(err.contains("junk.sqlite") && err.contains("not an SQLite database"), qPrintable(err));
        fs::create_directories(t / "dir.sqlite");
        err = error_of([&] { store::Store s(t / "dir.sqlite"); });
        QVERIFY2(err.contains("dir.sqlite"), qPrintable(err));
    }
};

MWB_TEST_SUITE_GUILESS(test_store_schema, TestStoreSchema)
}  // namespace test_store_schema
#include "test_schema.moc"
