// The clone pattern over real loopback sockets: a follower ends with the complete, gap-free series
// whether it joins late, falls behind (PUB drops), the publisher restarts (same port, or new ports
// read from the run directory), its queue overflows, or the history lives on disk; and publishing
// never blocks the caller.
#include "ipc/wire_fixtures.h"
#include "support/fixtures.h"
#include "support/suite.h"

#include "mwb/ipc/follower.h"
#include "mwb/ipc/requests.h"
#include "mwb/ipc/server.h"

#include <QtTest>
#include <zmq.hpp>

#include <algorithm>
#include <fstream>

namespace test_ipc_pubsub {

using namespace mwb;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

/// Stands in for RunDir: hands each message to the server, then appends it to the run directory.
struct FakeRun {
    std::string run_id = "run-a";
    fs::path dir;  // empty: no files
    int64_t next = 0;
    std::string padding;

    std::string message(int64_t seq) const {
        std::string m = test::synthetic_message(run_id, seq);
        if (!padding.empty()) m.insert(m.size() - 1, ",\"pad\":\"" + padding + "\"");
        return m;
    }
    void publish(ipc::TelemetryServer& server, int64_t count) {
        for (int64_t i = 0; i < count; ++i, ++next) {
            const std::string m = message(next);
            server.publish(test::synthetic_topic(next), m);
            if (!dir.empty()) test::append_to_run_dir(dir, test::synthetic_topic(next), m);
        }
    }
};

ipc::ServerOptions options(const FakeRun& run) {
    ipc::ServerOptions o;
    o.run_id = run.run_id;
    o.run_dir = run.dir;
    o.control_endpoint = "";
    o.heartbeat_interval = 200ms;
    return o;
}

ipc::FollowerOptions follow(const std::string& endpoint) {
    ipc::FollowerOptions f;
    f.endpoint = endpoint;
    f.silence_timeout = 600ms;
    f.request_timeout = 1000ms;
    return f;
}

/// Sends `n` snapshot requests from `s` back to back, waits until the server has handled them all
/// (its counters, not a clock), and returns the header frames of the replies that came.
std::vector<nlohmann::json> ask_snapshots(zmq::socket_t& s, ipc::TelemetryServer& server, int n) {
    const auto handled = [&] { return server.stats().snapshot_requests + server.stats().rate_limited; };
    const uint64_t target = handled() + static_cast<uint64_t>(n);
    for (int i = 0; i < n; ++i) s.send(zmq::buffer(ipc::make_snapshot_request(0)), zmq::send_flags::none);
    test::wait_until([&] { return handled() >= target; });
    std::vector<nlohmann::json> headers;
    zmq::message_t part;
    // The replies were sent right after counting; 300 ms is only how long a reply may still be on its way.
    s.set(zmq::sockopt::rcvtimeo, 300);
    while (s.recv(part, zmq::recv_flags::none)) {
        headers.push_back(nlohmann::json::parse(part.to_string(), nullptr, false));
        while (part.more() && s.recv(part, zmq::recv_flags::none)) {
        }
    }
    return headers;
}

int count_ok(const std::vector<nlohmann::json>& headers) {
    return static_cast<int>(std::count_if(headers.begin(), headers.end(), [](const auto& h) { return h["ok"] == true; }));
}

/// Reads until message `last` of `run` arrived (or the timeout); checks order and contiguity.
void collect(ipc::Follower& f, int64_t first, int64_t last, const FakeRun& run,
             std::chrono::milliseconds timeout = 15s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int64_t expect = first;
    while (expect <= last) {
        QVERIFY2(std::chrono::steady_clock::now() < deadline,
                 qPrintable(QString("timed out waiting for seq %1 (of %2..%3)").arg(expect).arg(first).arg(last)));
        auto m = f.next(50ms);
        if (!m) continue;
        QCOMPARE(m->run_id, run.run_id);
        QCOMPARE(m->seq, expect);
        QCOMPARE(m->raw, run.message(expect));
        ++expect;
    }
}

int port_of(const std::string& endpoint) {
    return std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
}

}  // namespace

class TestIpcPubSub : public QObject {
    Q_OBJECT
private slots:
    void late_joiner_gets_the_whole_series_then_live() {
        FakeRun run;
        ipc::TelemetryServer server(options(run));
        run.publish(server, 300);
        QVERIFY(server.flush(5s));
        ipc::Follower f(follow(server.publish_endpoint()));
        collect(f, 0, 299, run);
        run.publish(server, 300);
        collect(f, 300, 599, run);
        QVERIFY(!f.next(100ms));  // nothing more, no duplicates
        QCOMPARE(f.stats().unrecoverable, 0u);
        QVERIFY(f.stats().snapshots >= 1);
        QCOMPARE(f.snapshot_endpoint(), server.snapshot_endpoint());  // learned from the welcome heartbeat
        QVERIFY(f.live());
        QCOMPARE(f.state(), "running");
    }

