#include "mwb/ipc/follower.h"

#include "mwb/ipc/endpoint.h"
#include "mwb/ipc/error.h"
#include "mwb/ipc/requests.h"
#include "mwb/ipc/run_dir_log.h"
#include "mwb/ipc/server.h"
#include "zmq_util.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <map>
#include <thread>

namespace mwb::ipc {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

RunEndpoints read_run_endpoints(const fs::path& run_dir) {
    const fs::path file = run_dir / kTelemetryInfoFile;
    std::ifstream in(file);
    if (!in) throw Error("'" + file.string() + "' cannot be read: is a run with telemetry writing this directory?");
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw Error("'" + file.string() + "' is not a JSON object");
    const auto schema = get_string(j, "schema");
    if (!schema || !schema_compatible(*schema, kEndpointsSchema))
        throw Error("'" + file.string() + "': field schema: expected \"" + std::string(kEndpointsSchema) + "\"");
    RunEndpoints e;
    auto field = [&](const char* key, std::string& out, bool required) {
        const auto v = get_string(j, key);
        if (!v && required) throw Error("'" + file.string() + "': field " + key + ": expected a string");
        if (v) out = *v;
    };
    field("run_id", e.run_id, true);
    field("publish", e.publish, true);
    field("snapshot", e.snapshot, true);
    field("control", e.control, false);
    std::string token;
    field("control_token_file", token, false);
    if (!token.empty()) e.token_file = run_dir / token;
    e.curve = j.value("curve", false);
    field("curve_server_public_key", e.server_public_key, e.curve);
    return e;
}

struct Follower::Impl {
    explicit Impl(FollowerOptions options) : o(std::move(options)) {
        // Anything without a transport is a run directory (perhaps not created yet: it is waited for).
        from_run_dir = o.endpoint.find("://") == std::string::npos;
        if (o.endpoint.empty()) throw Error("empty endpoint: expected tcp://HOST:PORT, ipc://PATH or a run directory");
        if (!from_run_dir) {
            const Endpoint e = parse_endpoint(o.endpoint, "telemetry endpoint");
            check_plaintext(e);
            pub_ep = o.endpoint;
        }
        silence = o.silence_timeout;
        last_heard = Clock::now();
    }

    void check_plaintext(const Endpoint& e) const {
        if (!is_loopback(e) && !o.curve)
            throw Error("endpoint " + e.text +
                        " is not a loopback address: CURVE keys are required (a client key pair and the server's "
                        "public key; mwb-record keygen makes key pairs)");
    }

    // ---- connection ----------------------------------------------------------------------------
    /// Reads telemetry.json again (run directories); false while it is missing or unreadable.
    bool resolve() {
        if (!from_run_dir) return true;
        RunEndpoints e;
        try {
            e = read_run_endpoints(o.endpoint);
        } catch (const Error&) {
            return false;
        }
        if (e.curve) {
            if (!o.curve)
                throw Error("run directory " + o.endpoint +
                            ": the run uses CURVE; give a client key pair (mwb-record --curve-key FILE)");
            if (o.curve->server_public_key.empty()) o.curve->server_public_key = e.server_public_key;
        }
        check_plaintext(parse_endpoint(e.publish, "telemetry endpoint"));
        if (!have_run) observe_run(e.run_id);
        pub_ep = e.publish;
        snap_ep = e.snapshot;
        ctl_ep = e.control;
        return true;
    }

    bool endpoints_changed() const {
        try {
            const RunEndpoints e = read_run_endpoints(o.endpoint);
            return e.publish != pub_ep || e.snapshot != snap_ep;
        } catch (const Error&) {
            return false;
        }
    }

    zmq::socket_t make_socket(zmq::socket_type type) {
        zmq::socket_t s(ctx, type);
        s.set(zmq::sockopt::linger, 0);
        detail::keep_alive(s);
        if (o.curve) detail::make_curve_client(s, *o.curve);
        return s;
    }

