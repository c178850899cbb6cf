#pragma once
// Following a run from outside: the subscriber side of the clone pattern. A Follower subscribes to
// the PUB stream, asks the snapshot socket for everything it has not seen, and hands out the run's
// messages in seq order without gaps or duplicates, whether it joins late, falls behind, loses the
// connection, or the trainer restarts. Single-threaded: call next() from one thread (a recorder's
// loop, the app's receiver thread).
#include "mwb/ipc/curve.h"
#include "mwb/ipc/message.h"

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace mwb::ipc {

struct FollowerOptions {
    /// tcp://HOST:PORT or ipc://PATH of the PUB socket; or a run directory on this machine (its
    /// telemetry.json names the endpoints and is read again after a disconnect: ephemeral ports
    /// change when the trainer restarts; while no publisher answers, its files are read instead).
    std::string endpoint;
    /// Needed for runs that use CURVE (and for any endpoint that is not loopback).
    std::optional<ClientCurve> curve;
    /// The first seq the caller still needs of run `run_id` (default 0): a recorder resumes here.
    std::function<int64_t(const std::string& run_id)> resume_from;
    /// Also hand out heartbeats (they are not part of the series).
    bool deliver_heartbeats = false;
    /// A snapshot request without a reply for this long is sent again on a fresh socket.
    std::chrono::milliseconds request_timeout{3000};
    /// No traffic (heartbeats included) for this long counts as a lost connection: reconnect, then
    /// back off (doubling up to max_backoff) while the run stays silent.
    std::chrono::milliseconds silence_timeout{4000};
    std::chrono::milliseconds max_backoff{8000};
    int receive_hwm = 100000;  ///< live messages buffered by the socket; beyond, they are dropped (and re-asked)
};

struct FollowerStats {
    uint64_t delivered = 0;       ///< series messages handed out
    uint64_t snapshots = 0;       ///< snapshot pages received
    uint64_t from_snapshots = 0;  ///< of the delivered messages, those that came from snapshots
    uint64_t from_files = 0;      ///< those read from the run directory while its publisher was gone
    uint64_t gaps = 0;            ///< gaps noticed (a live seq jump, or a heartbeat ahead of us)
    uint64_t duplicates = 0;      ///< messages dropped because they were already handed out
    uint64_t reconnects = 0;
    uint64_t malformed = 0;      ///< frames that were not valid messages or replies
    uint64_t rate_limited = 0;   ///< snapshot requests the server refused as rate_limited (asked again later)
    uint64_t unrecoverable = 0;  ///< seqs the server no longer had (holes skipped)
    uint64_t runs = 0;           ///< distinct run_ids seen
};

class Follower {
public:
    /// Throws Error for an endpoint that cannot be followed (malformed, plaintext off loopback). A run
    /// directory that does not exist yet, or has no telemetry.json yet, is waited for.
    explicit Follower(FollowerOptions options);
    ~Follower();
    Follower(const Follower&) = delete;
    Follower& operator=(const Follower&) = delete;

    /// The next message of the series (or a heartbeat, if asked for), waiting up to `timeout`.
    std::optional<Message> next(std::chrono::milliseconds timeout);

    /// The run being followed ("" before the first contact), the next seq expected of it.
    const std::string& run_id() const;
    int64_t next_seq() const;
    /// True while heartbeats arrive and no gap is being filled.
    bool live() const;
    /// The last heartbeat's state ("running", "ended") or "" before one arrived.
    const std::string& state() const;
    /// Endpoints as resolved (snapshot and control are learned from telemetry.json or heartbeats).
    const std::string& publish_endpoint() const;
    const std::string& snapshot_endpoint() const;
    const std::string& control_endpoint() const;
    const FollowerStats& stats() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

/// The endpoints a run directory advertises (<run_dir>/telemetry.json, schema mwb.endpoints/1).
struct RunEndpoints {
    std::string run_id, publish, snapshot, control;
    std::filesystem::path token_file;  ///< control token (plaintext runs); empty with CURVE
    bool curve = false;
    std::string server_public_key;  ///< with CURVE
};
/// Reads <run_dir>/telemetry.json; throws Error naming the file and the field when it cannot.
RunEndpoints read_run_endpoints(const std::filesystem::path& run_dir);

}  // namespace mwb::ipc
