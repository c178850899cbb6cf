#pragma once
// Decisions rank 0 takes for every rank at an iteration boundary: a stop signal to any rank, and the
// control channel's pause / resume / checkpoint / stop / status requests, applied on every rank in
// the same order and answered by rank 0.
#include "backend/telemetry/control.h"
#include "backend/train/progress.h"
#include "backend/train/trainer.h"

#include <filesystem>
#include <functional>

namespace mwb {

class ParallelContext;
class RunDir;

class RunControl {
public:
    /// `checkpoint` saves the current state on every rank and returns its directory (a checkpoint request).
    RunControl(const TrainerInputs& in, ParallelContext& par, RunDir* dir, const Progress& progress,
               std::function<std::filesystem::path()> checkpoint)
        : in_(in), par_(par), dir_(dir), progress_(progress), checkpoint_(std::move(checkpoint)) {}

    struct Decision {
        bool signalled = false;  ///< a signal reached some rank: stop now
    };

    /// At an iteration boundary every rank contributes its signal flag (a signal to any one rank stops
    /// them all at this boundary) and rank 0 its pending control requests; one max-reduction tells
    /// every rank both, and every rank applies the requests in the same order. While paused, rank 0
    /// keeps answering requests and the others wait in the reduction.
    Decision decide();
    /// A stop request was applied: stop now.
    bool stop_requested() const { return stop_requested_; }

private:
    nlohmann::json apply(ControlAction action);
    void finish_request(const ControlRequest& r, const nlohmann::json& result);
    bool leader() const;

    static constexpr int kMaxRequests = 15;

    const TrainerInputs& in_;
    ParallelContext& par_;
    RunDir* dir_;
    const Progress& progress_;
    std::function<std::filesystem::path()> checkpoint_;
    bool paused_ = false, stop_requested_ = false;
};

}  // namespace mwb