    void resume_from_skips_what_the_caller_has() {
        FakeRun run;
        ipc::TelemetryServer server(options(run));
        run.publish(server, 100);
        auto o = follow(server.publish_endpoint());
        o.resume_from = [](const std::string& id) { return id == "run-a" ? 60 : 0; };
        ipc::Follower f(o);
        collect(f, 60, 99, run);
    }

    void snapshots_come_in_pages() {
        FakeRun run;
        auto o = options(run);
        o.snapshot_page_messages = 7;
        ipc::TelemetryServer server(o);
        run.publish(server, 100);
        QVERIFY(server.flush(5s));
        ipc::Follower f(follow(server.publish_endpoint()));
        collect(f, 0, 99, run);
        QVERIFY(f.stats().snapshots >= 15);
        QCOMPARE(f.stats().from_snapshots, 100u);
    }

    // The snapshot socket's rate limit, counted not timed: with a refill rate no test reaches, each
    // peer (connection) gets exactly its burst, a second peer its own; the first refusal says
    // rate_limited with a retry_after_s, in the snapshot schema, and what the peer asks before that
    // time is dropped unanswered (counted).
    void snapshot_requests_are_limited_per_peer() {
        FakeRun run;
        auto o = options(run);
        o.snapshot_requests_per_s = 1e-6;
        o.snapshot_request_burst = 3;
        ipc::TelemetryServer server(o);
        run.publish(server, 10);
        QVERIFY(server.flush(5s));
        zmq::context_t ctx;
        zmq::socket_t a(ctx, zmq::socket_type::dealer), b(ctx, zmq::socket_type::dealer);
        for (zmq::socket_t* s : {&a, &b}) {
            s->set(zmq::sockopt::linger, 0);
            s->connect(server.snapshot_endpoint());
        }
        const auto first = ask_snapshots(a, server, 8);
        QCOMPARE(first.size(), std::size_t{4});  // 3 pages and one refusal
        QCOMPARE(count_ok(first), 3);
        for (const auto& h : first) {
            QCOMPARE(h["schema"], "mwb.snapshot/1");
            if (h["ok"] == true) continue;
            QCOMPARE(h["code"], "rate_limited");
            QVERIFY2(h["retry_after_s"].get<double>() > 0, h.dump().c_str());
        }
        const auto second = ask_snapshots(b, server, 4);
        QCOMPARE(second.size(), std::size_t{4});
        QCOMPARE(count_ok(second), 3);
        QCOMPARE(server.stats().rate_limited, 6u);
        QCOMPARE(server.stats().snapshot_requests, 6u);
    }

    // The reply-bytes budget is shared by all peers: once two pages (the burst) are sent, a fresh
    // connection is refused too.
    void snapshot_bytes_are_limited_across_peers() {
        FakeRun run;
        auto o = options(run);
        o.snapshot_bytes_per_s = 1e-6;
        o.snapshot_page_bytes = 2000;  // burst: 4000 bytes
        ipc::TelemetryServer server(o);
        run.publish(server, 100);
        QVERIFY(server.flush(5s));
        zmq::context_t ctx;
        std::vector<nlohmann::json> headers;
        for (int i = 0; i < 8; ++i) {
            zmq::socket_t s(ctx, zmq::socket_type::dealer);
            s.set(zmq::sockopt::linger, 0);
            s.connect(server.snapshot_endpoint());
            const auto h = ask_snapshots(s, server, 1);
            QCOMPARE(h.size(), std::size_t{1});
            headers.push_back(h[0]);
        }
        const int ok = count_ok(headers);
        QVERIFY2(ok >= 2 && ok <= 3, qPrintable(QString::number(ok)));
        for (int i = ok; i < 8; ++i) QCOMPARE(headers[static_cast<std::size_t>(i)]["code"], "rate_limited");
    }

