// Malformed input never crashes a rank or a watcher: random and mutated frames to the snapshot and
// control ROUTERs and to the PUB socket's subscription side, garbage from a rogue publisher and a
// rogue snapshot server to a follower, and mutated messages to the parsers. Everything is counted,
// and the servers keep answering valid requests afterwards.
#include "ipc/wire_fixtures.h"
#include "support/fixtures.h"
#include "support/suite.h"

#include "mwb/ipc/control_client.h"
#include "mwb/ipc/follower.h"
#include "mwb/ipc/message.h"
#include "mwb/ipc/private_file.h"
#include "mwb/ipc/requests.h"
#include "mwb/ipc/server.h"

#include <QtTest>

#include <zmq.hpp>

#include <random>

namespace test_ipc_fuzz {

using namespace mwb;
using namespace std::chrono_literals;

namespace {

/// Random bytes, mutated valid JSON, or near-valid requests with wrong types.
std::string fuzz_frame(std::mt19937& rng, const std::string& valid) {
    std::uniform_int_distribution<int> pick(0, 9), byte(0, 255);
    std::string s;
    switch (pick(rng)) {
        case 0: {
            s.resize(std::uniform_int_distribution<std::size_t>(0, 300)(rng));
            for (char& c : s) c = static_cast<char>(byte(rng));
            break;
        }
        case 1:
            s = std::string(std::uniform_int_distribution<std::size_t>(4097, 60000)(rng), '{');
            break;  // deep / big
        case 2:
            s = "[" + std::string(3000, '[');
            break;
        case 3:
            s = R"({"schema":"mwb.control/1","action":["pause"],"id":{"a":1},"token":7})";
            break;
        case 4:
            s = R"({"schema":"mwb.snapshot/1","since":1e300,"max":-5})";
            break;
        case 5:
            s = R"({"schema":"mwb.snapshot/1","since":9223372036854775807})";
            break;
        case 6:
            s = "\"just a string\"";
            break;
        default: {
            s = valid;
            const int edits = std::uniform_int_distribution<int>(1, 8)(rng);
            for (int e = 0; e < edits && !s.empty(); ++e) {
                const std::size_t at = std::uniform_int_distribution<std::size_t>(0, s.size() - 1)(rng);
                switch (pick(rng) % 3) {
                    case 0:
                        s[at] = static_cast<char>(byte(rng));
                        break;
                    case 1:
                        s.erase(at, 1);
                        break;
                    default:
                        s.insert(at, 1, "{}[]\",:0"[byte(rng) % 8]);
                        break;
                }
            }
        }
    }
    return s;
}

/// Sends `n` fuzzed multipart messages (0..5 frames) from a fresh DEALER to `endpoint`.
void bombard(const std::string& endpoint, const std::string& valid, std::mt19937& rng, int n) {
    zmq::context_t ctx;
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 2000);
    s.connect(endpoint);
    for (int i = 0; i < n; ++i) {
        const int frames = std::uniform_int_distribution<int>(0, 5)(rng);
        if (frames == 0) {
            s.send(zmq::buffer(fuzz_frame(rng, valid)), zmq::send_flags::none);
            continue;
        }
        for (int f = 0; f < frames; ++f)
            s.send(zmq::buffer(fuzz_frame(rng, valid)),
                   f + 1 < frames ? zmq::send_flags::sndmore : zmq::send_flags::none);
        zmq::message_t reply;  // drain replies so the server's queue to us never fills
        while (s.recv(reply, zmq::recv_flags::dontwait)) {
        }
    }
}

}  // namespace

class TestIpcFuzz : public QObject {
    Q_OBJECT
private slots:
    void parsers_survive_mutated_input() {
        std::mt19937 rng(1);
        const std::string msg = test::synthetic_message("r", 12);
        int accepted = 0;
        for (int i = 0; i < 20000; ++i) {
            const std::string s = fuzz_frame(rng, msg);
            accepted += ipc::parse_message(s).has_value();
            (void)ipc::parse_snapshot_request(s);
            (void)ipc::parse_control_request(s);
        }
        QVERIFY(accepted < 20000);
    }

