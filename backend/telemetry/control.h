#pragma once
// Commands from outside a running training (the app's buttons, `mwb-record`, a script), applied by
// the train loop at an iteration boundary. The wire that carries them lives in ipc/; the train loop
// only sees this interface.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace mwb {

enum class ControlAction { Pause, Resume, Checkpoint, Stop, Status };

/// "pause" | "resume" | "checkpoint" | "stop" | "status" -> action (nullopt for anything else).
std::optional<ControlAction> parse_control_action(std::string_view name);
const char* control_action_name(ControlAction a);

struct ControlRequest {
    ControlAction action = ControlAction::Status;
    std::string id;  ///< the requester's correlation id, echoed in the reply
};

/// A source of control requests. poll() never blocks; reply() answers one request (once).
class ControlSource {
public:
    virtual ~ControlSource() = default;
    virtual std::optional<ControlRequest> poll() = 0;
    /// `result` holds at least {"ok": bool}; the implementation adds the request id.
    virtual void reply(const ControlRequest& request, const nlohmann::json& result) = 0;
};

}  // namespace mwb
