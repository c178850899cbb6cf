#include "train/trainer.h"

#include "checkpoint/checkpoint.h"
#include "config/config_io.h"
#include "config/null_vocabulary.h"
#include "config/validate.h"
#include "core/build_info.h"
#include "generate/training_samples.h"
#include "core/memory.h"
#include "model/gpt_model.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/error.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/gradient_reducer.h"
#include "parallel/parallel_context.h"
#include "telemetry/flops.h"
#include "telemetry/run_dir.h"
#include "telemetry/tensorboard.h"
#include "train/pipeline_runner.h"

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

/// Group types whose traffic is reported (the "world" and "model" groups only carry norms and control).
const char* const kGroups[] = {"tp", "sp", "pp", "dp", "embedding", "model"};
constexpr int kNumGroups = 6;

/// What each rank reports to rank 0 every log interval (a fixed-size record for one gather).
struct RankReport {
    double mem_current[kMemCategories], mem_peak[kMemCategories];
    double mem_total, mem_total_peak, mem_reserved;
    double device_free, device_total;  // cudaMemGetInfo of a GPU run; 0 on the CPU
    double bytes[kNumGroups], comm_seconds[kNumGroups], wait_seconds[kNumGroups];
    double forward_s, backward_s, reduce_s, optimizer_s, data_s;  // sums over the interval
};

/// Traffic accumulated over the training steps of one log interval (evaluation and checkpoints excluded).
struct IntervalComm {
    std::map<std::string, CommStats> by_group;
    void add_delta(const std::map<std::string, CommStats>& before, const std::map<std::string, CommStats>& after) {
        for (const auto& [g, s] : after) {
            CommStats d = s;
            const CommStats& b = before.at(g);
            d.bytes_sent -= b.bytes_sent;
            d.calls -= b.calls;
            d.seconds -= b.seconds;
            d.wait_seconds -= b.wait_seconds;
            by_group[g].add(d);
        }
    }
};

/// The device a run trains on: logging.device as mwb-train resolved it ("auto" from other callers
/// means the CPU). On GPUs of more than one process the data groups become NCCL communicators; the
/// caller has made this rank's GPU current (mwb-train: the node-local rank's).
Device run_device(const Config& cfg, ParallelContext& par) {
    if (cfg.logging.device != "cuda") return Device::CPU;
    if (par.world_size() > 1) par.use_device_collectives(nullptr);  // ordered with the ops' default stream
    return Device::CUDA;
}

/// Everything a run holds; one instance per train() call.
class Run {
public:
    Run(TrainerInputs& in, RunDir* dir, ParallelContext& par)
        : in_(in), cfg_(in.config), dir_(dir), par_(par), ctx_{run_device(cfg_, par), nullptr}, alloc_(ctx_.device),
          dims_(GptDims::from_config(cfg_)),
          partition_(ModelPartition::for_stage(dims_, par.pp_size(), par.coord().pp,
                                               cfg_.parallel.num_layers_per_virtual_pipeline_stage)),
          tp_(par.tp(), par.sp(), par.host_tp(), par.sequence_parallel(), ctx_), distributed_(cfg_.parallel.use_distributed_optimizer),
          model_(dims_, partition_, tp_, RecomputePolicy::from_config(cfg_.training), storage_dtype(cfg_.training),
                 ctx_, alloc_, distributed_ ? par.dp_size() : 1),
          reducer_(model_.layout(), model_.grads(), par, dims_.tied_output, distributed_,
                   cfg_.parallel.ddp_bucket_size, ctx_),
          runner_(model_, par), micro_batches_(num_micro_batches(cfg_, par.world_size())),
          schedule_(cfg_.training), scaler_(cfg_.training), flops_(flops_per_iteration(cfg_)),
          tokens_(host_allocator(), MemCategory::Data, dims_.micro_batch * (dims_.seq + 1), DType::I32) {
        // On a GPU, bf16 runs feed the GEMMs bf16 operands (tensor cores); weights and stored activations
        // are bf16 values already, dropout-scaled gradients are rounded as a bf16 tensor would be.
        if (ctx_.device == Device::CUDA && model_.storage() == DType::BF16) ctx_.gemm_inputs = DType::BF16;
        if (ctx_.device == Device::CUDA) device::set_deterministic(cfg_.logging.deterministic);
        model_.init_weights(static_cast<uint64_t>(cfg_.training.seed));
        optimizer_ = std::make_unique<Optimizer>(model_.layout(), model_.params(), model_.grads(), cfg_.training,
                                                 model_.storage(), ctx_, alloc_, &par_, reducer_.shard());
        if (leader() && !cfg_.logging.tensorboard_dir.empty())
            tensorboard_ = std::make_unique<TensorBoardWriter>(cfg_.logging.tensorboard_dir);
    }

    /// Text samples (generate/training_samples.h) by the ranks of data-parallel replica 0, published by
    /// rank 0; made once the run directory has its run.start.
    void start_samples() {
        if (par_.coord().dp == 0 && cfg_.logging.sample_interval > 0)
            samples_ = std::make_unique<generate::TrainingSamples>(
                cfg_, model_, generate::DecoderGroups{&par_.host_tp(), &par_.host_pp()},
                [this](std::string_view topic, nlohmann::json fields) { publish(topic, std::move(fields)); });
    }

