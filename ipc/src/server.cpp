#include "mwb/ipc/server.h"

#include "mwb/ipc/endpoint.h"
#include "mwb/ipc/error.h"
#include "mwb/ipc/history.h"
#include "mwb/ipc/message.h"
#include "mwb/ipc/private_file.h"
#include "mwb/ipc/requests.h"
#include "zmq_util.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

namespace mwb::ipc {

namespace {

using Clock = std::chrono::steady_clock;
using detail::recv_frames;
using detail::send_frames;

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";  // fixed by the ZAP RFC (27/ZAP)
/// Longest a message waits in the queue while messages keep coming (telemetry latency bound).
constexpr std::chrono::milliseconds kCoalesce{20};

/// A token bucket: `rate` tokens per second up to `burst`; may go into debt (bytes are counted after
/// the reply is built).
struct TokenBucket {
    double tokens = 0, rate = 0, burst = 0;
    Clock::time_point last{};
    void refill(Clock::time_point now) {
        tokens = std::min(burst, tokens + rate * std::chrono::duration<double>(now - last).count());
        last = now;
    }
    /// Seconds until `need` tokens are there (0 when they are).
    double wait_for(double need) const { return tokens >= need ? 0.0 : (need - tokens) / rate; }
};

/// A snapshot peer: its request bucket, and until when it was told to wait (asking again before then
/// gets no reply, so that a client ignoring retry_after_s cannot make the server spin on refusals).
struct SnapshotPeer {
    TokenBucket requests;
    Clock::time_point quiet_until{};
};

/// Peers remembered by the snapshot rate limit before idle ones (full buckets) are forgotten.
constexpr std::size_t kMaxRateLimitedPeers = 1024;

/// Checks the security rule before anything binds: plaintext only on loopback.
void check_security(const ServerOptions& o) {
    const std::pair<const std::string*, const char*> endpoints[] = {
        {&o.publish_endpoint, "telemetry"}, {&o.snapshot_endpoint, "snapshot"}, {&o.control_endpoint, "control"}};
    for (const auto& [ep, what] : endpoints) {
        if (ep->empty()) continue;
        const Endpoint e = parse_endpoint(*ep, std::string(what) + " endpoint");
        if (!is_loopback(e) && !o.curve)
            throw Error(std::string(what) + " endpoint " + *ep +
                        " is not a loopback address: plaintext is refused off loopback. Give a CURVE server key "
                        "and the allowed client keys (curve_secret_key_file, curve_client_keys; `mwb-record keygen "
                        "NAME` makes key pairs), or bind 127.0.0.1");
    }
    if (o.publish_endpoint.empty() || o.snapshot_endpoint.empty())
        throw Error("telemetry server: the publish and snapshot endpoints must both be set");
    if (o.curve) {
        if (!curve_available())
            throw Error("CURVE keys were given but this libzmq was built without CURVE (zmq_has(\"curve\") is false)");
        if (!valid_z85_key(o.curve->server.secret_key) || !valid_z85_key(o.curve->server.public_key))
            throw Error("CURVE server key: expected a key pair of two 40-character Z85 keys");
        if (o.curve->allowed_clients.empty())
            throw Error("CURVE needs at least one allowed client public key (curve_client_keys)");
        for (const auto& k : o.curve->allowed_clients)
            if (!valid_z85_key(k)) throw Error("CURVE client key '" + k + "' is not a 40-character Z85 key");
    } else if (!o.control_endpoint.empty() && o.control_token.size() < 16) {
        throw Error("control endpoint " + o.control_endpoint + ": plaintext control needs a control token");
    }
}

}  // namespace

struct TelemetryServer::Impl {
    explicit Impl(ServerOptions options) : o(std::move(options)), history(o.history_budget_bytes, o.run_dir) {
        check_security(o);
        if (!(o.snapshot_requests_per_s > 0) || !(o.snapshot_request_burst >= 1) || !(o.snapshot_bytes_per_s > 0))
            throw Error("telemetry server: the snapshot rate limit needs a positive rate and a burst of at least 1");
        snapshot_bytes = {2.0 * static_cast<double>(o.snapshot_page_bytes), o.snapshot_bytes_per_s,
                          2.0 * static_cast<double>(o.snapshot_page_bytes), Clock::now()};
        if (o.curve) allowed.insert(o.curve->allowed_clients.begin(), o.curve->allowed_clients.end());
        wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (wake_fd < 0) throw Error("telemetry server: cannot create an eventfd");
        try {
            bind_all();
        } catch (...) {
            ::close(wake_fd);
            throw;
        }
        history.load_run_dir();  // a resumed run serves its earlier messages too
        last_seq.store(history.last_seq());
        thread = std::thread([this] { run(); });
    }

