#pragma once
// ZeroMQ endpoints as the project uses them: tcp://HOST:PORT (port 0 = an ephemeral port chosen at
// bind time) and ipc://PATH (a Unix socket). Loopback decides the security rule: plaintext is only
// allowed on 127.0.0.0/8, ::1, localhost and ipc:// (docs/protocol.md, "Security").
#include <string>
#include <string_view>

namespace mwb::ipc {

struct Endpoint {
    std::string text;       ///< as given
    std::string transport;  ///< "tcp" | "ipc" | "inproc"
    std::string host;       ///< tcp: host, IP address, interface or "*" (brackets removed for IPv6)
    int port = -1;          ///< tcp: 0..65535 (0 = ephemeral)
    std::string path;       ///< ipc / inproc: the rest after "://"
};

/// Parses an endpoint; throws Error naming `what` (e.g. "telemetry endpoint") and the text when it is
/// not tcp://HOST:PORT, ipc://PATH or inproc://NAME.
Endpoint parse_endpoint(std::string_view text, std::string_view what = "endpoint");

/// True for endpoints other machines cannot reach: tcp on a loopback address or "localhost", ipc://,
/// inproc://. Wildcards ("*", "0.0.0.0", "::") and interface names are not loopback.
bool is_loopback(const Endpoint& endpoint);
/// The same for a host string ("127.0.0.1", "::1", "localhost", ...).
bool is_loopback_host(std::string_view host);

/// A bound endpoint as a client elsewhere should connect to it: for tcp, the host of `reached_via`
/// (the endpoint the client already reached) with the port of `bound` ("tcp://0.0.0.0:4100" reached
/// via "tcp://node7:4099" -> "tcp://node7:4100"); ipc/inproc endpoints are returned unchanged.
std::string connectable_endpoint(const std::string& bound, const std::string& reached_via);

}  // namespace mwb::ipc
