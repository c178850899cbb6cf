#include "mwb/ipc/control_client.h"

#include "mwb/ipc/endpoint.h"
#include "mwb/ipc/error.h"
#include "mwb/ipc/follower.h"
#include "mwb/ipc/message.h"
#include "mwb/ipc/private_file.h"
#include "mwb/ipc/requests.h"
#include "mwb/ipc/server.h"
#include "zmq_util.h"

#include <unistd.h>

namespace mwb::ipc {

using Clock = std::chrono::steady_clock;

struct ControlClient::Impl {
    explicit Impl(ControlClientOptions options) : o(std::move(options)) {
        const Endpoint e = parse_endpoint(o.endpoint, "control endpoint");
        if (!is_loopback(e) && !o.curve)
            throw Error("control endpoint " + o.endpoint +
                        " is not a loopback address: CURVE keys are required (a client key pair and the server's "
                        "public key)");
        open();
    }

    void open() {
        sock = zmq::socket_t(ctx, zmq::socket_type::dealer);
        sock.set(zmq::sockopt::linger, 0);
        sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
        if (o.curve) detail::make_curve_client(sock, *o.curve);
        detail::connect_checked(sock, o.endpoint, "control");
    }

    /// Sends `body`, returns the first reply whose id is `id` (any reply when id is empty).
    std::optional<std::string> exchange(const std::string& body, const std::string& id,
                                        std::chrono::milliseconds timeout) {
        if (!detail::send_frames(sock, {body})) {
            open();
            if (!detail::send_frames(sock, {body})) return std::nullopt;
        }
        const auto deadline = Clock::now() + timeout;
        std::vector<std::string> frames;
        bool too_many = false;
        while (true) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) break;
            std::vector<zmq::pollitem_t> items = {{sock.handle(), 0, ZMQ_POLLIN, 0}};
            try {
                zmq::poll(items, left);
            } catch (const zmq::error_t&) {
                continue;
            }
            while (detail::recv_frames(sock, frames, 2, too_many)) {
                if (too_many || frames.size() != 1) continue;
                if (id.empty()) return frames[0];
                const auto j = nlohmann::json::parse(frames[0], nullptr, false);
                if (get_string(j, "id").value_or("") == id || get_string(j, "id").value_or("x").empty())
                    return frames[0];
            }
        }
        open();  // drop whatever may still arrive for this request
        return std::nullopt;
    }

    ControlClientOptions o;
    zmq::context_t ctx{1};
    zmq::socket_t sock;
    uint64_t counter = 0;
};

ControlClient::ControlClient(ControlClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
ControlClient::~ControlClient() = default;
ControlClient::ControlClient(ControlClient&&) noexcept = default;
ControlClient& ControlClient::operator=(ControlClient&&) noexcept = default;

ControlClient ControlClient::for_run_dir(const std::filesystem::path& run_dir, std::optional<ClientCurve> curve) {
    const RunEndpoints e = read_run_endpoints(run_dir);
    if (e.control.empty()) throw Error("run directory " + run_dir.string() + ": the run has no control endpoint");
    ControlClientOptions o;
    o.endpoint = e.control;
    if (e.curve) {
        if (!curve) throw Error("run directory " + run_dir.string() + ": the run uses CURVE; give a client key pair");
        if (curve->server_public_key.empty()) curve->server_public_key = e.server_public_key;
        o.curve = std::move(curve);
    } else {
        o.token = read_token_file(e.token_file.empty() ? run_dir / kControlTokenFile : e.token_file);
    }
    return ControlClient(std::move(o));
}

nlohmann::json ControlClient::request(const std::string& action, std::chrono::milliseconds timeout, std::string id) {
    if (id.empty())
        id = "c" + std::to_string(::getpid()) + "-" + std::to_string(++impl_->counter) + "-" +
             random_token().substr(0, 8);
    const auto reply = impl_->exchange(make_control_request(action, id, impl_->o.token), id, timeout);
    if (!reply)
        throw Error("control endpoint " + impl_->o.endpoint + ": no reply to '" + action + "' within " +
                    std::to_string(timeout.count()) +
                    " ms (the trainer answers at its next iteration boundary; is "
                    "the run alive?)");
    auto j = nlohmann::json::parse(*reply, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("ok"))
        throw Error("control endpoint " + impl_->o.endpoint +
                    ": the reply is not a control reply: " + reply->substr(0, 200));
    return j;
}

std::optional<std::string> ControlClient::request_raw(const std::string& body, std::chrono::milliseconds timeout) {
    return impl_->exchange(body, "", timeout);
}

const std::string& ControlClient::endpoint() const {
    return impl_->o.endpoint;
}

}  // namespace mwb::ipc