    void connect_sub() {
        sub = make_socket(zmq::socket_type::sub);
        sub.set(zmq::sockopt::rcvhwm, o.receive_hwm);
        sub.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
        sub.set(zmq::sockopt::subscribe, "");
        detail::connect_checked(sub, pub_ep, "telemetry");
        sub_ep = pub_ep;
    }

    void connect_req() {
        req = zmq::socket_t();
        need_sync = need_sync || in_flight;  // a request lost with the old socket is sent again
        in_flight = false;
        if (snap_ep.empty()) return;
        req = make_socket(zmq::socket_type::dealer);
        req.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
        detail::connect_checked(req, snap_ep, "snapshot");
        req_ep = snap_ep;
    }

    void reconnect() {
        sub = zmq::socket_t();
        req = zmq::socket_t();
        in_flight = false;
        sub_ep.clear();
        req_ep.clear();
        if (!resolve()) return;
        try {
            connect_sub();
            connect_req();
        } catch (const Error&) {
            if (!from_run_dir) throw;  // the caller's own endpoint: say so
            sub = zmq::socket_t();     // a telemetry.json being rewritten: try again later
            req = zmq::socket_t();
            ++st.malformed;
            return;
        }
        need_sync = have_run;
    }

    /// Connects when needed, notices silence (reconnecting with backoff) and lost requests.
    void service(Clock::time_point now) {
        if (!sub && now >= next_attempt) {
            reconnect();
            next_attempt = now + milliseconds(500);
            last_heard = now;
        }
        // A run directory names its current endpoints: while the run is quiet, look for a restarted
        // trainer (new ephemeral ports) twice a second.
        if (sub && from_run_dir && now - last_heard > milliseconds(500) && now >= next_check) {
            next_check = now + milliseconds(500);
            if (endpoints_changed()) {
                ++st.reconnects;
                reconnect();
                last_heard = now;
                state.clear();
                return;
            }
        }
        // The publisher said goodbye (the trainer exited): look for its successor soon, not after a silence.
        const auto limit = state == "ended" ? std::min(silence, milliseconds(500)) : silence;
        if (sub && now - last_heard > limit) {
            ++st.reconnects;
            reconnect();
            last_heard = now;
            state.clear();
            silence = std::min(silence * 2, std::max(o.max_backoff, o.silence_timeout));
        }
        catch_up_from_files(now);
        if (in_flight && now - sent_at > o.request_timeout) {
            connect_req();  // a fresh socket: a late reply to the old one cannot be mistaken
            need_sync = true;
        }
        if (sub && req_ep != snap_ep) connect_req();
    }

    /// A run directory on this machine is the durable copy: when its publisher is gone (the trainer
    /// exited, or is not answering), deliver what the files hold beyond `next`.
    void catch_up_from_files(Clock::time_point now) {
        if (!from_run_dir || !have_run || now < next_file_check) return;
        if (state != "ended" && now - last_heard < milliseconds(1000)) return;
        next_file_check = now + milliseconds(250);
        if (!files) files.emplace(o.endpoint);
        files->refresh();
        if (files->last_seq() < next) return;
        for (auto& e : files->read(next, 10000, std::size_t{8} << 20)) {
            auto m = parse_message(e.json);
            if (!m || m->run_id != run || m->seq < next) continue;
            if (m->seq > next) st.unrecoverable += static_cast<uint64_t>(m->seq - next);
            ++st.from_files;
            deliver(std::move(*m));
        }
        drain_ahead();
    }

    void maybe_request() {
        if (!need_sync || in_flight || !have_run || !req || Clock::now() < next_request) return;
        if (!detail::send_frames(req, {make_snapshot_request(next)})) return;
        in_flight = true;
        need_sync = false;
        sent_at = Clock::now();
    }

