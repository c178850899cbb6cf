#pragma once
// Small cppzmq helpers shared by the server and the clients (internal to ipc/).
#include "mwb/ipc/curve.h"
#include "mwb/ipc/endpoint.h"
#include "mwb/ipc/error.h"

#include <zmq.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace mwb::ipc::detail {

/// Receives one whole multipart message without waiting. Keeps at most `max_frames` frames and
/// reports `too_many` when there were more (the rest is read and discarded, never stored).
/// Returns false when nothing was waiting.
inline bool recv_frames(zmq::socket_t& s, std::vector<std::string>& frames, std::size_t max_frames, bool& too_many) {
    frames.clear();
    too_many = false;
    zmq::message_t part;
    if (!s.recv(part, zmq::recv_flags::dontwait)) return false;
    while (true) {
        if (frames.size() < max_frames)
            frames.emplace_back(static_cast<const char*>(part.data()), part.size());
        else
            too_many = true;
        if (!part.more()) return true;
        if (!s.recv(part, zmq::recv_flags::none)) return true;  // the rest of a multipart is always there
    }
}

/// Sends a multipart message without waiting; false when it could not be queued (peer gone, HWM).
inline bool send_frames(zmq::socket_t& s, const std::vector<std::string>& frames) {
    try {
        for (std::size_t i = 0; i < frames.size(); ++i) {
            const auto flags =
                zmq::send_flags::dontwait | (i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
            if (!s.send(zmq::buffer(frames[i]), flags)) return false;
        }
        return true;
    } catch (const zmq::error_t&) {
        return false;  // EHOSTUNREACH from a ROUTER whose peer left
    }
}

/// What the loopback names bind to (docs/protocol.md, "Security"): ZeroMQ's bind resolves no host
/// names, so "localhost" binds 127.0.0.1 (IPv4 only, as Megatron's and PyTorch's rendezvous do); an
/// IPv6 address such as [::1] needs ZMQ_IPV6 on the socket, for bind and connect alike.
inline std::string prepare_tcp(zmq::socket_t& s, const std::string& endpoint, bool binding) {
    if (!endpoint.starts_with("tcp://")) return endpoint;
    const Endpoint e = parse_endpoint(endpoint);
    if (e.host.find(':') != std::string::npos) s.set(zmq::sockopt::ipv6, 1);
    if (binding && e.host == "localhost") return "tcp://127.0.0.1:" + std::to_string(e.port);
    return endpoint;
}

inline std::string bind_checked(zmq::socket_t& s, const std::string& endpoint, std::string_view what) {
    try {
        s.bind(prepare_tcp(s, endpoint, true));
    } catch (const zmq::error_t& e) {
        throw Error(std::string(what) + " endpoint " + endpoint + ": cannot bind: " + e.what());
    }
    return s.get(zmq::sockopt::last_endpoint);
}

inline void connect_checked(zmq::socket_t& s, const std::string& endpoint, std::string_view what) {
    try {
        s.connect(prepare_tcp(s, endpoint, false));
    } catch (const zmq::error_t& e) {
        throw Error(std::string(what) + " endpoint " + endpoint + ": cannot connect: " + e.what());
    }
}

inline void make_curve_server(zmq::socket_t& s, const ServerCurve& c) {
    s.set(zmq::sockopt::curve_server, 1);
    s.set(zmq::sockopt::curve_secretkey, c.server.secret_key);
    s.set(zmq::sockopt::zap_domain, "mwb");
}

inline void make_curve_client(zmq::socket_t& s, const ClientCurve& c) {
    s.set(zmq::sockopt::curve_serverkey, c.server_public_key);
    s.set(zmq::sockopt::curve_publickey, c.client.public_key);
    s.set(zmq::sockopt::curve_secretkey, c.client.secret_key);
}

/// Detects dead connections (a peer that vanished without closing) with ZMTP heartbeats.
inline void keep_alive(zmq::socket_t& s) {
    s.set(zmq::sockopt::heartbeat_ivl, 1000);
    s.set(zmq::sockopt::heartbeat_timeout, 3000);
    s.set(zmq::sockopt::reconnect_ivl, 100);
    s.set(zmq::sockopt::reconnect_ivl_max, 2000);
}

}  // namespace mwb::ipc::detail
