#pragma once
// Rank 0's side of the wire: one background thread owns three ZeroMQ sockets
//   publish   XPUB  every message as [topic, json], heartbeats, a welcome heartbeat per subscriber
//   snapshot  ROUTER  "everything since seq N" from the history (clone pattern)
//   control   ROUTER  pause / resume / checkpoint / stop / status, authenticated
// (plus a ZAP handler admitting the allowed CURVE client keys). The training thread only calls
// publish(), poll_control() and reply_control(): they never block on the network (a bounded queue;
// drops are counted and recovered from the run directory). docs/protocol.md is the contract.
#include "mwb/ipc/curve.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace mwb::ipc {

struct ControlCommand;

struct ServerOptions {
    std::string run_id;             ///< stamped on heartbeats and snapshot replies
    std::filesystem::path run_dir;  ///< history reload and evicted messages; may be empty
    std::string publish_endpoint = "tcp://127.0.0.1:0";
    std::string snapshot_endpoint = "tcp://127.0.0.1:0";
    std::string control_endpoint = "tcp://127.0.0.1:0";  ///< "" = no control socket
    /// CURVE on all three sockets; required when any endpoint is not loopback.
    std::optional<ServerCurve> curve;
    /// Required in plaintext control requests (without CURVE); see create_token_file().
    std::string control_token;
    std::size_t queue_capacity = std::size_t{1} << 16;          ///< messages waiting for the thread
    std::size_t history_budget_bytes = std::size_t{256} << 20;  ///< history kept in memory
    std::chrono::milliseconds heartbeat_interval{1000};
    std::size_t snapshot_page_messages = 10000;
    std::size_t snapshot_page_bytes = std::size_t{8} << 20;
    std::size_t max_pending_control = 64;  ///< requests waiting for the trainer
    int publish_hwm = 100000;  ///< messages queued per subscriber; a slower one loses messages (and re-asks)
    /// The snapshot socket answers whoever can connect (anyone on the machine, on loopback without
    /// CURVE), and a page costs the server's thread a copy of up to snapshot_page_bytes: each peer
    /// (connection) may send snapshot_requests_per_s requests per second, in bursts of
    /// snapshot_request_burst, and all peers together receive snapshot_bytes_per_s reply bytes per
    /// second, in bursts of two pages. Beyond that the reply is "rate_limited" with "retry_after_s";
    /// a peer asking again before then gets no reply (counted in rate_limited).
    double snapshot_requests_per_s = 20;
    double snapshot_request_burst = 10;
    double snapshot_bytes_per_s = 8.0 * (1 << 20);
};

struct ServerStats {
    uint64_t published = 0;  ///< messages sent on the PUB socket (heartbeats excluded)
    uint64_t dropped = 0;    ///< messages the full queue refused
    uint64_t recovered = 0;  ///< of those, read back from the run directory
    uint64_t heartbeats = 0;
    uint64_t snapshot_requests = 0;
    uint64_t control_requests = 0;  ///< accepted and handed to the trainer
    uint64_t malformed = 0;         ///< frames dropped or refused as malformed
    uint64_t unauthorized = 0;      ///< control requests with a wrong token, CURVE clients not admitted
    uint64_t rate_limited = 0;      ///< snapshot requests refused by the rate limit (answered or not)
    int64_t last_seq = -1;          ///< newest message in the history
};

class TelemetryServer {
public:
    /// Binds the sockets (in this thread, so errors surface here as Error naming the endpoint) and
    /// starts the thread; reloads the run directory's messages into the history first.
    explicit TelemetryServer(ServerOptions options);
    /// Sends everything queued, a last heartbeat (state "ended"), answers requests still pending,
    /// then closes (waiting up to a second for slow subscribers).
    ~TelemetryServer();
    TelemetryServer(const TelemetryServer&) = delete;
    TelemetryServer& operator=(const TelemetryServer&) = delete;

    /// Queues one message (the JSON carries its envelope, seq included). Never blocks.
    void publish(std::string_view topic, const std::string& json);
    /// The next control request for the trainer, if any. Never blocks.
    std::optional<ControlCommand> poll_control();
    /// Answers request `id` with `result` (the server adds schema and id). Never blocks.
    void reply_control(const std::string& id, nlohmann::json result);

    /// Bound endpoints (ephemeral ports resolved), as clients on this machine connect to them.
    const std::string& publish_endpoint() const;
    const std::string& snapshot_endpoint() const;
    const std::string& control_endpoint() const;
    /// What <run_dir>/telemetry.json holds (schema mwb.endpoints/1): endpoints, run_id, pid, CURVE.
    nlohmann::json info() const;
    ServerStats stats() const;
    /// Waits until every message published so far went out (tests, benchmarks). False on timeout.
    bool flush(std::chrono::milliseconds timeout);

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

/// The file names the wiring writes into the run directory.
inline constexpr const char* kTelemetryInfoFile = "telemetry.json";
inline constexpr const char* kControlTokenFile = "control.token";
inline constexpr std::string_view kEndpointsSchema = "mwb.endpoints/1";

}  // namespace mwb::ipc