    ~Impl() {
        stopping.store(true);
        wake();
        if (thread.joinable()) thread.join();
        ::close(wake_fd);
    }

    void bind_all() {
        if (o.curve) {
            zap = zmq::socket_t(ctx, zmq::socket_type::rep);
            zap.set(zmq::sockopt::linger, 0);
            zap.bind(kZapEndpoint);  // before any CURVE socket binds, so no handshake goes unchecked
        }
        pub = zmq::socket_t(ctx, zmq::socket_type::xpub);
        pub.set(zmq::sockopt::xpub_verbose, 1);        // every subscription, for the welcome heartbeat
        pub.set(zmq::sockopt::sndhwm, o.publish_hwm);  // a slow subscriber drops beyond this, then re-asks
        pub.set(zmq::sockopt::maxmsgsize, int64_t{1024});
        pub.set(zmq::sockopt::linger, 1000);
        snap = zmq::socket_t(ctx, zmq::socket_type::router);
        for (zmq::socket_t* s : {&pub, &snap}) {
            if (o.curve) detail::make_curve_server(*s, *o.curve);
        }
        configure_router(snap);
        pub_ep = detail::bind_checked(pub, o.publish_endpoint, "telemetry");
        snap_ep = detail::bind_checked(snap, o.snapshot_endpoint, "snapshot");
        if (!o.control_endpoint.empty()) {
            ctl = zmq::socket_t(ctx, zmq::socket_type::router);
            if (o.curve) detail::make_curve_server(ctl, *o.curve);
            configure_router(ctl);
            ctl_ep = detail::bind_checked(ctl, o.control_endpoint, "control");
        }
    }

    static void configure_router(zmq::socket_t& s) {
        s.set(zmq::sockopt::linger, 0);
        s.set(zmq::sockopt::router_mandatory, 1);  // a reply to a vanished peer fails instead of vanishing
        s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(16 * kMaxRequestBytes));  // zmq drops bigger ones
        s.set(zmq::sockopt::rcvhwm, 1000);
        s.set(zmq::sockopt::sndhwm, 1000);
    }