    RunStatus run() {
        if (!cfg_.logging.load.empty()) load(cfg_.logging.load);
        announce();
        start_samples();
        train_start_ = Clock::now();
        const int64_t total = cfg_.training.train_iters;
        const bool validating = in_.valid && cfg_.data.eval_iters > 0;
        while (iteration_ < total) {
            train_step();
            const bool last = iteration_ == total;
            if (iteration_ % cfg_.logging.log_interval == 0 || last) log_interval();
            if (samples_) samples_->after_iteration(iteration_, consumed_samples_ * dims_.seq, last);
            if (validating && cfg_.data.eval_interval > 0 && iteration_ % cfg_.data.eval_interval == 0)
                evaluate(*in_.valid, false);
            if (should_save(last)) save();
            const Decision d = decide();
            if (d.signalled) return stop_now(RunStatus::Interrupted, "interrupted", "stop requested (signal)");
            if (stop_requested_) return stop_now(RunStatus::Stopped, "stopped", "stop requested over the control channel");
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
        if (validating) evaluate(*in_.valid, false);
        if (in_.test && cfg_.data.eval_iters > 0) evaluate(*in_.test, true);
        finish("finished", "");
        return RunStatus::Finished;
    }

    void fail(const std::string& why) { finish("failed", why); }

    /// Why the run should exit now (exit_interval, exit_duration_in_mins), rank 0's clock deciding for
    /// every rank; "" to go on.
    std::string exit_reason() {
        const auto& l = cfg_.logging;
        if (l.exit_interval > 0 && iteration_ % l.exit_interval == 0)
            return fmt::format("exit_interval {} reached at iteration {}", l.exit_interval, iteration_);
        if (l.exit_duration_in_mins <= 0) return "";
        int32_t done = leader() && seconds_since(train_start_) / 60.0 > l.exit_duration_in_mins ? 1 : 0;
        par_.world().broadcast(&done, sizeof done, 0);
        return done ? fmt::format("exit_duration_in_mins {} reached at iteration {}", l.exit_duration_in_mins, iteration_)
                    : "";
    }

private:
    bool leader() const { return par_.world_rank() == 0; }
    /// Memory the host reads and writes (tokens, checkpoint staging): the run's allocator on the CPU.
    Allocator& host_allocator() { return alloc_.device() == Device::CPU ? alloc_ : host_alloc_; }

    void publish(std::string_view topic, nlohmann::json fields) {
        if (dir_) dir_->publish(topic, std::move(fields));
    }

    // ---- decisions taken by rank 0 for everyone: signals and control requests -------------------------

    struct Decision {
        bool signalled = false;
    };

    /// At an iteration boundary every rank contributes its signal flag (a signal to any one rank stops
    /// them all at this boundary) and rank 0 its pending control requests; one max-reduction tells
    /// every rank both, and every rank applies the requests in the same order. While paused, rank 0
    /// keeps answering requests and the others wait in the reduction.
    Decision decide() {
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

    nlohmann::json apply(ControlAction action) {
        nlohmann::json result = {{"ok", true}, {"action", control_action_name(action)}, {"iteration", iteration_}};
        switch (action) {
        case ControlAction::Status:
            result.update({{"state", paused_ ? "paused" : "running"}, {"train_iters", cfg_.training.train_iters},
                           {"consumed_samples", consumed_samples_}, {"skipped_iterations", skipped_},
                           {"world_size", par_.world_size()}});
            break;
        case ControlAction::Pause: paused_ = true; break;
        case ControlAction::Resume: paused_ = false; break;
        case ControlAction::Checkpoint: result["path"] = save(true).string(); break;
        case ControlAction::Stop:
            stop_requested_ = true;
            paused_ = false;
            break;
        }
        return result;
    }

    void finish_request(const ControlRequest& r, const nlohmann::json& result) {
        in_.control->reply(r, result);
        if (r.action == ControlAction::Status) return;
        publish("event", {{"kind", "control_applied"}, {"action", control_action_name(r.action)},
                          {"iteration", iteration_}, {"request_id", r.id}});
        if (in_.print_progress) spdlog::info("control: {} at iteration {}", control_action_name(r.action), iteration_);
    }

    /// Ends the run early: logs the partial interval and checkpoints (into --save, else
    /// <run_dir>/checkpoints) so that it can be resumed.
    RunStatus stop_now(RunStatus status, const char* name, const char* reason) {
        if (!iteration_logged_ && interval_iterations_ > 0) log_interval();
        if (!checkpointed_ && iteration_ > 0) save(true);
        finish(name, reason);
        return status;
    }

    // ---- the run's description ----------------------------------------------------------------------

    nlohmann::json topology() const {
        return {{"world_size", par_.world_size()},
                {"tensor_model_parallel_size", par_.tp_size()},
                {"pipeline_model_parallel_size", par_.pp_size()},
                {"data_parallel_size", par_.dp_size()},
                {"virtual_pipeline_chunks", model_.num_chunks()},
                {"sequence_parallel", par_.sequence_parallel()},
                {"distributed_optimizer", distributed_},
                {"rank_order", "tp-dp-pp"},
                {"device", device_name(ctx_.device)},
                {"threads", ops::num_threads()}};
    }

    void announce() {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        std::vector<char> hosts(static_cast<std::size_t>(par_.world_size()) * sizeof host);
        par_.world().gather(host, hosts.data(), sizeof host, 0);
        // Parameters of the whole model: every rank counts what it owns once (see Optimizer).
        double owned = 0;
        for (const ParamInfo& p : model_.layout())
            if (!p.tied_copy && (p.split_dim >= 0 || par_.coord().tp == 0) && par_.coord().dp == 0)
                owned += static_cast<double>(p.numel);
        par_.world().all_reduce_sum(&owned, 1);
        if (!leader()) return;

        nlohmann::json host_list = nlohmann::json::array();
        for (int r = 0; r < par_.world_size(); ++r) host_list.push_back(std::string(hosts.data() + r * sizeof host));
        const auto& m = cfg_.model;
        const auto params = static_cast<int64_t>(owned);
        nlohmann::json run = {
            {"run_id", dir_->run_id()},
            {"config", to_json(cfg_)},
            {"derived",
             {{"padded_vocab_size", padded_vocab_size(cfg_)},
              {"num_micro_batches", micro_batches_},
              {"parameters", params},
              {"model_flops_per_iteration", flops_.model},
              {"hardware_flops_per_iteration", flops_.hardware}}},
            {"topology", topology()},
            {"hosts", host_list},
            {"data", in_.data_description},
            {"accepted_flags", in_.accepted_flags},
            {"build", build_info()},
            {"resumed_from_iteration", iteration_},
        };
        dir_->write_run_json(run);
        publish("run.start", {{"config", run["config"]}, {"derived", run["derived"]}, {"topology", run["topology"]},
                              {"hosts", host_list}, {"iteration", iteration_}});
        if (in_.print_progress) {
            spdlog::info("model: {} layers, hidden {}, {} heads, seq {}, vocab {} (padded {}): {:.2f}M parameters",
                         m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, model_vocab_size(cfg_),
                         padded_vocab_size(cfg_), static_cast<double>(params) / 1e6);
            if (par_.world_size() > 1)
                spdlog::info("layout: {} ranks = TP {} x PP {} x DP {}{}{}{}", par_.world_size(), par_.tp_size(),
                             par_.pp_size(), par_.dp_size(), par_.sequence_parallel() ? ", sequence parallel" : "",
                             model_.num_chunks() > 1 ? fmt::format(", {} virtual stages per rank", model_.num_chunks()) : "",
                             distributed_ ? ", distributed optimizer" : "");
            spdlog::info("batch: {} x {} micro-batches x {} data-parallel = {} samples/iteration; {} | {} thread(s), {}",
                         cfg_.training.micro_batch_size, micro_batches_, par_.dp_size(), cfg_.training.global_batch_size,
                         in_.data_description, ops::num_threads(),
                         cfg_.training.bf16 ? "bf16 (emulated)" : cfg_.training.fp16 ? "fp16 (emulated)" : "fp32");
            spdlog::info("run directory: {}", dir_->path().string());
        }
    }

    // ---- one iteration -----------------------------------------------------------------------------

    /// The micro-batch m of this rank: global micro-batch m·DP + dp (as Megatron-LM's sampler), its
    /// samples [base + g·B, base + (g+1)·B) of `source`.
    MicroBatch micro_batch(const data::SampleSource& source, int64_t base, int64_t m, bool needs_tokens, int64_t it,
                           float grad_scale) {
        const int64_t g = m * par_.dp_size() + par_.coord().dp;
        if (needs_tokens) {
            const auto t0 = Clock::now();
            const int64_t per = dims_.seq + 1;
            for (int64_t b = 0; b < dims_.micro_batch; ++b)
                source.read(base + g * dims_.micro_batch + b,
                            std::span<int32_t>(tokens_.i32() + b * per, static_cast<std::size_t>(per)));
            interval_data_s_ += seconds_since(t0);
        }
        MicroBatch mb;
        mb.tokens = needs_tokens ? tokens_.i32() : nullptr;
        mb.seed = static_cast<uint64_t>(cfg_.training.seed);
        mb.stream_base = micro_batch_stream(it, g);
        mb.grad_scale = grad_scale;
        return mb;
    }

    /// Σ of the last stage's `micro_batches` micro-batch losses -> the iteration's mean loss on every rank.
    double mean_loss(double loss_sum, int64_t micro_batches) {
        par_.host_pp().all_reduce_sum(&loss_sum, 1);
        par_.host_dp().all_reduce_sum(&loss_sum, 1);
        return loss_sum / static_cast<double>(micro_batches * par_.dp_size());
    }

    void train_step() {
        const auto t0 = Clock::now();
        const auto comm_before = par_.stats();
        const int64_t it = iteration_ + 1;
        model_.zero_grads();
        // The global batch of this iteration (rampup_batch_size / step_batch_size_schedule change the
        // number of micro-batches, as Megatron-LM's num-microbatches calculator does).
        const int64_t batch = global_batch_size_at(cfg_, consumed_samples_);
        const int64_t micro_batches = num_micro_batches(cfg_, par_.world_size(), consumed_samples_);
        const double loss_scale = scaler_.scale();
        const float grad_scale = static_cast<float>(loss_scale / static_cast<double>(micro_batches));
        const PipelineResult pr = runner_.run(micro_batches, true, [&](int64_t m, bool needs_tokens) {
            return micro_batch(*in_.train, consumed_samples_, m, needs_tokens, it, grad_scale);
        });
        if (model_.storage() != DType::F32 && !cfg_.training.accumulate_allreduce_grads_in_fp32)
            ops::round_to(ctx_, model_.grads(), model_.storage());
        const auto t_reduce = Clock::now();
        reducer_.reduce();
        const double loss = mean_loss(pr.loss_sum, micro_batches);
        interval_reduce_s_ += seconds_since(t_reduce);
        const auto t_opt = Clock::now();
        // Megatron-LM's scheduler counts the samples of successful steps only: a skipped step leaves
        // the learning rate (and weight decay) where it was.
        const double lr = schedule_.lr(static_cast<double>(scheduled_samples_));
        optimizer_->set_weight_decay(schedule_.weight_decay(static_cast<double>(scheduled_samples_)));
        const StepResult step = optimizer_->step(lr, loss_scale);
        if (!step.skipped) scheduled_samples_ += batch;
        scaler_.update(step.skipped);
        interval_optimizer_s_ += seconds_since(t_opt);
        interval_forward_s_ += pr.forward_seconds;
        interval_backward_s_ += pr.backward_seconds;
        iteration_ = it;
        consumed_samples_ += batch;
        interval_samples_ += batch;
        last_batch_ = batch;
        checkpointed_ = false;
        iteration_logged_ = false;

        if (step.skipped) {
            ++skipped_;
            ++interval_skipped_;
            publish("event", {{"kind", "skipped_iteration"}, {"iteration", it}, {"loss_scale", loss_scale},
                              {"reason", "gradients are not finite"}});
        }
        if (!std::isfinite(loss)) {
            ++nonfinite_in_a_row_;
            publish("event", {{"kind", "nan_loss"}, {"iteration", it}, {"loss", nullptr}});
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
        tensorboard_step(loss);
        ++interval_iterations_;
        interval_comm_.add_delta(comm_before, par_.stats());
        interval_time_ += seconds_since(t0);
    }

    // ---- logging ------------------------------------------------------------------------------------

    /// Megatron-LM's training_log scalars, each also "... vs samples" (x = consumed samples).
    void tensorboard_scalar(const std::string& tag, double value) {
        tensorboard_->add_scalar(tag, value, iteration_);
        tensorboard_->add_scalar(tag + " vs samples", value, consumed_samples_);
    }

    void tensorboard_step(double loss) {
        if (!tensorboard_ || iteration_ % cfg_.logging.tensorboard_log_interval != 0) return;
        tensorboard_scalar("learning-rate", last_lr_);
        tensorboard_scalar("batch-size", static_cast<double>(last_batch_));
        if (std::isfinite(loss)) tensorboard_scalar("lm loss", loss);
        if (cfg_.logging.log_loss_scale_to_tensorboard) tensorboard_scalar("loss-scale", last_loss_scale_);
        if (std::isfinite(last_grad_norm_)) tensorboard_scalar("grad-norm", last_grad_norm_);
    }

    RankReport report() const {
        RankReport r{};
        const MemoryStats m = alloc_.stats();
        for (int c = 0; c < kMemCategories; ++c) {
            r.mem_current[c] = static_cast<double>(m.current[c]);
            r.mem_peak[c] = static_cast<double>(m.peak[c]);
        }
        r.mem_total = static_cast<double>(m.total_current);
        r.mem_total_peak = static_cast<double>(m.total_peak);
        r.mem_reserved = static_cast<double>(m.reserved);
        const DeviceMemoryTotals totals = alloc_.device_totals();
        r.device_free = static_cast<double>(totals.free_bytes);
        r.device_total = static_cast<double>(totals.total_bytes);
        for (int g = 0; g < kNumGroups; ++g) {
            const auto it = interval_comm_.by_group.find(kGroups[g]);
            if (it == interval_comm_.by_group.end()) continue;
            r.bytes[g] = static_cast<double>(it->second.bytes_sent);
            r.comm_seconds[g] = it->second.seconds;
            r.wait_seconds[g] = it->second.wait_seconds;
        }
        r.forward_s = interval_forward_s_;
        r.backward_s = interval_backward_s_;
        r.reduce_s = interval_reduce_s_;
        r.optimizer_s = interval_optimizer_s_;
        r.data_s = interval_data_s_;
        return r;
    }

    nlohmann::json rank_json(int rank, const RankReport& r, double n) const {
        const int tp = rank % par_.tp_size(), dp = (rank / par_.tp_size()) % par_.dp_size(),
                  pp = rank / (par_.tp_size() * par_.dp_size());
        nlohmann::json comm = nlohmann::json::object();
        double comm_s = 0, wait_s = 0;
        for (int g = 0; g < kNumGroups; ++g) {
            comm[kGroups[g]] = {{"bytes_per_iteration", static_cast<int64_t>(r.bytes[g] / n)},
                                {"seconds_per_iteration", r.comm_seconds[g] / n}};
            comm_s += r.comm_seconds[g];
            wait_s += r.wait_seconds[g];
        }
        return {{"rank", rank},
                {"tp", tp},
                {"pp", pp},
                {"dp", dp},
                {"comm", comm},
                {"time",
                 {{"forward_s", r.forward_s / n},
                  {"backward_s", r.backward_s / n},
                  {"gradient_reduce_s", r.reduce_s / n},
                  {"optimizer_s", r.optimizer_s / n},
                  {"data_s", r.data_s / n},
                  {"communication_s", (comm_s - wait_s) / n},
                  {"pipeline_bubble_s", wait_s / n}}}};
    }

    nlohmann::json rank_memory_json(int rank, const RankReport& r) const {
        nlohmann::json by_category = nlohmann::json::object();
        for (int c = 0; c < kMemCategories; ++c)
            by_category[std::string(category_name(static_cast<MemCategory>(c)))] = {
                {"current", static_cast<int64_t>(r.mem_current[c])}, {"peak", static_cast<int64_t>(r.mem_peak[c])}};
        nlohmann::json j = {{"rank", rank},
                            {"allocated", static_cast<int64_t>(r.mem_total)},
                            {"peak", static_cast<int64_t>(r.mem_total_peak)},
                            {"reserved", static_cast<int64_t>(r.mem_reserved)},
                            {"by_category", by_category}};
        if (r.device_total > 0) {  // GPU runs: the device's own view (other processes' memory included)
            j["device_free"] = static_cast<int64_t>(r.device_free);
            j["device_total"] = static_cast<int64_t>(r.device_total);
        }
        return j;
    }

    void log_interval() {
        const RankReport mine = report();
        std::vector<RankReport> all(static_cast<std::size_t>(par_.world_size()));
        par_.world().gather(&mine, all.data(), sizeof(RankReport), 0);
        const double n = static_cast<double>(std::max<int64_t>(1, interval_iterations_));
        if (leader()) {
            const double iter_time = interval_time_ / n;
            const double tokens_per_iter = static_cast<double>(interval_samples_) / n * dims_.seq;
            const double loss = interval_loss_count_ ? interval_loss_ / static_cast<double>(interval_loss_count_) : NAN;
            const MemoryStats mem = alloc_.stats();
            const double tflops = flops_.model / iter_time / 1e12 / par_.world_size();
            nlohmann::json ranks = nlohmann::json::array(), memory = nlohmann::json::array();
            int64_t peak_max = 0;
            for (int r = 0; r < par_.world_size(); ++r) {
                ranks.push_back(rank_json(r, all[static_cast<std::size_t>(r)], n));
                memory.push_back(rank_memory_json(r, all[static_cast<std::size_t>(r)]));
                peak_max = std::max(peak_max, static_cast<int64_t>(all[static_cast<std::size_t>(r)].mem_total_peak));
            }
            nlohmann::json rec = {
                {"iteration", iteration_},
                {"consumed_samples", consumed_samples_},
                {"consumed_tokens", static_cast<int64_t>(consumed_samples_ * dims_.seq)},
                {"lm_loss", std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr)},
                {"lr", last_lr_},
                {"grad_norm", std::isfinite(last_grad_norm_) ? nlohmann::json(last_grad_norm_) : nlohmann::json(nullptr)},
                {"loss_scale", last_loss_scale_},
                {"global_batch_size", last_batch_},
                {"skipped_iterations", interval_skipped_},
                {"iterations_in_interval", interval_iterations_},
                {"iteration_time_s", iter_time},
                {"tokens_per_sec", tokens_per_iter / iter_time},
                {"tflops_per_device", tflops},
                {"hardware_tflops_per_device", flops_.hardware / iter_time / 1e12 / par_.world_size()},
                {"mfu", cfg_.logging.peak_tflops_per_device > 0 ? nlohmann::json(tflops / cfg_.logging.peak_tflops_per_device)
                                                                  : nlohmann::json(nullptr)},
                {"mem_allocated_bytes", mem.total_current},
                {"mem_peak_bytes", mem.total_peak},
                {"mem_peak_bytes_max_rank", peak_max},
                {"mem", memory_json(mem)},
                {"ranks", ranks},
            };
            publish("step", rec);
            publish("memory", {{"iteration", iteration_}, {"ranks", memory}});
            if (tensorboard_) {
                if (cfg_.logging.log_timers_to_tensorboard) {
                    tensorboard_->add_scalar("iteration-time", iter_time, iteration_);
                    if (cfg_.logging.log_throughput) tensorboard_->add_scalar("throughput", tflops, iteration_);
                }
                if (cfg_.logging.log_memory_to_tensorboard) {
                    tensorboard_->add_scalar("mem-allocated-bytes", static_cast<double>(mem.total_current), iteration_);
                    tensorboard_->add_scalar("mem-max-allocated-bytes", static_cast<double>(mem.total_peak), iteration_);
                    tensorboard_->add_scalar("mem-reserved-bytes", static_cast<double>(mem.reserved), iteration_);
                }
                tensorboard_->flush();
            }
            if (in_.print_progress) {
                const double eta = iter_time * static_cast<double>(cfg_.training.train_iters - iteration_);
                spdlog::info("iter {:>6}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | {:.3f} s/it | "
                             "{:.1f} GFLOP/s{} | mem {} (peak {}){} | ETA {}",
                             iteration_, cfg_.training.train_iters, loss, last_lr_, last_grad_norm_,
                             tokens_per_iter / iter_time, iter_time, tflops * 1e3,
                             cfg_.logging.log_throughput ? fmt::format(" | throughput per device {:.4f} TFLOP/s", tflops) : "",
                             format_bytes(mem.total_current),
                             format_bytes(peak_max), interval_skipped_ ? fmt::format(" | skipped {}", interval_skipped_) : "",
                             format_duration(eta));
            }
        }
        interval_loss_ = interval_time_ = 0;
        interval_forward_s_ = interval_backward_s_ = interval_reduce_s_ = interval_optimizer_s_ = interval_data_s_ = 0;
        interval_loss_count_ = interval_iterations_ = interval_skipped_ = interval_samples_ = 0;
        interval_comm_ = {};
        iteration_logged_ = true;
    }

    /// eval_iters global batches of `source`, forward only. Validation reads fresh samples each time
    /// (Megatron-LM's consumed_valid_samples); the test split is read from its start, once.
    void evaluate(const data::SampleSource& source, bool test) {
        const auto t0 = Clock::now();
        const int64_t gbs = cfg_.training.global_batch_size;
        const int64_t first = test ? 0 : consumed_valid_samples_;
        double sum = 0;
        for (int64_t k = 0; k < cfg_.data.eval_iters; ++k) {
            const int64_t base = first + k * gbs;
            const PipelineResult pr = runner_.run(micro_batches_, false, [&](int64_t m, bool needs_tokens) {
                return micro_batch(source, base, m, needs_tokens, 0, 0.0f);
            });
            sum += mean_loss(pr.loss_sum, micro_batches_);
        }
        const double loss = sum / static_cast<double>(cfg_.data.eval_iters);
        const int64_t samples = cfg_.data.eval_iters * gbs;
        if (!test) consumed_valid_samples_ += samples;
        if (tensorboard_) {  // Megatron-LM writes the test split under the same tags
            tensorboard_scalar("lm loss validation", loss);
            if (cfg_.logging.log_validation_ppl_to_tensorboard)
                tensorboard_scalar("lm loss validation ppl", std::exp(std::min(20.0, loss)));
            tensorboard_->flush();
        }
        publish("eval", {{"iteration", iteration_}, {"consumed_tokens", consumed_samples_ * dims_.seq},
                         {"consumed_samples", consumed_samples_}, {"split", test ? "test" : "valid"},
                         {"consumed_valid_samples", consumed_valid_samples_}, {"lm_loss", loss},
                         {"ppl", std::exp(std::min(loss, 700.0))}, {"samples", samples}, {"time_s", seconds_since(t0)}});
        if (in_.print_progress && leader())
            spdlog::info("{} at iter {}: loss {:.4f} | ppl {:.3f} ({} samples, {:.1f} s)", test ? "test" : "validation",
                         iteration_, loss, std::exp(std::min(loss, 700.0)), samples, seconds_since(t0));
    }

    // ---- checkpoints --------------------------------------------------------------------------------

    /// Where checkpoints go: --save, else <run_dir>/checkpoints when saving at intervals or on request.
    /// Every rank must agree: the run directory's path is broadcast once from rank 0.
    fs::path save_dir(bool requested = false) {
        if (!cfg_.logging.save.empty()) return cfg_.logging.save;
        if (cfg_.logging.save_interval > 0 || requested) return run_dir_path() / "checkpoints";
        return {};
    }

    fs::path run_dir_path() {
        if (run_dir_path_.empty()) {
            char path[4096] = {0};
            if (leader()) std::snprintf(path, sizeof path, "%s", dir_->path().c_str());
            par_.world().broadcast(path, sizeof path, 0);
            run_dir_path_ = path;
        }
        return run_dir_path_;
    }

    bool should_save(bool last) {
        if (save_dir().empty()) return false;
        return last || (cfg_.logging.save_interval > 0 && iteration_ % cfg_.logging.save_interval == 0);
    }

    /// The three fp32 arenas of the checkpoint in host memory, each as large as the whole parameter
    /// arena: the optimizer's own arenas on a CPU without the distributed optimizer, otherwise host
    /// copies. For a save (`gather`), this rank's shard (downloaded from the GPU) lands at its place
    /// and the data-parallel group's other shards around it; a load fills them from the files and
    /// copies this rank's shard back (copied).
    struct FullState {
        Buffer master, exp_avg, exp_avg_sq;
        TensorView views[3];
        bool copied = false;
    };

    FullState full_state(bool gather) {
        FullState s;
        const TensorView shards[3] = {optimizer_->master(), optimizer_->exp_avg(), optimizer_->exp_avg_sq()};
        const ArenaShard& shard = optimizer_->shard();
        const int64_t arena = model_.params().numel();
        if (ctx_.device == Device::CPU && shard.size() == arena) {
            for (int i = 0; i < 3; ++i) s.views[i] = shards[i];
            return s;
        }
        Buffer* bufs[3] = {&s.master, &s.exp_avg, &s.exp_avg_sq};
        for (int i = 0; i < 3; ++i) {
            *bufs[i] = Buffer(host_allocator(), MemCategory::Workspace, arena);
            s.views[i] = bufs[i]->view();
            if (!gather) continue;
            const TensorView mine = slice_1d(s.views[i], shard.begin, shard.size());
            ops::copy(ctx_, mine, shards[i]);
            // In place: each rank's block already sits at its offset (the host group: no GPU copy).
            if (shard.size() != arena) par_.host_dp().all_gather(mine.f32(), s.views[i].f32(), shard.size());
        }
        s.copied = true;
        return s;
    }

    std::vector<CheckpointTensor> checkpoint_tensors(const FullState& s) {
        std::vector<CheckpointTensor> t;
        const ParamLayout& layout = model_.layout();
        const char* prefixes[3] = {"param/", "exp_avg/", "exp_avg_sq/"};
        for (int k = 0; k < 3; ++k)
            for (std::size_t i = 0; i < layout.size(); ++i) {
                const ParamInfo& p = layout[i];
                for (CheckpointTensor& c : parameter_slices(layout, i, prefixes[k], layout.view(s.views[k], i).f32())) {
                    c.save = !p.tied_copy && (p.split_dim >= 0 || par_.coord().tp == 0) &&
                             (k == 0 || !cfg_.logging.no_save_optim);
                    t.push_back(std::move(c));
                }
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
        s.scheduler_samples = scheduled_samples_;
        s.consumed_valid_samples = consumed_valid_samples_;
        s.loss_scaler = scaler_.state();
        s.config = to_json(cfg_);
        FullState full = full_state(true);
        const fs::path where = save_checkpoint(save_dir(requested), s, checkpoint_tensors(full), par_, par_.coord().dp == 0);
        checkpointed_ = true;
        publish("event", {{"kind", "checkpoint_saved"}, {"iteration", iteration_}, {"path", where.string()},
                          {"time_s", seconds_since(t0)}});
        if (in_.print_progress && leader()) spdlog::info("saved checkpoint {} ({:.2f} s)", where.string(), seconds_since(t0));
        return where;
    }

    /// Resumes from --load; a directory without a checkpoint yet starts the run fresh (Megatron-LM's
    /// behaviour: one job script serves the first submission and every requeue).
    void load(const fs::path& from) {
        const std::optional<fs::path> found = find_checkpoint(from);
        if (!found) {
            publish("event", {{"kind", "checkpoint_not_found"}, {"path", from.string()}});
            if (in_.print_progress && leader()) spdlog::info("no checkpoint in {} yet: starting from iteration 0", from.string());
            return;
        }
        const fs::path& dir = *found;
        check_compatible(read_checkpoint_state(dir).config, dir);  // before any tensor is read
        FullState full = full_state(false);
        // A checkpoint saved with no_save_optim holds the weights only: the optimizer then starts over.
        // (A metadata.json that does not parse is load_checkpoint's to report.)
        const nlohmann::json meta = nlohmann::json::parse(read_file(dir / "metadata.json", 256 << 20), nullptr, false);
        bool has_optimizer = !meta.is_object() || !meta.contains("tensors") || !meta["tensors"].is_array();
        if (!has_optimizer)
            for (const auto& t : meta["tensors"])
                has_optimizer |= t.is_object() && t.value("name", "").starts_with("exp_avg/");
        std::vector<CheckpointTensor> tensors = checkpoint_tensors(full);
        if (!has_optimizer)
            std::erase_if(tensors, [](const CheckpointTensor& t) { return !t.name.starts_with("param/"); });
        const CheckpointState s = load_checkpoint(dir, tensors, &par_.world());
        if (full.copied) {
            const ArenaShard& shard = optimizer_->shard();
            const TensorView shards[3] = {optimizer_->master(), optimizer_->exp_avg(), optimizer_->exp_avg_sq()};
            for (int k = 0; k < 3; ++k) ops::copy(ctx_, shards[k], slice_1d(full.views[k], shard.begin, shard.size()));
        }
        optimizer_->set_steps(s.optimizer_steps);
        optimizer_->sync_params_from_master();
        const auto& l = cfg_.logging;
        if (!l.finetune && !l.no_load_optim && has_optimizer) scaler_.load_state(s.loss_scaler);
        if (l.finetune || l.no_load_optim || !has_optimizer) {  // Megatron-LM: optimizer, loss scale and scheduler start over
            for (const TensorView v : {optimizer_->exp_avg(), optimizer_->exp_avg_sq()}) ops::fill(ctx_, v, 0.0f);
            optimizer_->set_steps(0);
        }
        if (!l.finetune) {
            iteration_ = s.iteration;
            consumed_samples_ = s.consumed_samples;
            skipped_ = s.skipped_iterations;
        }
        // The scheduler's position and the validation samples read are in the checkpoint (as Megatron-LM
        // saves its opt_param_scheduler and consumed_valid_samples), so a resumed run repeats the
        // uninterrupted one exactly, batch ramp and skipped steps included. A checkpoint from before
        // they were saved: the scheduler's count follows from the successful steps (exact for a constant
        // batch), validation from eval_iters batches per evaluation (Megatron-LM's own fallback).
        const int64_t gbs = cfg_.training.global_batch_size;
        const bool constant_batch = cfg_.training.rampup_batch_size.empty() && cfg_.training.step_batch_size_schedule.empty();
        if (s.scheduler_samples >= 0)
            scheduled_samples_ = s.scheduler_samples;
        else
            scheduled_samples_ = constant_batch ? optimizer_->steps() * gbs
                                                : consumed_samples_ - skipped_ * global_batch_size_at(cfg_, consumed_samples_);
        if (l.finetune || l.no_load_optim || !has_optimizer) scheduled_samples_ = 0;
        if (l.finetune)
            consumed_valid_samples_ = 0;
        else if (s.consumed_valid_samples >= 0)
            consumed_valid_samples_ = s.consumed_valid_samples;
        else if (cfg_.data.eval_interval > 0)
            consumed_valid_samples_ = iteration_ / cfg_.data.eval_interval * cfg_.data.eval_iters * gbs;
        publish("event", {{"kind", "checkpoint_loaded"}, {"iteration", iteration_}, {"path", dir.string()}});
        if (in_.print_progress && leader()) spdlog::info("resumed from {} at iteration {}", dir.string(), iteration_);
    }

    /// A checkpoint of another model is refused by name, before any surprise: the architecture's keys
    /// and the vocabulary (padded rows may differ with the tensor-parallel size, the ids may not).
    void check_compatible(const nlohmann::json& saved, const fs::path& dir) const {
        const nlohmann::json now = to_json(cfg_);
        for (const char* key :
             {"num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "max_position_embeddings",
              "normalization", "untie_embeddings_and_output_weights", "num_query_groups", "kv_channels", "swiglu",
              "add_bias_linear", "add_qkv_bias", "position_embedding_type", "rotary_base", "rotary_percent",
              "rotary_interleaved", "use_rope_scaling", "rope_scaling_factor"}) {
            if (!saved.contains(key)) continue;
            MWB_CHECK(saved[key] == now[key], "checkpoint '{}' was saved by a model with {} {}, this run has {}",
                      dir.string(), key, saved[key].dump(), now[key].dump());
        }
        if (saved.contains("vocab_size") && saved["vocab_size"].is_number_integer()) {
            const bool legacy_null = saved_legacy_null_vocabulary(saved);
            const int64_t saved_vocab = saved["vocab_size"].get<int64_t>() + (legacy_null ? 1 : 0);
            MWB_CHECK(saved_vocab == model_vocab_size(cfg_),
                      "checkpoint '{}' was saved by a model with a vocabulary of {} ids, this run has {} (vocab_size, "
                      "tokenizer_type{})",
                      dir.string(), saved_vocab, model_vocab_size(cfg_),
                      legacy_null ? fmt::format("; it has the NullTokenizer's legacy vocabulary: pass "
                                                "--null-tokenizer-legacy-eod, or --vocab-size {}",
                                                saved_vocab)
                                  : "");
        }
    }

    void finish(const std::string& status, const std::string& reason) {
        const MemoryStats mem = alloc_.stats();
        publish("run.end", {{"status", status}, {"reason", reason}, {"iteration", iteration_},
                            {"consumed_samples", consumed_samples_}, {"skipped_iterations", skipped_},
                            {"mem_peak_bytes", mem.total_peak}, {"mem", memory_json(mem)}});
    }

    static constexpr int kMaxRequests = 15;

    TrainerInputs& in_;
    const Config& cfg_;
    RunDir* dir_;
    ParallelContext& par_;
    OpContext ctx_;
    Allocator alloc_;       // the device's memory: model, optimizer, activations
    Allocator host_alloc_;  // host memory beside a GPU allocator (unused on the CPU)
    GptDims dims_;
    ModelPartition partition_;
    TensorParallel tp_;
    bool distributed_;
    GptModel model_;
    GradientReducer reducer_;
    PipelineRunner runner_;
    std::unique_ptr<Optimizer> optimizer_;
    int64_t micro_batches_;
    LrSchedule schedule_;
    std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0 with tensorboard_dir
    std::unique_ptr<generate::TrainingSamples> samples_;  // rank 0 with sample_interval
    LossScaler scaler_;
    FlopCounts flops_;
    Buffer tokens_;  // (B, S+1) of the micro-batch being read
    fs::path run_dir_path_;

    int64_t iteration_ = 0, consumed_samples_ = 0, skipped_ = 0;
    int64_t scheduled_samples_ = 0;       // Megatron's scheduler num_steps: samples of successful steps
    int64_t consumed_valid_samples_ = 0;  // validation samples read so far
    int64_t last_batch_ = 0, interval_samples_ = 0;
    Clock::time_point train_start_ = Clock::now();
    int nonfinite_in_a_row_ = 0;
    bool checkpointed_ = false, iteration_logged_ = false, paused_ = false, stop_requested_ = false;
    double last_lr_ = 0, last_grad_norm_ = 0, last_loss_scale_ = 1;
    double interval_loss_ = 0, interval_time_ = 0;
    double interval_forward_s_ = 0, interval_backward_s_ = 0, interval_reduce_s_ = 0, interval_optimizer_s_ = 0,
           interval_data_s_ = 0;
    int64_t interval_loss_count_ = 0, interval_iterations_ = 0, interval_skipped_ = 0;
    IntervalComm interval_comm_;
};

}  // namespace

RunStatus train(TrainerInputs inputs, RunDir* run_dir, ParallelContext* par) {
    MWB_CHECK(inputs.train != nullptr, "train: no training data source");
    if (inputs.config.logging.threads > 0) ops::set_num_threads(inputs.config.logging.threads);
    std::unique_ptr<World> own_world;
    std::unique_ptr<ParallelContext> own_par;
    if (!par) {
        own_world = std::make_unique<World>(nullptr, nullptr);
        MWB_CHECK(!own_world->uses_mpi() || own_world->size() == 1,
                  "train() without a ParallelContext runs one process; pass the context of the MPI world");
        own_par = std::make_unique<ParallelContext>(*own_world, inputs.config.parallel);
        par = own_par.get();
    }
    MWB_CHECK((par->world_rank() == 0) == (run_dir != nullptr), "train: rank 0, and only rank 0, writes the run directory");
    std::unique_ptr<Run> run;
    try {
        run = std::make_unique<Run>(inputs, run_dir, *par);
        return run->run();
    } catch (const std::exception& e) {
        if (run) run->fail(e.what());
        else if (run_dir) run_dir->publish("run.end", {{"status", "failed"}, {"reason", e.what()}});
        throw;
    }
}

}  // namespace mwb
