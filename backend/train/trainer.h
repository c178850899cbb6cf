#pragma once
// The training loop of one rank: micro-batches forward/backward with gradient accumulation, the
// optimizer step, learning-rate schedule and loss scaling, evaluation, checkpoints and telemetry.
#include "config/config.h"
#include "data/sample_source.h"
#include "telemetry/control.h"

#include <atomic>
#include <memory>

namespace mwb {

class RunDir;

/// How a run ended; the process exit code follows it.
enum class RunStatus { Finished = 0, Failed = 1, Stopped = 3, Interrupted = 130 };

struct TrainerInputs {
    Config config;  ///< resolved and validated
    std::unique_ptr<data::SampleSource> train;
    std::unique_ptr<data::SampleSource> valid;  ///< may be null (no evaluation)
    std::string data_description;
    /// Set from a signal handler (or a test) to stop after the current iteration, saving a checkpoint.
    const std::atomic<bool>* stop_requested = nullptr;
    /// Print a progress line every log interval (mwb-train does; tests need not).
    bool print_progress = true;
    /// Pause / resume / checkpoint / stop / status requests, polled at every iteration boundary
    /// (may be null).
    ControlSource* control = nullptr;
};

/// Runs training to the end (or until stop_requested), writing the run directory. Throws mwb::Error
/// on failures; the run directory then records a run.end event with status "failed".
RunStatus train(TrainerInputs inputs, RunDir& run_dir);

}  // namespace mwb
