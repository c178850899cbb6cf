#pragma once
// The two request/reply protocols next to the PUB stream (docs/protocol.md):
//   snapshot  {"schema": "mwb.snapshot/1", "since": N[, "max": M]}
//             -> [header, message, message, ...] (header: ok, run_id, count, last_seq, next_seq, more)
//   control   {"schema": "mwb.control/1", "action": "pause", "id": "...", "token": "..."}
//             -> {"schema", "id", "ok", ...the trainer's result | "code" and "error"}
// Requests are size-checked and validated here; anything else is malformed and dropped or refused.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mwb::ipc {

inline constexpr std::string_view kControlActions[] = {"pause", "resume", "checkpoint", "stop", "status"};
inline constexpr std::size_t kMaxRequestIdBytes = 128;

struct SnapshotRequest {
    int64_t since = 0;    ///< first seq wanted
    std::size_t max = 0;  ///< most messages in the reply (0: the server's page size)
};

struct ControlCommand {
    std::string action;  ///< one of kControlActions
    std::string id;      ///< the requester's correlation id (echoed in the reply and the control_applied event)
    std::string token;   ///< the run's control token (plaintext loopback); "" with CURVE
};

/// Why a request was refused: the stable machine-readable "code" of a reply with "ok": false, beside
/// the prose "error" (docs/protocol.md lists them). Codes are only ever added within a major version.
enum class Refusal {
    BadRequest,    ///< "bad_request": not JSON, wrong schema, a field missing or of the wrong type
    Unauthorized,  ///< "unauthorized": wrong or missing control token
    DuplicateId,   ///< "duplicate_id": a request with this id is already pending
    Busy,          ///< "busy": too many control requests are pending
    RunEnded,      ///< "run_ended": the run ended before the request was applied
    RateLimited,   ///< "rate_limited": too many snapshot requests or bytes; retry after "retry_after_s"
};
std::string_view refusal_code(Refusal refusal);
/// {"ok": false, "code": ..., "error": message}
nlohmann::json refusal_reply(Refusal refusal, const std::string& message);

/// The "id" of a request that failed validation, when its JSON still has a usable one (a string of
/// at most kMaxRequestIdBytes), to echo it in the refusal; "" otherwise.
std::string request_id_of(std::string_view body);

std::optional<SnapshotRequest> parse_snapshot_request(std::string_view body, std::string* why = nullptr);
std::optional<ControlCommand> parse_control_request(std::string_view body, std::string* why = nullptr);

std::string make_snapshot_request(int64_t since, std::size_t max = 0);
std::string make_control_request(std::string_view action, std::string_view id, std::string_view token);

}  // namespace mwb::ipc
