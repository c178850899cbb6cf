// Control over a real ROUTER socket: requests reach the trainer's side and replies find their client;
// tokens are required in plaintext; CURVE is required off loopback, works with keys, and refuses
// clients whose key is not admitted.
#include "ipc/wire_fixtures.h"
#include "support/fixtures.h"

#include "mwb/ipc/control_client.h"
#include "mwb/ipc/error.h"
#include "mwb/ipc/follower.h"
#include "mwb/ipc/private_file.h"
#include "mwb/ipc/requests.h"
#include "mwb/ipc/server.h"

#include "support/skip.h"
#include "support/suite.h"

#include <QtTest>

#include <atomic>
#include <fstream>
#include <thread>

namespace test_ipc_control {

using namespace mwb;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

ipc::ServerOptions plain(const std::string& token = "0123456789abcdef0123456789abcdef") {
    ipc::ServerOptions o;
    o.run_id = "run-c";
    o.control_token = token;
    o.heartbeat_interval = 200ms;
    return o;
}

/// Answers control requests like the trainer does at iteration boundaries, on its own thread.
class FakeTrainer {
public:
    explicit FakeTrainer(ipc::TelemetryServer& s) : server_(s), thread_([this] { loop(); }) {}
    ~FakeTrainer() {
        stop_ = true;
        thread_.join();
    }
    std::vector<std::string> actions() {
        std::lock_guard l(mu_);
        return actions_;
    }

private:
    void loop() {
        while (!stop_) {
            while (auto c = server_.poll_control()) {
                {
                    std::lock_guard l(mu_);
                    actions_.push_back(c->action);
                }
                server_.reply_control(c->id, {{"ok", true}, {"action", c->action}, {"iteration", 7}});
            }
            std::this_thread::sleep_for(2ms);
        }
    }
    ipc::TelemetryServer& server_;
    std::atomic<bool> stop_{false};
    std::mutex mu_;
    std::vector<std::string> actions_;
    std::thread thread_;
};

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

class TestIpcControl : public QObject {
    Q_OBJECT
private slots:
    void requests_round_trip_to_the_trainer() {
        const std::string token = ipc::random_token();
        ipc::TelemetryServer server(plain(token));
        FakeTrainer trainer(server);
        ipc::ControlClient client({server.control_endpoint(), token, std::nullopt});
        for (const char* action : {"status", "pause", "checkpoint", "resume", "stop"}) {
            const auto r = client.request(action, 5s, std::string("id-") + action);
            QCOMPARE(r["ok"], true);
            QCOMPARE(r["action"], action);
            QCOMPARE(r["id"], std::string("id-") + action);
            QCOMPARE(r["schema"], "mwb.control/1");
        }
        QCOMPARE(trainer.actions(), (std::vector<std::string>{"status", "pause", "checkpoint", "resume", "stop"}));
        QCOMPARE(server.stats().control_requests, 5u);
    }

    void replies_find_their_own_client() {
        const std::string token = ipc::random_token();
        ipc::TelemetryServer server(plain(token));
        FakeTrainer trainer(server);
        std::vector<std::thread> clients;
        std::atomic<int> ok{0};
        for (int c = 0; c < 4; ++c)
            clients.emplace_back([&, c] {
                ipc::ControlClient client({server.control_endpoint(), token, std::nullopt});
                for (int i = 0; i < 10; ++i) {
                    const std::string id = "client" + std::to_string(c) + "-" + std::to_string(i);
                    const auto r = client.request("status", 5s, id);
                    if (r["id"] == id && r["ok"] == true) ++ok;
                }
            });
        for (auto& t : clients) t.join();
        QCOMPARE(ok.load(), 40);
    }

    void plaintext_control_needs_the_token() {
        ipc::TelemetryServer server(plain("the-right-token-0123456789"));
        FakeTrainer trainer(server);
        for (const std::string wrong : {"", "the-right-token-012345678", "the-right-token-0123456789x"}) {
            ipc::ControlClient client({server.control_endpoint(), wrong, std::nullopt});
            const auto r = client.request("stop", 5s);
            QCOMPARE(r["ok"], false);
            QVERIFY2(r["error"].get<std::string>().find("unauthorized") != std::string::npos, r.dump().c_str());
            QCOMPARE(r["code"], "unauthorized");
        }
        QVERIFY(trainer.actions().empty());
        QCOMPARE(server.stats().unauthorized, 3u);
        // And a server refuses to start plaintext control without one.
        auto o = plain("");
        QVERIFY(error_of([&] { ipc::TelemetryServer s(o); }).contains("control token"));
    }