    // ---- the series ----------------------------------------------------------------------------
    void observe_run(const std::string& id) {
        if (have_run && id == run) return;
        run = id;
        have_run = true;
        next = o.resume_from ? std::max<int64_t>(0, o.resume_from(id)) : 0;
        ahead.clear();
        need_sync = true;
        ++st.runs;
        if (in_flight) connect_req();
    }

    void deliver(Message&& m) {
        next = m.seq + 1;
        ++st.delivered;
        ready.push_back(std::move(m));
    }

    void drain_ahead() {
        while (!ahead.empty() && ahead.begin()->first < next) ahead.erase(ahead.begin());
        while (!ahead.empty() && ahead.begin()->first == next) {
            deliver(std::move(ahead.begin()->second));
            ahead.erase(ahead.begin());
        }
    }

    void on_live(Message&& m) {
        last_heard = Clock::now();
        silence = o.silence_timeout;
        if (m.is_heartbeat()) {
            state = m.body.value("state", "");
            if (!from_run_dir && m.body.contains("endpoints") && m.body["endpoints"].is_object()) {
                const auto& e = m.body["endpoints"];
                try {
                    if (const auto s = get_string(e, "snapshot"); s && !s->empty())
                        snap_ep = connectable_endpoint(*s, pub_ep);
                    if (const auto c = get_string(e, "control"); c && !c->empty())
                        ctl_ep = connectable_endpoint(*c, pub_ep);
                } catch (const Error&) {
                    ++st.malformed;
                }
            }
            observe_run(m.run_id);
            if (m.seq >= next) {  // something was published that we have not seen
                if (!in_flight && !need_sync) ++st.gaps;
                need_sync = true;
            }
            if (o.deliver_heartbeats) ready.push_back(std::move(m));
            return;
        }
        observe_run(m.run_id);
        if (m.seq < next) {
            ++st.duplicates;
        } else if (m.seq == next) {  // in order: deliver, even while a snapshot is on its way
            deliver(std::move(m));
            drain_ahead();
        } else {
            if (!in_flight && !need_sync) ++st.gaps;
            if (ahead.size() < 200000) ahead.emplace(m.seq, std::move(m));
            need_sync = true;
        }
    }

