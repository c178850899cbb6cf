// ipc/ without sockets: message and request validation, endpoints and the loopback rule, CURVE key
// files, tokens and private files, reading run directories back (index, torn lines, paging), and the
// history's memory budget with evicted messages served from the run directory.
#include "ipc/wire_fixtures.h"
#include "support/fixtures.h"

#include "mwb/ipc/curve.h"
#include "mwb/ipc/endpoint.h"
#include "mwb/ipc/error.h"
#include "mwb/ipc/history.h"
#include "mwb/ipc/message.h"
#include "mwb/ipc/private_file.h"
#include "mwb/ipc/requests.h"
#include "mwb/ipc/run_dir_log.h"

#include "support/skip.h"
#include "support/suite.h"

#include <QtTest>

#include <sys/stat.h>

#include <fstream>
#include <set>

namespace test_ipc_schema {

using namespace mwb;
namespace fs = std::filesystem;

namespace {

unsigned mode_of(const fs::path& p) {
    struct stat st {};
    ::stat(p.c_str(), &st);
    return st.st_mode & 0777;
}

template <typename F>
QString error_of(F&& f) {
    try {
        f();
    } catch (const ipc::Error& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

}  // namespace

class TestIpcSchema : public QObject {
    Q_OBJECT
private slots:
    void messages_validate_the_envelope_and_tolerate_the_rest() {
        const std::string good = test::wire_message("r1", 7, "step", {{"iteration", 3}, {"new_field", {1, 2}}});
        const auto m = ipc::parse_message(good);
        QVERIFY(m);
        QCOMPARE(m->seq, 7);
        QCOMPARE(m->topic, "step");
        QCOMPARE(m->run_id, "r1");
        QCOMPARE(m->raw, good);
        QVERIFY(ipc::parse_message(test::wire_message("r1", 0, "future.topic")));  // unknown topics pass
        QVERIFY(ipc::parse_message(test::wire_message("r1", -1, "heartbeat")));    // nothing published yet
        auto with = [](const char* key, nlohmann::json v) {
            auto j = nlohmann::json::parse(test::wire_message("r", 1, "step"));
            if (v.is_discarded())
                j.erase(key);
            else
                j[key] = v;
            return j.dump();
        };
        const std::pair<std::string, std::string> bad[] = {
            {with("schema", "mwb.telemetry/2"), "schema"},
            {with("schema", "mwb.telemetry/1x"), "schema"},
            {with("seq", -1), "seq"},
            {with("seq", 1.5), "seq"},
            {with("seq", "1"), "seq"},
            {with("seq", nlohmann::json(nlohmann::json::value_t::discarded)), "seq"},
            {with("topic", "Step!"), "topic"},
            {with("topic", std::string(100, 'a')), "topic"},
            {with("run_id", ""), "run_id"},
            {with("time", "now"), "time"},
            {"[1,2,3]", "object"},
            {"{\"schema\":", "object"},
            {std::string(ipc::kMaxMessageBytes + 1, ' '), "exceeds"},
        };
        for (const auto& [json, field] : bad) {
            std::string why;
            QVERIFY2(!ipc::parse_message(json, &why), json.substr(0, 80).c_str());
            QVERIFY2(why.find(field) != std::string::npos, why.c_str());
        }
        QVERIFY(ipc::parse_message(with("schema", "mwb.telemetry/1.4")));  // minor versions add, never break
        // The publisher's fast path reads the seq of RunDir's own layout, and nothing else.
        QCOMPARE(ipc::envelope_seq(good, "step").value_or(-1), 7);
        QVERIFY(!ipc::envelope_seq(good, "eval"));
        QVERIFY(!ipc::envelope_seq(with("seq", 1.5), "step"));
        QVERIFY(
            !ipc::envelope_seq(R"({"topic":"step","schema":"mwb.telemetry/1","run_id":"r","seq":1,"time":1})", "step"));
        QVERIFY(!ipc::envelope_seq(R"({"schema":"mwb.telemetry/1","topic":"step","run_id":"r","seq":-3,"time":1})",
                                   "step"));
        QVERIFY(
            !ipc::envelope_seq(R"({"schema":"mwb.telemetry/1","topic":"step","run_id":"","seq":3,"time":1})", "step"));
        QVERIFY(!ipc::envelope_seq("", "step"));
    }

    void requests_round_trip_and_reject_malformed_input() {
        const auto s = ipc::parse_snapshot_request(ipc::make_snapshot_request(42, 10));
        QVERIFY(s && s->since == 42 && s->max == 10);
        const auto c = ipc::parse_control_request(ipc::make_control_request("pause", "id-1", "tok"));
        QVERIFY(c && c->action == "pause" && c->id == "id-1" && c->token == "tok");
        for (const char* body : {R"({"schema":"mwb.snapshot/1","since":-1})", R"({"schema":"mwb.snapshot/1"})",
                                 R"({"schema":"mwb.snapshot/1","since":0,"max":0})",
                                 R"({"schema":"mwb.control/1","since":0})", "null", ""})
            QVERIFY2(!ipc::parse_snapshot_request(body), body);
        for (const char* body :
             {R"({"schema":"mwb.control/1","action":"explode"})", R"({"schema":"mwb.control/1"})",
              R"({"schema":"mwb.control/1","action":"stop","id":5})", R"({"schema":"mwb.snapshot/1","action":"stop"})"})
            QVERIFY2(!ipc::parse_control_request(body), body);
        QVERIFY(!ipc::parse_control_request(std::string(ipc::kMaxRequestBytes + 1, ' ')));
    }

    void endpoints_parse_and_loopback_is_decided_by_address() {
        const auto e = ipc::parse_endpoint("tcp://127.0.0.1:0");
        QCOMPARE(e.host, "127.0.0.1");
        QCOMPARE(e.port, 0);
        QCOMPARE(ipc::parse_endpoint("tcp://[::1]:5555").host, "::1");
        QCOMPARE(ipc::parse_endpoint("ipc:///tmp/x.sock").path, "/tmp/x.sock");
        for (const char* loop : {"tcp://127.0.0.1:1", "tcp://127.8.9.10:1", "tcp://localhost:1", "tcp://[::1]:1",
                                 "ipc:///tmp/s", "inproc://x"})
            QVERIFY2(ipc::is_loopback(ipc::parse_endpoint(loop)), loop);
        for (const char* open : {"tcp://0.0.0.0:1", "tcp://*:1", "tcp://192.168.1.4:1", "tcp://eth0:1", "tcp://[::]:1",
                                 "tcp://node7:1", "tcp://128.0.0.1:1"})
            QVERIFY2(!ipc::is_loopback(ipc::parse_endpoint(open)), open);
        for (const char* bad :
             {"127.0.0.1:5", "tcp://127.0.0.1", "tcp://127.0.0.1:70000", "tcp://:5", "udp://x:1", "tcp://h:port"}) {
            const QString err = error_of([&] { ipc::parse_endpoint(bad, "telemetry endpoint"); });
            QVERIFY2(err.contains("telemetry endpoint") && err.contains(bad), qPrintable(err));
        }
        QCOMPARE(ipc::connectable_endpoint("tcp://0.0.0.0:4100", "tcp://node7:4099"), "tcp://node7:4100");
        QCOMPARE(ipc::connectable_endpoint("tcp://0.0.0.0:4100", "tcp://[fe80::1]:4099"), "tcp://[fe80::1]:4100");
        QCOMPARE(ipc::connectable_endpoint("ipc:///tmp/a", "tcp://node7:4099"), "ipc:///tmp/a");
    }

    void curve_key_files_round_trip_with_private_modes() {
        if (!ipc::curve_available()) MWB_SKIP("libzmq without CURVE");
        test::TempDir t;
        const auto keys = ipc::generate_key_pair();
        QVERIFY(ipc::valid_z85_key(keys.public_key) && ipc::valid_z85_key(keys.secret_key));
        const auto [pub, sec] = ipc::write_key_files(t / "alice", keys);
        QCOMPARE(pub, t / "alice.key");
        QCOMPARE(sec, t / "alice.key_secret");
        QCOMPARE(mode_of(sec), 0600u);
        QCOMPARE(mode_of(pub), 0644u);
        const auto loaded = ipc::load_secret_key_file(sec);
        QCOMPARE(loaded.public_key, keys.public_key);
        QCOMPARE(loaded.secret_key, keys.secret_key);
        QCOMPARE(ipc::load_public_key(pub), keys.public_key);
        QCOMPARE(ipc::load_public_key(keys.public_key), keys.public_key);  // a bare key works too
        // Allowed clients: a directory of NAME.key, a certificate, or a list.
        const auto bob = ipc::generate_key_pair();
        ipc::write_key_files(t / "bob", bob);
        fs::create_directories(t / "clients");
        fs::copy(t / "alice.key", t / "clients" / "alice.key");
        fs::copy(t / "bob.key", t / "clients" / "bob.key");
        fs::copy(t / "bob.key_secret", t / "clients" / "bob.key_secret");  // not a .key: ignored
        QCOMPARE(ipc::load_public_keys(t / "clients").size(), std::size_t{2});
        std::ofstream(t / "list.txt") << "# admitted\n" << keys.public_key << "\n\n" << bob.public_key << "\n";
        QCOMPARE(ipc::load_public_keys(t / "list.txt"), (std::vector<std::string>{keys.public_key, bob.public_key}));
        // Errors name the file.
        std::ofstream(t / "junk.txt") << "not a key\n";
        QVERIFY(error_of([&] { ipc::load_public_keys(t / "junk.txt"); }).contains("junk.txt"));
        QVERIFY(error_of([&] { ipc::load_secret_key_file(pub); }).contains("alice.key"));
        QVERIFY(error_of([&] { ipc::load_secret_key_file(t / "missing"); }).contains("missing"));
        fs::create_directories(t / "empty");
        QVERIFY(error_of([&] { ipc::load_public_keys(t / "empty"); }).contains("no public key"));
        // A czmq certificate written elsewhere (indentation, metadata section) reads the same.
        std::ofstream(t / "czmq.key")
            << "#   ZeroMQ CURVE Public Certificate\nmetadata\n    name = \"x\"\ncurve\n    public-key = \""
            << bob.public_key << "\"\n";
        QCOMPARE(ipc::load_public_key(t / "czmq.key"), bob.public_key);
    }

    void tokens_are_random_private_and_compared_in_full() {
        test::TempDir t;
        std::set<std::string> seen;
        for (int i = 0; i < 100; ++i) {
            const std::string tok = ipc::random_token();
            QCOMPARE(tok.size(), std::size_t{64});
            QVERIFY(seen.insert(tok).second);
        }
        const std::string tok = ipc::create_token_file(t / "control.token");
        QCOMPARE(mode_of(t / "control.token"), 0600u);
        QCOMPARE(ipc::read_token_file(t / "control.token"), tok);
        QVERIFY(ipc::tokens_equal(tok, tok));
        QVERIFY(!ipc::tokens_equal(tok, tok.substr(0, 63)));
        QVERIFY(!ipc::tokens_equal(tok, ""));
        QVERIFY(!ipc::tokens_equal("", tok));
        QVERIFY(ipc::tokens_equal("", ""));
        QVERIFY(error_of([&] { ipc::read_token_file(t / "nope"); }).contains("nope"));
        // Rewriting keeps the mode (and the write is atomic: no temp files left behind).
        ipc::create_token_file(t / "control.token");
        QCOMPARE(mode_of(t / "control.token"), 0600u);
        QCOMPARE(std::distance(fs::directory_iterator(t.path()), fs::directory_iterator()), 1);
    }

    void run_dir_log_indexes_merges_and_waits_for_torn_lines() {
        test::TempDir t;
        for (int64_t s = 0; s < 200; ++s)
            test::append_to_run_dir(t.path(), test::synthetic_topic(s), test::synthetic_message("r", s));
        std::ofstream(t / "metrics.jsonl", std::ios::app) << "not json\n";
        std::ofstream(t / "metrics.jsonl", std::ios::app) << test::synthetic_message("r", 200).substr(0, 20);  // torn
        ipc::RunDirLog log(t.path());
        log.refresh();
        QCOMPARE(log.size(), std::size_t{200});
        QCOMPARE(log.last_seq(), 199);
        QCOMPARE(log.malformed_lines(), std::size_t{1});
        const auto page = log.read(50, 30, SIZE_MAX);
        QCOMPARE(page.size(), std::size_t{30});
        for (std::size_t i = 0; i < page.size(); ++i) {
            QCOMPARE(page[i].seq, static_cast<int64_t>(50 + i));
            QCOMPARE(page[i].json, test::synthetic_message("r", page[i].seq));
        }
        QCOMPARE(log.read(0, 1000, 1).size(), std::size_t{1});  // the first one even when alone over the limit
        // The torn line completes: now it counts.
        std::ofstream(t / "metrics.jsonl", std::ios::app) << test::synthetic_message("r", 200).substr(20) << "\n";
        log.refresh();
        QCOMPARE(log.last_seq(), 200);
        QCOMPARE(log.tail_start(SIZE_MAX), 0);
        // Streaming, in seq order over both files.
        int64_t expect = 0;
        std::size_t malformed = 0;
        const auto n = ipc::for_each_run_dir_message(
            t.path(), [&](ipc::Message&& m) { QCOMPARE(m.seq, expect++); }, &malformed);
        QCOMPARE(n, std::size_t{201});
        QCOMPARE(malformed, std::size_t{1});
        QVERIFY(
            error_of([&] { ipc::for_each_run_dir_message(t / "nothing", [](ipc::Message&&) {}); }).contains("nothing"));
    }

    void history_keeps_a_budget_and_serves_the_rest_from_disk() {
        test::TempDir t;
        const std::size_t one = test::synthetic_message("r", 1).size();
        ipc::History h(20 * one, t.path());
        for (int64_t s = 0; s < 300; ++s) {
            const std::string m = test::synthetic_message("r", s);
            test::append_to_run_dir(t.path(), test::synthetic_topic(s), m);
            QVERIFY(h.append(s, test::synthetic_topic(s), m));
        }
        QVERIFY(!h.append(299, "step", "{}"));  // not newer: refused
        QVERIFY(h.memory_count() <= 21 && h.memory_count() >= 15);
        QCOMPARE(h.first_seq(), 0);
        // Page through everything: memory and disk give one gap-free series.
        int64_t next = 0;
        while (next < 300) {
            const auto page = h.since(next, 37, 50 * one);
            QVERIFY(!page.empty());
            for (const auto& e : page) {
                QCOMPARE(e.seq, next);
                QCOMPARE(e.json, test::synthetic_message("r", next));
                ++next;
            }
        }
        QVERIFY(h.since(300, 10, SIZE_MAX).empty());
        // A restarted publisher reloads the directory, keeping only the newest in memory.
        ipc::History again(20 * one, t.path());
        again.load_run_dir();
        QCOMPARE(again.last_seq(), 299);
        QVERIFY(again.memory_count() <= 21);
        QCOMPARE(again.since(0, 5, SIZE_MAX).front().seq, 0);
        QCOMPARE(again.since(123, 1, SIZE_MAX).front().json, test::synthetic_message("r", 123));
        // Without a run directory, evicted messages are gone (the server's budget is large).
        ipc::History bare(3 * one, {});
        for (int64_t s = 0; s < 10; ++s) bare.append(s, "step", test::synthetic_message("r", s));
        QCOMPARE(bare.since(0, 100, SIZE_MAX).front().seq, 10 - static_cast<int64_t>(bare.memory_count()));
    }
};

MWB_TEST_SUITE_GUILESS(test_ipc_schema, TestIpcSchema)
}  // namespace test_ipc_schema
#include "test_schema.moc"