    void bad_requests_are_answered_not_applied() {
        const std::string token = ipc::random_token();
        ipc::TelemetryServer server(plain(token));
        ipc::ControlClient client({server.control_endpoint(), token, std::nullopt});
        const auto unknown = client.request_raw(ipc::make_control_request("explode", "x", token), 5s);
        QVERIFY(unknown && unknown->find("field action") != std::string::npos);
        const auto unknown_reply = nlohmann::json::parse(*unknown);
        QCOMPARE(unknown_reply["code"], "bad_request");
        QCOMPARE(unknown_reply["id"], "x");  // the id of a malformed request is echoed when it parses
        const auto garbage = client.request_raw("{{{", 5s);
        QVERIFY(garbage && garbage->find("malformed") != std::string::npos);
        QCOMPARE(nlohmann::json::parse(*garbage)["code"], "bad_request");
        QCOMPARE(nlohmann::json::parse(*garbage)["id"], "");
        const auto bad_id = client.request_raw(R"({"schema":"mwb.control/1","action":"stop","id":17})", 5s);
        QCOMPARE(nlohmann::json::parse(*bad_id)["id"], "");  // an id that is not a string is not echoed
        QCOMPARE(server.stats().malformed, 3u);
        // Nobody polls: the first request stays pending, a second with its id is refused.
        ipc::ControlClient other({server.control_endpoint(), token, std::nullopt});
        QVERIFY(!client.request_raw(ipc::make_control_request("pause", "same", token), 200ms));
        const auto dup = other.request_raw(ipc::make_control_request("pause", "same", token), 5s);
        QVERIFY(dup && dup->find("already pending") != std::string::npos);
        QCOMPARE(nlohmann::json::parse(*dup)["code"], "duplicate_id");
        QVERIFY(server.poll_control());
    }

    void pending_requests_are_answered_when_the_run_ends() {
        const std::string token = ipc::random_token();
        auto server = std::make_unique<ipc::TelemetryServer>(plain(token));
        ipc::ControlClient client({server->control_endpoint(), token, std::nullopt});
        std::thread end([&] {
            std::this_thread::sleep_for(300ms);
            server.reset();  // the trainer finished without polling again
        });
        const auto r = client.request("checkpoint", 10s);
        end.join();
        QCOMPARE(r["ok"], false);
        QVERIFY(r["error"].get<std::string>().find("ended") != std::string::npos);
        QCOMPARE(r["code"], "run_ended");
    }

    // "Loopback" is 127.0.0.0/8, localhost (bound as 127.0.0.1: ZeroMQ resolves no names when binding)
    // and [::1] (ZMQ_IPV6 on the socket): each binds in plaintext and answers a control request.
    void loopback_names_bind_and_answer() {
        for (const std::string host : {"127.0.0.1", "127.0.0.2", "localhost", "[::1]"}) {
            const std::string token = ipc::random_token();
            auto o = plain(token);
            o.publish_endpoint = o.snapshot_endpoint = o.control_endpoint = "tcp://" + host + ":0";
            std::unique_ptr<ipc::TelemetryServer> server;
            const QString err = error_of([&] { server = std::make_unique<ipc::TelemetryServer>(o); });
            if (host == "[::1]" && err.contains("cannot bind")) {
                qWarning("no IPv6 loopback on this machine: [::1] not checked (%s)", qPrintable(err));
                continue;
            }
            QVERIFY2(err.isEmpty(), qPrintable(err));
            const std::string bound = server->control_endpoint();
            QVERIFY2(bound.starts_with("tcp://" + (host == "localhost" ? std::string("127.0.0.1") : host) + ":"),
                     bound.c_str());
            FakeTrainer trainer(*server);
            ipc::ControlClient client({bound, token, std::nullopt});
            QCOMPARE(client.request("status", 5s, "loop")["ok"], true);
        }
    }

    void a_silent_run_times_out_with_a_clear_error() {
        const std::string token = ipc::random_token();
        ipc::TelemetryServer server(plain(token));  // nobody polls
        ipc::ControlClient client({server.control_endpoint(), token, std::nullopt});
        const QString err = error_of([&] { client.request("status", 300ms); });
        QVERIFY2(err.contains(QString::fromStdString(server.control_endpoint())) && err.contains("no reply"),
                 qPrintable(err));
    }