    void on_reply(std::vector<std::string>& frames) {
        in_flight = false;
        const auto header = frames.empty() ? nlohmann::json() : nlohmann::json::parse(frames[0], nullptr, false);
        const auto schema = get_string(header, "schema");
        if (schema && schema_compatible(*schema, kSnapshotSchema) &&
            get_string(header, "code") == std::string(refusal_code(Refusal::RateLimited))) {
            // The server's snapshot rate limit (docs/protocol.md): ask again once it says so.
            ++st.rate_limited;
            const auto after = header.find("retry_after_s");
            const double wait =
                std::clamp(after != header.end() && after->is_number() ? after->get<double>() : 0.1, 0.01, 5.0);
            next_request =
                Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait));
            need_sync = true;
            return;
        }
        if (!schema || !schema_compatible(*schema, kSnapshotSchema) || !header.value("ok", false)) {
            ++st.malformed;
            need_sync = true;
            sent_at = Clock::now();
            return;
        }
        ++st.snapshots;
        const auto server_run = get_string(header, "run_id");
        if (!server_run || server_run->empty()) {
            ++st.malformed;
            return;
        }
        if (*server_run != run) {  // the endpoint serves another run now
            observe_run(*server_run);
            return;
        }
        for (std::size_t i = 1; i < frames.size(); ++i) {
            auto m = parse_message(frames[i]);
            if (!m || m->run_id != run || m->is_heartbeat()) {
                ++st.malformed;
                continue;
            }
            if (m->seq < next) continue;
            if (m->seq > next) st.unrecoverable += static_cast<uint64_t>(m->seq - next);
            ++st.from_snapshots;
            deliver(std::move(*m));
        }
        if (header.value("more", false)) {
            need_sync = true;
            return;
        }
        drain_ahead();
        if (!ahead.empty()) {
            const int64_t server_next = get_int(header, "next_seq").value_or(next);
            if (server_next > next) {  // the server no longer has these: skip the hole
                st.unrecoverable += static_cast<uint64_t>(ahead.begin()->first - next);
                next = ahead.begin()->first;
                drain_ahead();
            } else {
                need_sync = true;  // newer messages reached us before the server's reply
            }
        }
    }

    void read_sockets() {
        std::vector<std::string> frames;
        bool too_many = false;
        for (int i = 0; sub && i < 4096 && detail::recv_frames(sub, frames, 2, too_many); ++i) {
            if (too_many || frames.size() != 2) {
                ++st.malformed;
                continue;
            }
            auto m = parse_message(frames[1]);
            if (!m || m->topic != frames[0]) {
                ++st.malformed;
                continue;
            }
            on_live(std::move(*m));
        }
        while (req && detail::recv_frames(req, frames, 1000000, too_many)) {
            if (!in_flight) continue;  // a stale reply
            on_reply(frames);
        }
    }

    std::optional<Message> next_message(milliseconds timeout) {
        const auto deadline = Clock::now() + timeout;
        while (true) {
            if (!ready.empty()) {
                Message m = std::move(ready.front());
                ready.pop_front();
                return m;
            }
            const auto now = Clock::now();
            service(now);
            maybe_request();
            // Poll at least once (a zero timeout still reads what is waiting), at most 50 ms at a time.
            const auto wait =
                std::clamp(std::chrono::duration_cast<milliseconds>(deadline - now), milliseconds(0), milliseconds(50));
            std::vector<zmq::pollitem_t> items;
            if (sub) items.push_back({sub.handle(), 0, ZMQ_POLLIN, 0});
            if (req) items.push_back({req.handle(), 0, ZMQ_POLLIN, 0});
            if (items.empty()) {
                std::this_thread::sleep_for(wait);
            } else {
                try {
                    zmq::poll(items, wait);
                } catch (const zmq::error_t&) {
                }
                read_sockets();
            }
            if (ready.empty() && Clock::now() >= deadline) return std::nullopt;
        }
    }

    FollowerOptions o;
    bool from_run_dir = false;
    zmq::context_t ctx{1};
    zmq::socket_t sub, req;
    std::string pub_ep, snap_ep, ctl_ep, sub_ep, req_ep;
    std::string run, state;
    bool have_run = false, need_sync = false, in_flight = false;
    int64_t next = 0;
    std::map<int64_t, Message> ahead;  // live messages beyond `next`, waiting for the gap to fill
    std::deque<Message> ready;
    Clock::time_point sent_at, last_heard, next_attempt, next_check, next_file_check;
    Clock::time_point next_request{};  // not before: the server rate-limited us
    std::optional<RunDirLog> files;    // run directories: the files, when the publisher is gone
    milliseconds silence{4000};
    FollowerStats st;
};

Follower::Follower(FollowerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Follower::~Follower() = default;

std::optional<Message> Follower::next(std::chrono::milliseconds timeout) {
    return impl_->next_message(timeout);
}
const std::string& Follower::run_id() const {
    return impl_->run;
}
int64_t Follower::next_seq() const {
    return impl_->next;
}
bool Follower::live() const {
    return impl_->have_run && !impl_->in_flight && !impl_->need_sync && impl_->ahead.empty() && !impl_->state.empty();
}
const std::string& Follower::state() const {
    return impl_->state;
}
const std::string& Follower::publish_endpoint() const {
    return impl_->pub_ep;
}
const std::string& Follower::snapshot_endpoint() const {
    return impl_->snap_ep;
}
const std::string& Follower::control_endpoint() const {
    return impl_->ctl_ep;
}
const FollowerStats& Follower::stats() const {
    return impl_->st;
}

}  // namespace mwb::ipc
