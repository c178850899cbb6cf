#pragma once
// The training loop of one rank: micro-batches through the pipeline schedule with gradient
// accumulation, gradient reduction over the parallel groups, the optimizer step, learning-rate
// schedule and loss scaling, evaluation, checkpoints, control requests and telemetry. Rank 0 writes
// the run directory and prints; every rank takes part in every collective decision.
#include "backend/config/config.h"
#include "backend/data/sample_source.h"
#include "backend/telemetry/control.h"

#include <atomic>
#include <memory>

namespace mwb {

class RunDir;
class ParallelContext;

/// How a run ended; the process exit code follows it.
enum class RunStatus { Finished = 0, Failed = 1, Stopped = 3, Interrupted = 130 };

struct TrainerInputs {
    Config config;  ///< resolved and validated
    std::unique_ptr<data::SampleSource> train;
    std::unique_ptr<data::SampleSource> valid;  ///< may be null (no evaluation)
    std::unique_ptr<data::SampleSource> test;   ///< may be null; evaluated once after training
    std::string data_description;
    /// Megatron-LM flags given that change nothing here ({flag, values, note}), recorded in run.json.
    nlohmann::json accepted_flags = nlohmann::json::array();
    /// Set from a signal handler (or a test) to stop after the current iteration, saving a checkpoint.
    /// Any rank's flag stops every rank at the same iteration.
    const std::atomic<bool>* stop_requested = nullptr;
    /// Print a progress line every log interval (mwb-train's rank 0 does; tests need not).
    bool print_progress = true;
    /// Pause / resume / checkpoint / stop / status requests, polled by rank 0 at every iteration
    /// boundary and applied on every rank (may be null).
    ControlSource* control = nullptr;
};

/// Runs training to the end (or until stopped), writing the run directory (`run_dir`: rank 0 only,
/// null on the other ranks). Single process: `par` may be null. Throws mwb::Error on failures; the
/// run directory then records a run.end event with status "failed".
RunStatus train(TrainerInputs inputs, RunDir* run_dir, ParallelContext* par = nullptr);

/// Single-process convenience.
inline RunStatus train(TrainerInputs inputs, RunDir& run_dir) { return train(std::move(inputs), &run_dir, nullptr); }

}  // namespace mwb
