#include "backend/telemetry/control.h"

namespace mwb {

std::optional<ControlAction> parse_control_action(std::string_view name) {
    if (name == "pause") return ControlAction::Pause;
    if (name == "resume") return ControlAction::Resume;
    if (name == "checkpoint") return ControlAction::Checkpoint;
    if (name == "stop") return ControlAction::Stop;
    if (name == "status") return ControlAction::Status;
    return std::nullopt;
}

const char* control_action_name(ControlAction a) {
    switch (a) {
    case ControlAction::Pause: return "pause";
    case ControlAction::Resume: return "resume";
    case ControlAction::Checkpoint: return "checkpoint";
    case ControlAction::Stop: return "stop";
    case ControlAction::Status: return "status";
    }
    return "?";
}

}  // namespace mwb
