#include "backend/train/trainer.h"

#include "backend/generate/training_samples.h"
#include "mwb/kernels/error.h"
#include "backend/parallel/parallel_context.h"
#include "backend/telemetry/run_dir.h"
#include "backend/train/checkpointing.h"
#include "backend/train/clock.h"
#include "backend/train/evaluation.h"
#include "backend/train/interval_stats.h"
#include "backend/train/progress.h"
#include "backend/train/records.h"
#include "backend/train/run_control.h"
#include "backend/train/run_metadata.h"
#include "backend/train/run_objects.h"
#include "backend/train/train_step.h"

#include <spdlog/spdlog.h>

namespace mwb {

namespace {

/// One train() call: the run's objects and the parts of the loop that work on them.
class Run {
public:
    Run(TrainerInputs& in, RunDir* dir, ParallelContext& par)
        : in_(in), cfg_(in.config), dir_(dir), par_(par), objects_(cfg_, par),
          log_(cfg_, par, objects_.alloc, objects_.flops, objects_.dims.seq, dir, in.print_progress),
          step_(objects_, *in.train, log_, dir), evaluation_(cfg_, step_, log_, dir, in.print_progress),
          checkpoints_(objects_, dir, in.print_progress),
          control_(in, par, dir, progress_, [this] { return checkpoints_.save(progress_, true); }),
          metadata_(objects_, in, dir) {}

    RunStatus run() {
        if (!cfg_.checkpoint.load.empty()) checkpoints_.load(cfg_.checkpoint.load, progress_);
        metadata_.announce(progress_);
        start_samples();
        train_start_ = Clock::now();
        const int64_t total = cfg_.training.train_iters;
        const bool validating = in_.valid && cfg_.data.eval_iters > 0;
        while (progress_.iteration < total) {
            step_.run(progress_);
            const int64_t it = progress_.iteration;
            const bool last = it == total;
            if (it % cfg_.logging.log_interval == 0 || last) log_.log_interval(progress_);
            if (samples_) samples_->after_iteration(it, progress_.consumed_samples * objects_.dims.seq, last);
            if (validating && cfg_.data.eval_interval > 0 && it % cfg_.data.eval_interval == 0)
                evaluation_.run(*in_.valid, false, progress_);
            if (checkpoints_.should_save(last, progress_)) checkpoints_.save(progress_);
            const RunControl::Decision d = control_.decide();
            if (d.signalled) return stop_now(RunStatus::Interrupted, "interrupted", "stop requested (signal)");
            if (control_.stop_requested())
                return stop_now(RunStatus::Stopped, "stopped", "stop requested over the control channel");
            // As Megatron-LM: exit_interval and exit_duration_in_mins end the run with a checkpoint (when
            // saving) and exit status 0, without the evaluations after training.
            if (!last) {
                if (const std::string why = exit_reason(); !why.empty()) {
                    stop_now(RunStatus::Finished, "stopped", why.c_str());
                    return RunStatus::Finished;
                }
            }
        }
        // As Megatron-LM's pretrain(): once more on fresh validation samples, then the test split.
        if (validating) evaluation_.run(*in_.valid, false, progress_);
        if (in_.test && cfg_.data.eval_iters > 0) evaluation_.run(*in_.test, true, progress_);
        metadata_.finish("finished", "", progress_);
        return RunStatus::Finished;
    }

    void fail(const std::string& why) { metadata_.finish("failed", why, progress_); }

private:
    bool leader() const { return par_.world_rank() == 0; }

    /// Text samples (generate/training_samples.h) by the ranks of data-parallel replica 0, published by
    /// rank 0; made once the run directory has its run.start.
    void start_samples() {
        if (par_.coord().dp == 0 && cfg_.sampling.sample_interval > 0)
            samples_ = std::make_unique<generate::TrainingSamples>(
                cfg_, objects_.model, generate::DecoderGroups{&par_.host_tp(), &par_.host_pp()},
                [this](std::string_view topic, nlohmann::json fields) {
                    if (dir_) dir_->publish(topic, std::move(fields));
                });
    }

    /// Why the run should exit now (exit_interval, exit_duration_in_mins), rank 0's clock deciding for
    /// every rank; "" to go on.
    std::string exit_reason() {
        const auto& l = cfg_.checkpoint;
        const int64_t it = progress_.iteration;
        if (l.exit_interval > 0 && it % l.exit_interval == 0)
            return fmt::format("exit_interval {} reached at iteration {}", l.exit_interval, it);
        if (l.exit_duration_in_mins <= 0) return "";
        int32_t done = leader() && seconds_since(train_start_) / 60.0 > l.exit_duration_in_mins ? 1 : 0;
        par_.world().broadcast(&done, sizeof done, 0);
        return done ? fmt::format("exit_duration_in_mins {} reached at iteration {}", l.exit_duration_in_mins, it) : "";
    }

    /// Ends the run early: logs the partial interval and checkpoints (into --save, else
    /// <run_dir>/checkpoints) so that it can be resumed.
    RunStatus stop_now(RunStatus status, const char* name, const char* reason) {
        if (log_.stats().iterations > 0) log_.log_interval(progress_);  // not logged yet
        if (!checkpoints_.saved(progress_) && progress_.iteration > 0) checkpoints_.save(progress_, true);
        metadata_.finish(name, reason, progress_);
        return status;
    }

    TrainerInputs& in_;
    const Config& cfg_;
    RunDir* dir_;
    ParallelContext& par_;
    Progress progress_;
    RunObjects objects_;
    IntervalLog log_;
    TrainStep step_;
    Evaluation evaluation_;
    Checkpointing checkpoints_;
    RunControl control_;
    RunMetadata metadata_;
    std::unique_ptr<generate::TrainingSamples> samples_;  // data-parallel replica 0 with sample_interval
    Clock::time_point train_start_ = Clock::now();
};

}  // namespace

RunStatus train(TrainerInputs inputs, RunDir* run_dir, ParallelContext* par) {
    MWB_CHECK(inputs.train != nullptr, "train: no training data source");
    if (inputs.config.runtime.threads > 0) ops::set_num_threads(inputs.config.runtime.threads);
    std::unique_ptr<World> own_world;
    std::unique_ptr<ParallelContext> own_par;
    if (!par) {
        own_world = std::make_unique<World>(nullptr, nullptr);
        MWB_CHECK(!own_world->uses_mpi() || own_world->size() == 1,
                  "train() without a ParallelContext runs one process; pass the context of the MPI world");
        own_par = std::make_unique<ParallelContext>(*own_world, inputs.config.parallel);
        par = own_par.get();
    }
    MWB_CHECK((par->world_rank() == 0) == (run_dir != nullptr),
              "train: rank 0, and only rank 0, writes the run directory");
    std::unique_ptr<Run> run;
    try {
        run = std::make_unique<Run>(inputs, run_dir, *par);
        return run->run();
    } catch (const std::exception& e) {
        if (run)
            run->fail(e.what());
        else if (run_dir)
            publish_record(run_dir, ipc::RunEndRecord{"failed", e.what(), std::nullopt});
        throw;
    }
}

}  // namespace mwb