    void servers_count_and_drop_garbage_and_keep_answering() {
        const std::string token = ipc::random_token();
        ipc::ServerOptions o;
        o.run_id = "fuzzed";
        o.control_token = token;
        ipc::TelemetryServer server(o);
        for (int64_t s = 0; s < 20; ++s) server.publish(test::synthetic_topic(s), test::synthetic_message("fuzzed", s));
        std::mt19937 rng(2);
        for (int round = 0; round < 5; ++round) {
            bombard(server.snapshot_endpoint(), ipc::make_snapshot_request(3), rng, 400);
            bombard(server.control_endpoint(), ipc::make_control_request("stop", "x", token), rng, 400);
        }
        // The subscription side of the PUB socket: arbitrary frames from an XSUB.
        {
            zmq::context_t ctx;
            zmq::socket_t x(ctx, zmq::socket_type::xsub);
            x.set(zmq::sockopt::linger, 1000);
            x.connect(server.publish_endpoint());
            for (int i = 0; i < 300; ++i) x.send(zmq::buffer(fuzz_frame(rng, "\x01step")), zmq::send_flags::none);
        }
        QVERIFY(test::wait_until([&] { return server.stats().malformed > 1000; }));
        qInfo("malformed frames counted: %llu", static_cast<unsigned long long>(server.stats().malformed));
        // Still serving: a real client gets its answers and the full series.
        ipc::ControlClient client({server.control_endpoint(), token, std::nullopt});
        std::thread trainer([&] {
            for (int i = 0; i < 500; ++i) {
                if (auto c = server.poll_control()) {
                    server.reply_control(c->id, {{"ok", true}});
                    return;
                }
                std::this_thread::sleep_for(5ms);
            }
        });
        QCOMPARE(client.request("status", 5s)["ok"], true);
        trainer.join();
        ipc::FollowerOptions fo;
        fo.endpoint = server.publish_endpoint();
        ipc::Follower f(fo);
        int64_t next = 0;
        QVERIFY(test::wait_until([&] {
            while (auto m = f.next(10ms)) next = m->seq == next ? next + 1 : -1000;
            return next == 20;
        }));
        QCOMPARE(server.stats().control_requests, 1u);  // no fuzzed request was ever handed to the trainer
    }

    void followers_survive_a_rogue_publisher_and_snapshot_server() {
        zmq::context_t ctx;
        zmq::socket_t pub(ctx, zmq::socket_type::pub), snap(ctx, zmq::socket_type::router);
        pub.bind("tcp://127.0.0.1:*");
        snap.bind("tcp://127.0.0.1:*");
        const std::string pub_ep = pub.get(zmq::sockopt::last_endpoint),
                          snap_ep = snap.get(zmq::sockopt::last_endpoint);
        ipc::FollowerOptions fo;
        fo.endpoint = pub_ep;
        fo.request_timeout = 200ms;
        ipc::Follower f(fo);
        std::mt19937 rng(3);
        const std::string hb = test::wire_message("rogue", 5, "heartbeat", {{"endpoints", {{"snapshot", snap_ep}}}});
        const std::string msg = test::synthetic_message("rogue", 1);
        auto send_heartbeat = [&] {
            pub.send(zmq::buffer(std::string("heartbeat")), zmq::send_flags::sndmore);
            pub.send(zmq::buffer(hb), zmq::send_flags::none);
        };
        QVERIFY(test::wait_until([&] {  // until the subscription arrived (PUB drops before that)
            send_heartbeat();
            f.next(10ms);
            return f.run_id() == "rogue";
        }));
        for (int i = 0; i < 3000; ++i) {
            const int kind = i % 4;
            if (kind == 0) {  // a valid heartbeat now and then, so the follower asks the rogue snapshot server
                send_heartbeat();
            } else {
                const int frames = 1 + static_cast<int>(rng() % 3);
                for (int k = 0; k < frames; ++k)
                    pub.send(zmq::buffer(fuzz_frame(rng, k == 0 ? std::string("step") : msg)),
                             k + 1 < frames ? zmq::send_flags::sndmore : zmq::send_flags::none);
            }
            if (i % 50 == 0) {
                while (f.next(0ms)) {
                }
                std::vector<zmq::message_t> req;
                while (true) {  // answer any snapshot request with garbage
                    zmq::message_t part;
                    if (!snap.recv(part, zmq::recv_flags::dontwait)) break;
                    const bool more = part.more();
                    req.push_back(std::move(part));
                    if (more) continue;
                    snap.send(req[0], zmq::send_flags::sndmore);
                    const int frames = 1 + static_cast<int>(rng() % 4);
                    for (int k = 0; k < frames; ++k)
                        snap.send(
                            zmq::buffer(fuzz_frame(
                                rng, k == 0 ? R"({"schema":"mwb.snapshot/1","ok":true,"run_id":"rogue","more":true})"
                                            : msg)),
                            k + 1 < frames ? zmq::send_flags::sndmore : zmq::send_flags::none);
                    req.clear();
                }
            }
        }
        for (int i = 0; i < 20; ++i) f.next(10ms);
        qInfo("follower: %llu malformed frames dropped", static_cast<unsigned long long>(f.stats().malformed));
        QVERIFY(f.stats().malformed > 100);
    }
};

MWB_TEST_SUITE_GUILESS(test_ipc_fuzz, TestIpcFuzz)
}  // namespace test_ipc_fuzz
#include "test_fuzz.moc"