    void wake() {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof one);
    }

    // ---- the thread ----------------------------------------------------------------------------
    void run() {
        std::vector<zmq::pollitem_t> items = {
            {pub.handle(), 0, ZMQ_POLLIN, 0}, {snap.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_fd, ZMQ_POLLIN, 0}};
        const std::size_t ctl_at = items.size();
        if (ctl) items.push_back({ctl.handle(), 0, ZMQ_POLLIN, 0});
        const std::size_t zap_at = items.size();
        if (zap) items.push_back({zap.handle(), 0, ZMQ_POLLIN, 0});
        auto next_heartbeat = Clock::now();
        while (true) {
            const auto now = Clock::now();
            auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_heartbeat - now);
            {
                // Coalescing: right after a batch, sleep at most kCoalesce and let publish() queue without
                // waking us (one wake-up per batch, not per message); once quiet, publish() wakes us.
                std::lock_guard lock(mu);
                const auto window = last_drain + kCoalesce - now;
                idle = window.count() <= 0 && queue.empty();
                if (window.count() > 0)
                    wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(window));
                else if (!queue.empty())
                    wait = std::chrono::milliseconds(0);
            }
            try {
                zmq::poll(items, std::max(wait, std::chrono::milliseconds(0)));
            } catch (const zmq::error_t&) {
                continue;  // EINTR
            }
            if (items[2].revents & ZMQ_POLLIN) {
                uint64_t v = 0;
                [[maybe_unused]] const ssize_t n = ::read(wake_fd, &v, sizeof v);
            }
            drain_queue();
            drain_replies();
            if (items[0].revents & ZMQ_POLLIN) handle_subscriptions();
            if (items[1].revents & ZMQ_POLLIN) handle_snapshots();
            if (ctl && (items[ctl_at].revents & ZMQ_POLLIN)) handle_control();
            if (zap && (items[zap_at].revents & ZMQ_POLLIN)) handle_zap();
            if (Clock::now() >= next_heartbeat) {
                recover_dropped();
                heartbeat("running");
                next_heartbeat = Clock::now() + o.heartbeat_interval;
            }
            if (stopping.load()) break;
        }
        drain_queue();
        recover_dropped();
        drain_replies();
        heartbeat("ended");
        for (const auto& [id, route] : routes)
            send_reply(route, id, refusal_reply(Refusal::RunEnded, "the run ended before this request was applied"));
        routes.clear();
        // Sockets close here, in their thread; the PUB socket lingers so run.end reaches subscribers.
        pub.close();
        snap.close();
        if (ctl) ctl.close();
        if (zap) zap.close();
    }

    void drain_queue() {
        std::deque<std::pair<std::string, std::string>> batch;
        {
            std::lock_guard lock(mu);
            batch.swap(queue);
            if (!batch.empty()) last_drain = Clock::now();
        }
        for (auto& [topic, json] : batch) {
            // Our own RunDir's messages: read the seq from the envelope; anything else is fully checked.
            std::optional<int64_t> seq = envelope_seq(json, topic);
            if (!seq) {
                const auto m = parse_message(json);
                if (m && m->topic == topic) seq = m->seq;
            }
            if (!seq) {
                ++malformed;
            } else {
                if (*seq > history.last_seq() + 1) recover_dropped();  // the gap may be in the run directory
                if (*seq > history.last_seq()) {
                    send_pub(topic, json);
                    history.append(*seq, std::move(topic), std::move(json));
                    last_seq.store(history.last_seq());
                }
            }
            processed.fetch_add(1);
        }
    }

    /// After the queue overflowed, the run directory has what was dropped (RunDir writes each message
    /// right after handing it over), so read back whatever is newer than the history.
    void recover_dropped() {
        if (dropped.load() == 0) return;
        const std::size_t n = history.catch_up_from_run_dir([this](const LogEntry& e) { send_pub(e.topic, e.json); });
        recovered.fetch_add(n);
        last_seq.store(history.last_seq());
    }

    void send_pub(const std::string& topic, const std::string& json) {
        if (send_frames(pub, {topic, json})) published.fetch_add(1);
    }

    void heartbeat(const char* state) {
        nlohmann::ordered_json hb = {{"schema", kTelemetrySchemaWritten},
                                     {"topic", "heartbeat"},
                                     {"run_id", o.run_id},
                                     {"seq", history.last_seq()},
                                     {"time", unix_time()},
                                     {"state", state},
                                     {"interval_s", std::chrono::duration<double>(o.heartbeat_interval).count()},
                                     {"endpoints", {{"snapshot", snap_ep}, {"control", ctl_ep}}},
                                     {"curve", o.curve.has_value()},
                                     {"published", published.load()},
                                     {"dropped", dropped.load()},
                                     {"recovered", recovered.load()}};
        if (send_frames(pub, {"heartbeat", hb.dump()})) heartbeats.fetch_add(1);
    }

    void handle_subscriptions() {
        std::vector<std::string> frames;
        bool too_many = false;
        bool welcome = false;
        for (int i = 0; i < 256 && recv_frames(pub, frames, 1, too_many); ++i) {
            if (too_many || frames[0].empty())
                ++malformed;
            else if (frames[0][0] == 1)
                welcome = true;  // a new subscription (0 = unsubscribe)
        }
        if (welcome) heartbeat("running");  // tells a new subscriber the run_id, last seq and endpoints at once
    }

    /// Splits [identity, (empty,) body] off a ROUTER; false (counted) for any other shape.
    bool split_request(std::vector<std::string>& frames, bool too_many, std::string& identity, bool& delimiter,
                       std::string& body) {
        const bool ok = !too_many && (frames.size() == 2 || (frames.size() == 3 && frames[1].empty()));
        if (!ok) {
            ++malformed;
            return false;
        }
        identity = std::move(frames[0]);
        delimiter = frames.size() == 3;
        body = std::move(frames.back());
        return true;
    }

    void handle_snapshots() {
        std::vector<std::string> frames;
        bool too_many = false;
        for (int i = 0; i < 64 && recv_frames(snap, frames, 3, too_many); ++i) {
            std::string identity, body;
            bool delimiter = false;
            if (!split_request(frames, too_many, identity, delimiter, body)) continue;
            std::vector<std::string> reply = {identity};
            if (delimiter) reply.emplace_back();
            std::string why;
            const auto r = parse_snapshot_request(body, &why);
            if (!r) {
                ++malformed;
                send_snapshot_refusal(reply, refusal_reply(Refusal::BadRequest, why));
                continue;
            }
            if (const double wait = snapshot_wait(identity); wait > 0) {
                ++rate_limited;
                SnapshotPeer& peer = peers[identity];
                const auto now = Clock::now();
                if (now < peer.quiet_until) continue;  // told already: no reply until retry_after_s has passed
                peer.quiet_until =
                    now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait));
                nlohmann::json refusal =
                    refusal_reply(Refusal::RateLimited,
                                  "rate limited: too many snapshot requests or bytes; retry after retry_after_s");
                refusal["retry_after_s"] = std::ceil(wait * 1000) / 1000;
                send_snapshot_refusal(reply, std::move(refusal));
                continue;
            }
            ++snapshot_requests;
            const std::size_t max = r->max ? std::min(r->max, o.snapshot_page_messages) : o.snapshot_page_messages;
            auto entries = history.since(r->since, max, o.snapshot_page_bytes);
            const int64_t last = entries.empty() ? r->since - 1 : entries.back().seq;
            nlohmann::ordered_json header = {{"schema", kSnapshotSchema},
                                             {"ok", true},
                                             {"run_id", o.run_id},
                                             {"since", r->since},
                                             {"count", entries.size()},
                                             {"first_seq", history.first_seq()},
                                             {"last_seq", last},
                                             {"next_seq", history.last_seq() + 1},
                                             {"more", last < history.last_seq()}};
            reply.push_back(header.dump());
            double bytes = static_cast<double>(reply.back().size());
            for (auto& e : entries) {
                bytes += static_cast<double>(e.json.size());
                reply.push_back(std::move(e.json));
            }
            snapshot_bytes.tokens -= bytes;
            send_frames(snap, reply);
        }
    }
    void send_snapshot_refusal(std::vector<std::string>& reply, nlohmann::json refusal) {
        nlohmann::ordered_json r = {{"schema", kSnapshotSchema}};
        for (auto& [k, v] : refusal.items()) r[k] = v;
        reply.push_back(r.dump());
        send_frames(snap, reply);
    }
    /// 0 when `peer` may be served now (its request is counted), else the seconds to wait: one token
    /// of the peer's request bucket, and a reply-bytes budget (shared by all peers) not in debt.
    double snapshot_wait(const std::string& peer) {
        const auto now = Clock::now();
        snapshot_bytes.refill(now);
        if (peers.size() >= kMaxRateLimitedPeers && !peers.count(peer))
            for (auto it = peers.begin(); it != peers.end();) {  // forget the idle ones (full buckets)
                TokenBucket& r = it->second.requests;
                r.refill(now);
                it = r.tokens >= r.burst && now >= it->second.quiet_until ? peers.erase(it) : std::next(it);
            }
        auto [it, fresh] = peers.try_emplace(peer);
        TokenBucket& b = it->second.requests;
        if (fresh) b = {o.snapshot_request_burst, o.snapshot_requests_per_s, o.snapshot_request_burst, now};
        b.refill(now);
        const double wait = std::max(b.wait_for(1), snapshot_bytes.tokens > 0 ? 0.0 : snapshot_bytes.wait_for(1));
        if (wait == 0) b.tokens -= 1;
        return wait;
    }

    struct Route {
        std::string identity;
        bool delimiter = false;
    };

    void send_reply(const Route& route, const std::string& id, nlohmann::json result) {
        nlohmann::ordered_json reply = {{"schema", kControlSchema}, {"id", id}};
        for (auto& [k, v] : result.items())
            if (k != "schema" && k != "id") reply[k] = v;
        std::vector<std::string> frames = {route.identity};
        if (route.delimiter) frames.emplace_back();
        frames.push_back(reply.dump());
        send_frames(ctl, frames);
    }

    void handle_control() {
        std::vector<std::string> frames;
        bool too_many = false;
        for (int i = 0; i < 64 && recv_frames(ctl, frames, 3, too_many); ++i) {
            Route route;
            std::string body;
            if (!split_request(frames, too_many, route.identity, route.delimiter, body)) continue;
            std::string why;
            auto c = parse_control_request(body, &why);
            if (!c) {
                ++malformed;
                send_reply(route, request_id_of(body), refusal_reply(Refusal::BadRequest, "malformed request: " + why));
                continue;
            }
            if (!o.curve && !tokens_equal(c->token, o.control_token)) {
                ++unauthorized;
                send_reply(route, c->id,
                           refusal_reply(Refusal::Unauthorized,
                                         "unauthorized: wrong or missing token (it is in the run directory's "
                                         "control.token, readable by the run's owner)"));
                continue;
            }
            if (c->id.empty()) c->id = "req-" + std::to_string(++anonymous);
            if (routes.count(c->id)) {
                send_reply(route, c->id,
                           refusal_reply(Refusal::DuplicateId, "a request with this id is already pending"));
                continue;
            }
            if (routes.size() >= o.max_pending_control) {
                send_reply(route, c->id, refusal_reply(Refusal::Busy, "busy: too many requests are pending"));
                continue;
            }
            routes.emplace(c->id, std::move(route));
            c->token.clear();
            {
                std::lock_guard lock(mu);
                inbox.push_back(std::move(*c));
            }
            ++control_requests;
        }
    }

    void drain_replies() {
        std::deque<std::pair<std::string, nlohmann::json>> batch;
        {
            std::lock_guard lock(mu);
            batch.swap(replies);
        }
        for (auto& [id, result] : batch) {
            const auto it = routes.find(id);
            if (it == routes.end()) continue;  // answered already (or never asked)
            send_reply(it->second, id, std::move(result));
            routes.erase(it);
        }
    }

    /// ZAP (RFC 27): admits CURVE clients whose public key is in the allowed list.
    void handle_zap() {
        std::vector<std::string> f;
        bool too_many = false;
        while (recv_frames(zap, f, 8, too_many)) {
            const bool shaped = !too_many && f.size() >= 6 && f[0] == "1.0";
            const std::string key = shaped && f[5] == "CURVE" && f.size() == 7 ? z85_from_binary(f[6]) : "";
            const bool ok = !key.empty() && allowed.count(key) > 0;
            if (!ok) ++unauthorized;
            send_frames(zap, {"1.0", shaped ? f[1] : "", ok ? "200" : "400", ok ? "OK" : "client key not allowed",
                              ok ? key : "", ""});
        }
    }

    ServerOptions o;
    zmq::context_t ctx{1};
    zmq::socket_t zap, pub, snap, ctl;
    std::string pub_ep, snap_ep, ctl_ep;
    History history;
    std::set<std::string> allowed;
    std::map<std::string, Route> routes;                  // thread only
    std::unordered_map<std::string, SnapshotPeer> peers;  // snapshot requests per peer; thread only
    TokenBucket snapshot_bytes;                           // snapshot reply bytes, all peers; thread only
    uint64_t anonymous = 0;
    int wake_fd = -1;

    std::mutex mu;  // guards queue, inbox, replies, enqueued, idle, last_drain
    std::deque<std::pair<std::string, std::string>> queue;
    bool idle = false;  // the thread sleeps until the next heartbeat: publish() must wake it
    Clock::time_point last_drain{};
    std::deque<ControlCommand> inbox;
    std::deque<std::pair<std::string, nlohmann::json>> replies;
    uint64_t enqueued = 0;

    std::atomic<uint64_t> processed{0}, published{0}, dropped{0}, recovered{0}, heartbeats{0};
    std::atomic<uint64_t> snapshot_requests{0}, control_requests{0}, malformed{0}, unauthorized{0}, rate_limited{0};
    std::atomic<int64_t> last_seq{-1};
    std::atomic<bool> stopping{false};
    std::thread thread;
};

