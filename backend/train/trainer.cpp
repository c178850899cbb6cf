#include "train/trainer.h"

#include "checkpoint/checkpoint.h"
#include "config/config_io.h"
#include "config/validate.h"
#include "core/build_info.h"
#include "core/memory.h"
#include "model/gpt_model.h"
#include "mwb/kernels/device.h"
#include "mwb/kernels/error.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "telemetry/flops.h"
#include "telemetry/run_dir.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <thread>

namespace mwb {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string format_duration(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    const auto total = static_cast<int64_t>(s + 0.5);
    if (total >= 3600) return fmt::format("{}h{:02d}m", total / 3600, (total / 60) % 60);
    if (total >= 60) return fmt::format("{}m{:02d}s", total / 60, total % 60);
    return fmt::format("{}s", total);
}

std::string format_bytes(int64_t b) {
    const double v = static_cast<double>(b);
    if (v >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", v / (1024.0 * 1024 * 1024));
    return fmt::format("{:.1f} MiB", v / (1024.0 * 1024));
}

nlohmann::json memory_json(const MemoryStats& m) {
    nlohmann::json by_category = nlohmann::json::object();
    for (int c = 0; c < kMemCategories; ++c)
        by_category[std::string(category_name(static_cast<MemCategory>(c)))] = {{"current", m.current[c]},
                                                                                 {"peak", m.peak[c]}};
    return {{"allocated", m.total_current}, {"peak", m.total_peak}, {"reserved", m.reserved}, {"by_category", by_category}};
}

/// Everything a run holds; one instance per train() call.
class Run {
public:
    Run(TrainerInputs& in, RunDir& dir)
        : in_(in), cfg_(in.config), dir_(dir), dims_(GptDims::from_config(cfg_)),
          model_(dims_, RecomputePolicy::from_config(cfg_.training), storage_dtype(cfg_.training), ctx_, alloc_),
          micro_batches_(num_micro_batches(cfg_, 1)), schedule_(cfg_.training), scaler_(cfg_.training),
          flops_(flops_per_iteration(cfg_)),
          tokens_(alloc_, MemCategory::Data, dims_.micro_batch * (dims_.seq + 1), DType::I32) {
        model_.init_weights(static_cast<uint64_t>(cfg_.training.seed));
        optimizer_ = std::make_unique<Optimizer>(model_.layout(), model_.params(), model_.grads(), cfg_.training,
                                                 model_.storage(), ctx_, alloc_);
    }

    RunStatus run() {
        if (!cfg_.logging.load.empty()) load(cfg_.logging.load);
        announce();
        const int64_t total = cfg_.training.train_iters;
        interval_start_ = Clock::now();
        while (iteration_ < total) {
            train_step();
            const bool last = iteration_ == total;
            if (iteration_ % cfg_.logging.log_interval == 0 || last) log_interval();
            if (in_.valid && cfg_.data.eval_interval > 0 && cfg_.data.eval_iters > 0 &&
                (iteration_ % cfg_.data.eval_interval == 0 || last))
                evaluate();
            if (should_save(last)) save();
            if (signalled()) return stop_now(RunStatus::Interrupted, "interrupted", "stop requested (signal)");
            handle_control();
            if (stop_requested_) return stop_now(RunStatus::Stopped, "stopped", "stop requested over the control channel");
        }
        finish("finished", "");
        return RunStatus::Finished;
    }

    void fail(const std::string& why) { finish("failed", why); }

private:
    bool signalled() const { return in_.stop_requested && in_.stop_requested->load(); }

    /// Ends the run early: logs the partial interval and checkpoints (into --save, else
    /// <run_dir>/checkpoints) so that it can be resumed.
    RunStatus stop_now(RunStatus status, const char* name, const char* reason) {
        if (!iteration_logged_ && interval_iterations_ > 0) log_interval();
        if (!checkpointed_ && iteration_ > 0) save(true);
        finish(name, reason);
        return status;
    }

    /// Applies every pending control request at this iteration boundary; while paused, waits here
    /// (still answering requests and watching for signals).
    void handle_control() {
        if (!in_.control) return;
        do {
            while (auto request = in_.control->poll()) apply(*request);
            if (paused_ && !signalled() && !stop_requested_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        } while (paused_ && !signalled() && !stop_requested_);
    }

    void apply(const ControlRequest& r) {
        nlohmann::json result = {{"ok", true}, {"action", control_action_name(r.action)}, {"iteration", iteration_}};
        switch (r.action) {
        case ControlAction::Status:
            result.update({{"state", paused_ ? "paused" : "running"}, {"train_iters", cfg_.training.train_iters},
                           {"consumed_samples", consumed_samples_}, {"skipped_iterations", skipped_}});
            break;
        case ControlAction::Pause:
            paused_ = true;
            break;
        case ControlAction::Resume:
            paused_ = false;
            break;
        case ControlAction::Checkpoint:
            result["path"] = save(true).string();
            break;
        case ControlAction::Stop:
            stop_requested_ = true;
            paused_ = false;
            break;
        }
        in_.control->reply(r, result);
        if (r.action != ControlAction::Status)
            dir_.publish("event", {{"kind", "control_applied"}, {"action", control_action_name(r.action)},
                                   {"iteration", iteration_}, {"request_id", r.id}});
        if (in_.print_progress && r.action != ControlAction::Status)
            spdlog::info("control: {} at iteration {}", control_action_name(r.action), iteration_);
    }

    void announce() {
        const auto& m = cfg_.model;
        const int64_t params = model_.layout().parameter_count();
        nlohmann::json run = {
            {"run_id", dir_.run_id()},
            {"config", to_json(cfg_)},
            {"derived",
             {{"padded_vocab_size", padded_vocab_size(cfg_)},
              {"num_micro_batches", micro_batches_},
              {"parameters", params},
              {"model_flops_per_iteration", flops_.model},
              {"hardware_flops_per_iteration", flops_.hardware}}},
            {"topology", {{"world_size", 1}, {"tensor_model_parallel_size", 1}, {"pipeline_model_parallel_size", 1},
                          {"data_parallel_size", 1}, {"device", "cpu"}, {"threads", ops::num_threads()}}},
            {"data", in_.data_description},
            {"build", build_info()},
            {"resumed_from_iteration", iteration_},
        };
        dir_.write_run_json(run);
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        dir_.publish("run.start", {{"config", run["config"]}, {"derived", run["derived"]}, {"topology", run["topology"]},
                                   {"hosts", {host}}, {"iteration", iteration_}});
        if (in_.print_progress) {
            spdlog::info("model: {} layers, hidden {}, {} heads, seq {}, vocab {} (padded {}): {:.2f}M parameters",
                         m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, model_vocab_size(cfg_),
                         padded_vocab_size(cfg_), static_cast<double>(params) / 1e6);
            spdlog::info("batch: {} x {} micro-batches = {} samples/iteration; {} | {} thread(s), {}", 
                         cfg_.training.micro_batch_size, micro_batches_, cfg_.training.global_batch_size,
                         in_.data_description, ops::num_threads(),
                         cfg_.training.bf16 ? "bf16 (emulated)" : cfg_.training.fp16 ? "fp16 (emulated)" : "fp32");
            spdlog::info("run directory: {}", dir_.path().string());
        }
    }

    void read_micro_batch(const data::SampleSource& source, int64_t first_sample) {
        const int64_t per = dims_.seq + 1;
        for (int64_t b = 0; b < dims_.micro_batch; ++b)
            source.read(first_sample + b, std::span<int32_t>(tokens_.i32() + b * per, static_cast<std::size_t>(per)));
    }

    void train_step() {
        const auto t0 = Clock::now();
        const int64_t it = iteration_ + 1;
        model_.zero_grads();
        const double loss_scale = scaler_.scale();
        const float grad_scale = static_cast<float>(loss_scale / static_cast<double>(micro_batches_));
        const bool round_grads = model_.storage() != DType::F32 && !cfg_.training.accumulate_allreduce_grads_in_fp32;
        double loss = 0;
        for (int64_t m = 0; m < micro_batches_; ++m) {
            read_micro_batch(*in_.train, consumed_samples_ + m * dims_.micro_batch);
            loss += model_.forward_backward(tokens_.i32(), grad_scale, static_cast<uint64_t>(cfg_.training.seed),
                                            micro_batch_stream(it, m));
            if (round_grads) ops::round_to(ctx_, model_.grads(), model_.storage());
        }
        loss /= static_cast<double>(micro_batches_);
        const double lr = schedule_.lr(iteration_);
        const StepResult step = optimizer_->step(lr, loss_scale);
        scaler_.update(step.skipped);
        iteration_ = it;
        consumed_samples_ += cfg_.training.global_batch_size;
        checkpointed_ = false;
        iteration_logged_ = false;

        if (step.skipped) {
            ++skipped_;
            ++interval_skipped_;
            dir_.publish("event", {{"kind", "skipped_iteration"}, {"iteration", it}, {"loss_scale", loss_scale},
                                   {"reason", "gradients are not finite"}});
        }
        if (!std::isfinite(loss)) {
            ++nonfinite_in_a_row_;
            dir_.publish("event", {{"kind", "nan_loss"}, {"iteration", it}, {"loss", nullptr}});
            MWB_CHECK(nonfinite_in_a_row_ < 10 || scaler_.dynamic(),
                      "training diverged: the loss was not finite for {} iterations in a row (last at iteration {})",
                      nonfinite_in_a_row_, it);
        } else {
            nonfinite_in_a_row_ = 0;
            interval_loss_ += loss;
            ++interval_loss_count_;
        }
        last_lr_ = lr;
        last_grad_norm_ = step.grad_norm;
        last_loss_scale_ = loss_scale;
        ++interval_iterations_;
        interval_time_ += seconds_since(t0);
    }

    void log_interval() {
        const double n = std::max<int64_t>(1, interval_iterations_);
        const double iter_time = interval_time_ / n;
        const double tokens_per_iter = static_cast<double>(cfg_.training.global_batch_size) * dims_.seq;
        const double loss = interval_loss_count_ ? interval_loss_ / static_cast<double>(interval_loss_count_) : NAN;
        const MemoryStats mem = alloc_.stats();
        const double tflops = flops_.model / iter_time / 1e12;
        nlohmann::json rec = {
            {"iteration", iteration_},
            {"consumed_samples", consumed_samples_},
            {"consumed_tokens", static_cast<int64_t>(consumed_samples_ * dims_.seq)},
            {"lm_loss", std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr)},
            {"lr", last_lr_},
            {"grad_norm", std::isfinite(last_grad_norm_) ? nlohmann::json(last_grad_norm_) : nlohmann::json(nullptr)},
            {"loss_scale", last_loss_scale_},
            {"skipped_iterations", interval_skipped_},
            {"iterations_in_interval", interval_iterations_},
            {"iteration_time_s", iter_time},
            {"tokens_per_sec", tokens_per_iter / iter_time},
            {"tflops_per_device", tflops},
            {"hardware_tflops_per_device", flops_.hardware / iter_time / 1e12},
            {"mem_allocated_bytes", mem.total_current},
            {"mem_peak_bytes", mem.total_peak},
            {"mem", memory_json(mem)},
        };
        dir_.publish("step", rec);
        if (in_.print_progress) {
            const double eta = iter_time * static_cast<double>(cfg_.training.train_iters - iteration_);
            spdlog::info("iter {:>6}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | {:.3f} s/it | "
                         "{:.1f} GFLOP/s | mem {} (peak {}){} | ETA {}",
                         iteration_, cfg_.training.train_iters, loss, last_lr_, last_grad_norm_, tokens_per_iter / iter_time,
                         iter_time, tflops * 1e3, format_bytes(mem.total_current), format_bytes(mem.total_peak),
                         interval_skipped_ ? fmt::format(" | skipped {}", interval_skipped_) : "", format_duration(eta));
        }
        interval_loss_ = 0;
        interval_loss_count_ = 0;
        interval_iterations_ = 0;
        interval_skipped_ = 0;
        interval_time_ = 0;
        iteration_logged_ = true;
    }

    void evaluate() {
        const auto t0 = Clock::now();
        double sum = 0;
        int64_t count = 0;
        for (int64_t k = 0; k < cfg_.data.eval_iters; ++k) {
            for (int64_t m = 0; m < micro_batches_; ++m) {
                read_micro_batch(*in_.valid, (k * micro_batches_ + m) * dims_.micro_batch);
                sum += model_.evaluate(tokens_.i32());
                ++count;
            }
        }
        const double loss = sum / static_cast<double>(count);
        dir_.publish("eval", {{"iteration", iteration_}, {"consumed_tokens", consumed_samples_ * dims_.seq},
                              {"lm_loss", loss}, {"ppl", std::exp(std::min(loss, 700.0))},
                              {"samples", count * dims_.micro_batch}, {"time_s", seconds_since(t0)}});
        if (in_.print_progress)
            spdlog::info("validation at iter {}: loss {:.4f} | ppl {:.3f} ({} samples, {:.1f} s)", iteration_, loss,
                         std::exp(std::min(loss, 700.0)), count * dims_.micro_batch, seconds_since(t0));
    }

    /// Where checkpoints go: --save, else <run_dir>/checkpoints when saving at intervals or on request.
    fs::path save_dir(bool requested = false) const {
        if (!cfg_.logging.save.empty()) return cfg_.logging.save;
        if (cfg_.logging.save_interval > 0 || requested) return dir_.path() / "checkpoints";
        return {};
    }

    bool should_save(bool last) const {
        if (save_dir().empty()) return false;
        return last || (cfg_.logging.save_interval > 0 && iteration_ % cfg_.logging.save_interval == 0);
    }

    std::vector<CheckpointTensor> checkpoint_tensors() {
        std::vector<CheckpointTensor> t;
        const ParamLayout& layout = model_.layout();
        const std::pair<const char*, TensorView> arenas[] = {
            {"param/", optimizer_->master()}, {"exp_avg/", optimizer_->exp_avg()}, {"exp_avg_sq/", optimizer_->exp_avg_sq()}};
        for (const auto& [prefix, arena] : arenas)
            for (std::size_t i = 0; i < layout.size(); ++i) {
                float* p = layout.view(arena, i).f32();
                t.push_back({prefix + layout[i].name, layout[i].shape, p, p});
            }
        return t;
    }

    fs::path save(bool requested = false) {
        const auto t0 = Clock::now();
        CheckpointState s;
        s.iteration = iteration_;
        s.consumed_samples = consumed_samples_;
        s.optimizer_steps = optimizer_->steps();
        s.skipped_iterations = skipped_;
        s.loss_scaler = scaler_.state();
        s.config = to_json(cfg_);
        const fs::path where = save_checkpoint(save_dir(requested), s, checkpoint_tensors());
        checkpointed_ = true;
        dir_.publish("event", {{"kind", "checkpoint_saved"}, {"iteration", iteration_}, {"path", where.string()},
                               {"time_s", seconds_since(t0)}});
        if (in_.print_progress) spdlog::info("saved checkpoint {} ({:.2f} s)", where.string(), seconds_since(t0));
        return where;
    }

    void load(const fs::path& from) {
        const fs::path dir = resolve_checkpoint_dir(from);
        const CheckpointState s = load_checkpoint(dir, checkpoint_tensors());
        optimizer_->set_steps(s.optimizer_steps);
        optimizer_->sync_params_from_master();
        scaler_.load_state(s.loss_scaler);
        iteration_ = s.iteration;
        consumed_samples_ = s.consumed_samples;
        skipped_ = s.skipped_iterations;
        dir_.publish("event", {{"kind", "checkpoint_loaded"}, {"iteration", iteration_}, {"path", dir.string()}});
        if (in_.print_progress) spdlog::info("resumed from {} at iteration {}", dir.string(), iteration_);
    }

    void finish(const std::string& status, const std::string& reason) {
        const MemoryStats mem = alloc_.stats();
        dir_.publish("run.end", {{"status", status}, {"reason", reason}, {"iteration", iteration_},
                                 {"consumed_samples", consumed_samples_}, {"skipped_iterations", skipped_},
                                 {"mem_peak_bytes", mem.total_peak}, {"mem", memory_json(mem)}});
    }

    TrainerInputs& in_;
    const Config& cfg_;
    RunDir& dir_;
    OpContext ctx_;
    Allocator alloc_;
    GptDims dims_;
    GptModel model_;
    std::unique_ptr<Optimizer> optimizer_;
    int64_t micro_batches_;
    LrSchedule schedule_;
    LossScaler scaler_;
    FlopCounts flops_;
    Buffer tokens_;  // (B, S+1)

    int64_t iteration_ = 0, consumed_samples_ = 0, skipped_ = 0;
    int nonfinite_in_a_row_ = 0;
    bool checkpointed_ = false, iteration_logged_ = false, paused_ = false, stop_requested_ = false;
    double last_lr_ = 0, last_grad_norm_ = 0, last_loss_scale_ = 1;
    double interval_loss_ = 0, interval_time_ = 0;
    int64_t interval_loss_count_ = 0, interval_iterations_ = 0, interval_skipped_ = 0;
    Clock::time_point interval_start_;
};

}  // namespace

RunStatus train(TrainerInputs inputs, RunDir& run_dir) {
    MWB_CHECK(inputs.train != nullptr, "train: no training data source");
    if (inputs.config.logging.threads > 0) ops::set_num_threads(inputs.config.logging.threads);
    std::unique_ptr<Run> run;
    try {
        run = std::make_unique<Run>(inputs, run_dir);
        return run->run();
    } catch (const std::exception& e) {
        if (run) run->fail(e.what());
        else run_dir.publish("run.end", {{"status", "failed"}, {"reason", e.what()}});
        throw;
    }
}

}  // namespace mwb