    // A follower that is rate-limited waits as told and still gets the whole series.
    void a_rate_limited_follower_still_gets_everything() {
        FakeRun run;
        auto o = options(run);
        o.snapshot_page_messages = 7;  // 100 messages: 15 pages
        o.snapshot_requests_per_s = 50;
        o.snapshot_request_burst = 1;
        ipc::TelemetryServer server(o);
        run.publish(server, 100);
        QVERIFY(server.flush(5s));
        ipc::Follower f(follow(server.publish_endpoint()));
        collect(f, 0, 99, run);
        QCOMPARE(f.stats().from_snapshots, 100u);
        QCOMPARE(f.stats().malformed, 0u);
        QCOMPARE(f.stats().rate_limited, server.stats().rate_limited);
    }

    void slow_subscriber_loses_live_messages_and_refills_them() {
        FakeRun run;
        run.padding = std::string(2000, 'x');
        auto o = options(run);
        o.publish_hwm = 10;
        ipc::TelemetryServer server(o);
        auto fo = follow(server.publish_endpoint());
        fo.receive_hwm = 10;
        ipc::Follower f(fo);
        run.publish(server, 1);
        collect(f, 0, 0, run);
        run.publish(server, 8000);  // ~16 MB while the follower does not read: PUB drops
        QVERIFY(server.flush(10s));
        collect(f, 1, 8000, run, 30s);
        qInfo("gaps %llu, %llu of 8000 from snapshots", static_cast<unsigned long long>(f.stats().gaps),
              static_cast<unsigned long long>(f.stats().from_snapshots));
        QVERIFY2(f.stats().from_snapshots > 0, "expected the PUB socket to drop some messages");
        QCOMPARE(f.stats().unrecoverable, 0u);
    }

    void publisher_restart_on_the_same_ports_continues_the_series() {
        test::TempDir t;
        FakeRun run;
        run.dir = t.path();
        std::string pub, snap;
        std::unique_ptr<ipc::Follower> f;
        {
            ipc::TelemetryServer a(options(run));
            pub = a.publish_endpoint();
            snap = a.snapshot_endpoint();
            f = std::make_unique<ipc::Follower>(follow(pub));
            run.publish(a, 100);
            collect(*f, 0, 99, run);
        }
        auto o = options(run);
        o.publish_endpoint = pub;
        o.snapshot_endpoint = snap;
        ipc::TelemetryServer b(o);  // a resumed trainer: same run directory, seq continues
        QCOMPARE(port_of(b.publish_endpoint()), port_of(pub));
        run.publish(b, 100);
        collect(*f, 100, 199, run);
        QVERIFY(!f->next(200ms));
    }

    void run_directory_endpoint_follows_new_ephemeral_ports() {
        test::TempDir t;
        FakeRun run;  // messages only on the wire: the follower must find the new publisher
        auto write_info = [&](const ipc::TelemetryServer& s) {
            std::ofstream(t / ipc::kTelemetryInfoFile) << s.info().dump(2);
        };
        auto fo = follow(t.path().string());
        fo.silence_timeout = 400ms;
        ipc::Follower f(fo);
        {
            ipc::TelemetryServer a(options(run));
            write_info(a);
            run.publish(a, 50);
            collect(f, 0, 49, run);
        }
        ipc::TelemetryServer b(options(run));
        write_info(b);
        run.publish(b, 50);
        collect(f, 50, 99, run);
        QVERIFY(f.stats().reconnects >= 1);
        QCOMPARE(f.stats().from_files, 0u);
    }

    void a_run_directory_without_a_publisher_is_read_from_its_files() {
        test::TempDir t;
        FakeRun run;
        run.dir = t.path();
        {
            ipc::TelemetryServer a(options(run));
            std::ofstream(t / ipc::kTelemetryInfoFile) << a.info().dump(2);
            run.publish(a, 80);
        }  // the trainer is gone before anyone listened
        ipc::Follower f(follow(t.path().string()));
        collect(f, 0, 79, run);
        QCOMPARE(f.stats().from_files, 80u);
    }

    void queue_overflow_is_recovered_from_the_run_directory() {
        test::TempDir t;
        FakeRun run;
        run.dir = t.path();
        auto o = options(run);
        o.queue_capacity = 1;
        ipc::TelemetryServer server(o);
        run.publish(server, 3000);
        QVERIFY(server.flush(5s));
        ipc::Follower f(follow(server.publish_endpoint()));
        collect(f, 0, 2999, run);
        QVERIFY2(server.stats().dropped > 0, "a queue of one message should have overflowed");
        QVERIFY(server.stats().recovered > 0);
        QCOMPARE(server.stats().last_seq, 2999);
    }

    void history_beyond_the_memory_budget_is_served_from_disk() {
        test::TempDir t;
        FakeRun run;
        run.dir = t.path();
        auto o = options(run);
        o.history_budget_bytes = 4096;
        ipc::TelemetryServer server(o);
        run.publish(server, 500);
        ipc::Follower f(follow(server.publish_endpoint()));
        collect(f, 0, 499, run);
    }

