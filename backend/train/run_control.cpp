#include "backend/train/run_control.h"

#include "backend/parallel/parallel_context.h"
#include "backend/telemetry/run_dir.h"
#include "backend/train/records.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>
#include <vector>

namespace mwb {

bool RunControl::leader() const { return par_.world_rank() == 0; }

RunControl::Decision RunControl::decide() {
    Decision d;
    do {
        float msg[1 + kMaxRequests] = {0};  // small integers: exact in float
        std::vector<ControlRequest> requests;
        msg[0] = (in_.stop_requested && in_.stop_requested->load()) ? 1.0f : 0.0f;
        if (leader()) {
            while (in_.control && static_cast<int>(requests.size()) < kMaxRequests) {
                auto r = in_.control->poll();
                if (!r) break;
                requests.push_back(*r);
            }
            for (std::size_t i = 0; i < requests.size(); ++i)
                msg[1 + i] = static_cast<float>(1 + static_cast<int>(requests[i].action));
        }
        par_.world().all_reduce_max(msg, 1 + kMaxRequests);
        d.signalled = msg[0] != 0.0f;
        for (int i = 0; i < kMaxRequests && msg[1 + i] != 0.0f; ++i) {
            const auto action = static_cast<ControlAction>(static_cast<int>(msg[1 + i]) - 1);
            const nlohmann::json result = apply(action);
            if (leader()) finish_request(requests[static_cast<std::size_t>(i)], result);
        }
        if (paused_ && !d.signalled && !stop_requested_ && leader())
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (paused_ && !d.signalled && !stop_requested_);
    return d;
}

nlohmann::json RunControl::apply(ControlAction action) {
    nlohmann::json result = {{"ok", true}, {"action", control_action_name(action)}, {"iteration", progress_.iteration}};
    switch (action) {
    case ControlAction::Status:
        result.update({{"state", paused_ ? "paused" : "running"}, {"train_iters", in_.config.training.train_iters},
                       {"consumed_samples", progress_.consumed_samples}, {"skipped_iterations", progress_.skipped},
                       {"world_size", par_.world_size()}});
        break;
    case ControlAction::Pause: paused_ = true; break;
    case ControlAction::Resume: paused_ = false; break;
    case ControlAction::Checkpoint: result["path"] = checkpoint_().string(); break;
    case ControlAction::Stop:
        stop_requested_ = true;
        paused_ = false;
        break;
    }
    return result;
}

void RunControl::finish_request(const ControlRequest& r, const nlohmann::json& result) {
    in_.control->reply(r, result);
    if (r.action == ControlAction::Status) return;
    publish_event(dir_, ipc::ControlAppliedEvent{std::string(control_action_name(r.action)), r.id, progress_.iteration});
    if (in_.print_progress) spdlog::info("control: {} at iteration {}", control_action_name(r.action), progress_.iteration);
}

}  // namespace mwb
