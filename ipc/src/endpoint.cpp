#include "mwb/ipc/endpoint.h"

#include "mwb/ipc/error.h"

#include <arpa/inet.h>

#include <charconv>

namespace mwb::ipc {

namespace {

[[noreturn]] void bad(std::string_view what, std::string_view text, std::string_view why) {
    throw Error(std::string(what) + " '" + std::string(text) + "': " + std::string(why) +
                " (expected tcp://HOST:PORT, ipc://PATH or inproc://NAME)");
}

}  // namespace

Endpoint parse_endpoint(std::string_view text, std::string_view what) {
    Endpoint e;
    e.text.assign(text);
    const auto sep = text.find("://");
    if (sep == std::string_view::npos) bad(what, text, "no transport");
    e.transport.assign(text.substr(0, sep));
    const std::string_view rest = text.substr(sep + 3);
    if (e.transport == "ipc" || e.transport == "inproc") {
        if (rest.empty()) bad(what, text, "empty path");
        e.path.assign(rest);
        return e;
    }
    if (e.transport != "tcp") bad(what, text, "unsupported transport '" + e.transport + "'");
    const auto colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0) bad(what, text, "no host:port");
    std::string_view host = rest.substr(0, colon), port = rest.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host.empty()) bad(what, text, "empty host");
    int p = -1;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (port == "*")
        p = 0;
    else if (ec != std::errc() || end != port.data() + port.size() || p < 0 || p > 65535)
        bad(what, text, "port must be 0..65535 (0 or * for an ephemeral port)");
    e.host.assign(host);
    e.port = p;
    return e;
}

bool is_loopback_host(std::string_view host) {
    if (host == "localhost" || host == "lo") return true;
    const std::string h(host);
    in_addr v4{};
    if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
    in6_addr v6{};
    if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
    return false;
}

bool is_loopback(const Endpoint& e) {
    if (e.transport == "ipc" || e.transport == "inproc") return true;
    return is_loopback_host(e.host);
}

std::string connectable_endpoint(const std::string& bound, const std::string& reached_via) {
    const Endpoint b = parse_endpoint(bound, "bound endpoint");
    if (b.transport != "tcp") return bound;
    const Endpoint r = parse_endpoint(reached_via, "endpoint");
    if (r.transport != "tcp") return bound;
    const bool v6 = r.host.find(':') != std::string::npos;
    return "tcp://" + (v6 ? "[" + r.host + "]" : r.host) + ":" + std::to_string(b.port);
}

}  // namespace mwb::ipc