    void restarted_publisher_reloads_the_run_directory() {
        test::TempDir t;
        FakeRun run;
        run.dir = t.path();
        for (; run.next < 120; ++run.next)
            test::append_to_run_dir(t.path(), test::synthetic_topic(run.next), run.message(run.next));
        ipc::TelemetryServer server(options(run));
        QCOMPARE(server.stats().last_seq, 119);
        ipc::Follower f(follow(server.publish_endpoint()));
        collect(f, 0, 119, run);
        run.publish(server, 30);
        collect(f, 120, 149, run);
    }

    void a_new_run_on_the_endpoint_is_followed_from_its_start() {
        FakeRun a, b;
        b.run_id = "run-b";
        std::string pub, snap;
        auto fo = follow("tcp://127.0.0.1:1");
        std::unique_ptr<ipc::Follower> f;
        {
            ipc::TelemetryServer s(options(a));
            pub = s.publish_endpoint();
            snap = s.snapshot_endpoint();
            fo.endpoint = pub;
            f = std::make_unique<ipc::Follower>(fo);
            a.publish(s, 20);
            collect(*f, 0, 19, a);
        }
        auto o = options(b);
        o.publish_endpoint = pub;
        o.snapshot_endpoint = snap;
        ipc::TelemetryServer s(o);
        b.publish(s, 20);
        collect(*f, 0, 19, b);
        QCOMPARE(f->run_id(), "run-b");
        QCOMPARE(f->stats().runs, 2u);
    }

    void heartbeats_announce_the_run_and_its_end() {
        FakeRun run;
        auto fo = follow("tcp://127.0.0.1:1");
        fo.deliver_heartbeats = true;
        std::unique_ptr<ipc::Follower> f;
        {
            ipc::TelemetryServer server(options(run));
            fo.endpoint = server.publish_endpoint();
            f = std::make_unique<ipc::Follower>(fo);
            std::optional<ipc::Message> hb;
            QVERIFY(test::wait_until([&] { return (hb = f->next(20ms)).has_value(); }));
            QVERIFY(hb->is_heartbeat());
            QCOMPARE(hb->seq, -1);  // nothing published yet
            QCOMPARE(hb->body["endpoints"]["snapshot"], server.snapshot_endpoint());
            run.publish(server, 3);
            QVERIFY(server.flush(2s));
        }
        bool ended = false;
        QVERIFY(test::wait_until(
            [&] {
                while (auto m = f->next(10ms)) ended = ended || (m->is_heartbeat() && m->body["state"] == "ended");
                return ended;
            },
            5s));
        QCOMPARE(f->state(), "ended");
        QCOMPARE(f->next_seq(), 3);
    }

    void publish_never_blocks_the_caller() {
        // A subscriber that never reads (its socket holds one message): the sender keeps going. Checked
        // by counts, not time (a loaded 2-core machine makes any time bound flaky): all 20,000 calls
        // return while the subscriber is stalled, and every message is accounted for: sent on the socket
        // or refused by the full queue (and counted), and all of them in the history for snapshots. A
        // publish() that waited for the subscriber would hang here until ctest's timeout. The cost per
        // call is a benchmark: mwb-bench-publish (docs/performance.md).
        FakeRun run;
        run.padding = std::string(800, 'p');  // about the size of a real step record
        auto o = options(run);
        o.history_budget_bytes = std::size_t{1} << 30;
        ipc::TelemetryServer server(o);
        auto fo = follow(server.publish_endpoint());
        fo.receive_hwm = 1;
        ipc::Follower idle(fo);
        idle.next(100ms);
        constexpr int64_t kMessages = 20000;
        for (int64_t s = 0; s < kMessages; ++s) server.publish(test::synthetic_topic(s), run.message(s));
        QVERIFY(server.flush(60s));
        const ipc::ServerStats st = server.stats();
        qInfo("%llu sent, %llu dropped by the queue", static_cast<unsigned long long>(st.published),
              static_cast<unsigned long long>(st.dropped));
        QCOMPARE(st.published + st.dropped, static_cast<uint64_t>(kMessages));
        QCOMPARE(st.last_seq, kMessages - 1);
        QVERIFY(idle.stats().delivered <= 1);  // it really never read
    }
};

MWB_TEST_SUITE_GUILESS(test_ipc_pubsub, TestIpcPubSub)
}  // namespace test_ipc_pubsub
#include "test_pubsub.moc"