TelemetryServer::TelemetryServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

TelemetryServer::~TelemetryServer() = default;

void TelemetryServer::publish(std::string_view topic, const std::string& json) {
    std::pair<std::string, std::string> item(topic, json);  // copy outside the lock
    bool wake = false;
    {
        std::lock_guard lock(impl_->mu);
        if (impl_->queue.size() >= impl_->o.queue_capacity) {
            impl_->dropped.fetch_add(1);
            return;  // recovered from the run directory by the thread
        }
        // Only an idle thread needs waking; a busy one takes the queue within kCoalesce.
        wake = impl_->idle;
        impl_->idle = false;
        impl_->queue.push_back(std::move(item));
        ++impl_->enqueued;
    }
    if (wake) impl_->wake();
}

std::optional<ControlCommand> TelemetryServer::poll_control() {
    std::lock_guard lock(impl_->mu);
    if (impl_->inbox.empty()) return std::nullopt;
    ControlCommand c = std::move(impl_->inbox.front());
    impl_->inbox.pop_front();
    return c;
}

void TelemetryServer::reply_control(const std::string& id, nlohmann::json result) {
    {
        std::lock_guard lock(impl_->mu);
        impl_->replies.emplace_back(id, std::move(result));
    }
    impl_->wake();
}

const std::string& TelemetryServer::publish_endpoint() const {
    return impl_->pub_ep;
}
const std::string& TelemetryServer::snapshot_endpoint() const {
    return impl_->snap_ep;
}
const std::string& TelemetryServer::control_endpoint() const {
    return impl_->ctl_ep;
}