    void run_directory_names_endpoint_and_token() {
        test::TempDir t;
        auto o = plain();
        o.run_dir = t.path();
        o.control_token = ipc::create_token_file(t / ipc::kControlTokenFile);
        ipc::TelemetryServer server(o);
        std::ofstream(t / ipc::kTelemetryInfoFile) << server.info().dump(2);
        FakeTrainer trainer(server);
        const auto e = ipc::read_run_endpoints(t.path());
        QCOMPARE(e.publish, server.publish_endpoint());
        QCOMPARE(e.control, server.control_endpoint());
        QCOMPARE(e.token_file, t / "control.token");
        QCOMPARE(ipc::ControlClient::for_run_dir(t.path()).request("status", 5s)["ok"], true);
        QVERIFY(error_of([&] { ipc::read_run_endpoints(t / "nowhere"); }).contains("telemetry.json"));
    }

    void plaintext_off_loopback_is_refused() {
        for (const char* field : {"publish", "snapshot", "control"}) {
            auto o = plain();
            (std::string(field) == "publish"    ? o.publish_endpoint
             : std::string(field) == "snapshot" ? o.snapshot_endpoint
                                                : o.control_endpoint) = "tcp://0.0.0.0:0";
            const QString err = error_of([&] { ipc::TelemetryServer s(o); });
            QVERIFY2(err.contains("tcp://0.0.0.0:0") && err.contains("not a loopback address") && err.contains("CURVE"),
                     qPrintable(err));
        }
        ipc::FollowerOptions remote;
        remote.endpoint = "tcp://192.0.2.7:5555";
        QVERIFY(error_of([&] { ipc::Follower f(remote); }).contains("CURVE keys are required"));
        QVERIFY(error_of([] { ipc::ControlClient c({"tcp://192.0.2.7:5555", "t", std::nullopt}); }).contains("CURVE"));
    }

    void curve_admits_listed_clients_only() {
        if (!ipc::curve_available()) MWB_SKIP("libzmq without CURVE");
        const auto server_keys = ipc::generate_key_pair(), alice = ipc::generate_key_pair(),
                   mallory = ipc::generate_key_pair();
        auto o = plain("");
        o.publish_endpoint = o.snapshot_endpoint = o.control_endpoint = "tcp://0.0.0.0:0";  // every interface
        o.curve = ipc::ServerCurve{server_keys, {alice.public_key}};
        ipc::TelemetryServer server(o);
        FakeTrainer trainer(server);
        auto local = [](const std::string& ep) { return "tcp://127.0.0.1:" + ep.substr(ep.rfind(':') + 1); };
        const ipc::ClientCurve as_alice{alice, server_keys.public_key}, as_mallory{mallory, server_keys.public_key};

        // Control: alice is answered without a token; mallory's handshake is refused, so she hears nothing.
        ipc::ControlClient good({local(server.control_endpoint()), "", as_alice});
        QCOMPARE(good.request("status", 5s)["ok"], true);
        ipc::ControlClient bad({local(server.control_endpoint()), "", as_mallory});
        QVERIFY(error_of([&] { bad.request("stop", 500ms); }).contains("no reply"));
        ipc::ControlClient plaintext({local(server.control_endpoint()), "x", std::nullopt});
        QVERIFY(error_of([&] { plaintext.request("stop", 500ms); }).contains("no reply"));
        QCOMPARE(trainer.actions(), std::vector<std::string>{"status"});
        QVERIFY(server.stats().unauthorized >= 1);

        // Telemetry: alice follows the run (encrypted), mallory gets nothing.
        for (int64_t s = 0; s < 10; ++s) server.publish(test::synthetic_topic(s), test::synthetic_message("run-c", s));
        ipc::FollowerOptions fa;
        fa.endpoint = local(server.publish_endpoint());
        fa.curve = as_alice;
        ipc::Follower fol(fa);
        int64_t next = 0;
        QVERIFY(test::wait_until([&] {
            while (auto m = fol.next(10ms)) next = m->seq == next ? next + 1 : -1000;
            return next == 10;
        }));
        ipc::FollowerOptions fm = fa;
        fm.curve = as_mallory;
        ipc::Follower eve(fm);
        QVERIFY(!eve.next(500ms));
        QVERIFY(eve.run_id().empty());
    }
};

MWB_TEST_SUITE_GUILESS(test_ipc_control, TestIpcControl)
}  // namespace test_ipc_control
#include "test_control.moc"