nlohmann::json TelemetryServer::info() const {
    const auto& o = impl_->o;
    // host and pid tell a reader on the same machine whether the file is stale (docs/protocol.md).
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    nlohmann::ordered_json j = {
        {"schema", kEndpointsSchema}, {"run_id", o.run_id},       {"pid", static_cast<int64_t>(::getpid())},
        {"host", std::string(host)},  {"started", unix_time()},   {"publish", impl_->pub_ep},
        {"snapshot", impl_->snap_ep}, {"control", impl_->ctl_ep}, {"curve", o.curve.has_value()}};
    if (o.curve) j["curve_server_public_key"] = o.curve->server.public_key;
    if (!o.curve && !impl_->ctl_ep.empty()) j["control_token_file"] = kControlTokenFile;
    return nlohmann::json(j);
}

ServerStats TelemetryServer::stats() const {
    ServerStats s;
    s.published = impl_->published.load();
    s.dropped = impl_->dropped.load();
    s.recovered = impl_->recovered.load();
    s.heartbeats = impl_->heartbeats.load();
    s.snapshot_requests = impl_->snapshot_requests.load();
    s.control_requests = impl_->control_requests.load();
    s.malformed = impl_->malformed.load();
    s.unauthorized = impl_->unauthorized.load();
    s.rate_limited = impl_->rate_limited.load();
    s.last_seq = impl_->last_seq.load();
    return s;
}

bool TelemetryServer::flush(std::chrono::milliseconds timeout) {
    uint64_t target = 0;
    {
        std::lock_guard lock(impl_->mu);
        target = impl_->enqueued;
    }
    const auto deadline = Clock::now() + timeout;
    while (impl_->processed.load() < target) {
        if (Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

}  // namespace mwb::ipc
