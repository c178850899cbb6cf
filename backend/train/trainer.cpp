#include "train/trainer.h"

#include "checkpoint/checkpoint.h"
#include "config/config_io.h"
#include "config/null_vocabulary.h"
#include "config/validate.h"
#include "core/build_info.h"
#include "core/memory.h"
#include "generate/training_samples.h"
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
#include "train/interval_stats.h"
#include "mwb/ipc/schema.h"
#include "train/pipeline_runner.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <thread>

namespace mwb {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

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
        : in_(in),
          cfg_(in.config),
          dir_(dir),
          par_(par),
          ctx_{run_device(cfg_, par), nullptr},
          alloc_(ctx_.device),
          dims_(GptDims::from_config(cfg_)),
          partition_(ModelPartition::for_stage(dims_, par.pp_size(), par.coord().pp,
                                               cfg_.parallel.num_layers_per_virtual_pipeline_stage)),
          tp_(par.tp(), par.sp(), par.host_tp(), par.sequence_parallel(), ctx_),
          distributed_(cfg_.parallel.use_distributed_optimizer),
          model_(dims_, partition_, tp_, RecomputePolicy::from_config(cfg_.training), storage_dtype(cfg_.training),
                 ctx_, alloc_, distributed_ ? par.dp_size() : 1),
          reducer_(model_.layout(), model_.grads(), par, dims_.tied_output, distributed_, cfg_.parallel.ddp_bucket_size,
                   ctx_),
          runner_(model_, par),
          micro_batches_(num_micro_batches(cfg_, par.world_size())),
          schedule_(cfg_.training),
          scaler_(cfg_.training),
          flops_(flops_per_iteration(cfg_)),
          tokens_(host_allocator(), MemCategory::Data, dims_.micro_batch * (dims_.seq + 1), DType::I32),
          log_(cfg_, par, alloc_, flops_, dims_.seq, dir, in.print_progress) {
        // On a GPU, bf16 runs feed the GEMMs bf16 operands (tensor cores); weights and stored activations
        // are bf16 values already, dropout-scaled gradients are rounded as a bf16 tensor would be.
        if (ctx_.device == Device::CUDA && model_.storage() == DType::BF16) ctx_.gemm_inputs = DType::BF16;
        if (ctx_.device == Device::CUDA) device::set_deterministic(cfg_.logging.deterministic);
        model_.init_weights(static_cast<uint64_t>(cfg_.training.seed));
        optimizer_ = std::make_unique<Optimizer>(model_.layout(), model_.params(), model_.grads(), cfg_.training,
                                                 model_.storage(), ctx_, alloc_, &par_, reducer_.shard());
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
        while (progress_.iteration < total) {
            train_step();
            const bool last = progress_.iteration == total;
            if (progress_.iteration % cfg_.logging.log_interval == 0 || last) log_.log_interval(progress_);
            if (samples_) samples_->after_iteration(progress_.iteration, progress_.consumed_samples * dims_.seq, last);
            if (validating && cfg_.data.eval_interval > 0 && progress_.iteration % cfg_.data.eval_interval == 0)
                evaluate(*in_.valid, false);
            if (should_save(last)) save();
            const Decision d = decide();
            if (d.signalled) return stop_now(RunStatus::Interrupted, "interrupted", "stop requested (signal)");
            if (stop_requested_)
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
        if (l.exit_interval > 0 && progress_.iteration % l.exit_interval == 0)
            return fmt::format("exit_interval {} reached at iteration {}", l.exit_interval, progress_.iteration);
        if (l.exit_duration_in_mins <= 0) return "";
        int32_t done = leader() && seconds_since(train_start_) / 60.0 > l.exit_duration_in_mins ? 1 : 0;
        par_.world().broadcast(&done, sizeof done, 0);
        return done ? fmt::format("exit_duration_in_mins {} reached at iteration {}", l.exit_duration_in_mins,
                                  progress_.iteration)
                    : "";
    }

private:
    bool leader() const { return par_.world_rank() == 0; }
    /// Memory the host reads and writes (tokens, checkpoint staging): the run's allocator on the CPU.
    Allocator& host_allocator() { return alloc_.device() == Device::CPU ? alloc_ : host_alloc_; }

    void publish(std::string_view topic, nlohmann::json fields) {
        if (dir_) dir_->publish(topic, std::move(fields));
    }
    /// A typed record of docs/protocol.md (ipc/schema.h) under its topic.
    template <typename Record>
    void publish(const Record& r) {
        publish(Record::kTopic, nlohmann::json(r));
    }
    template <typename Event>
    void publish_event(const Event& e) {
        publish(ipc::kEventTopic, ipc::event_json(e));
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
        nlohmann::json result = {
            {"ok", true}, {"action", control_action_name(action)}, {"iteration", progress_.iteration}};
        switch (action) {
            case ControlAction::Status:
                result.update({{"state", paused_ ? "paused" : "running"},
                               {"train_iters", cfg_.training.train_iters},
                               {"consumed_samples", progress_.consumed_samples},
                               {"skipped_iterations", progress_.skipped},
                               {"world_size", par_.world_size()}});
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
        return result;
    }

    void finish_request(const ControlRequest& r, const nlohmann::json& result) {
        in_.control->reply(r, result);
        if (r.action == ControlAction::Status) return;
        publish_event(ipc::ControlAppliedEvent{std::string(control_action_name(r.action)), r.id, progress_.iteration});
        if (in_.print_progress)
            spdlog::info("control: {} at iteration {}", control_action_name(r.action), progress_.iteration);
    }

    /// Ends the run early: logs the partial interval and checkpoints (into --save, else
    /// <run_dir>/checkpoints) so that it can be resumed.
    RunStatus stop_now(RunStatus status, const char* name, const char* reason) {
        if (log_.stats().iterations > 0) log_.log_interval(progress_);
        if (!checkpointed_ && progress_.iteration > 0) save(true);
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
            {"resumed_from_iteration", progress_.iteration},
        };
        dir_->write_run_json(run);
        ipc::RunStartRecord start;
        start.config = run["config"];
        start.derived = run["derived"];
        start.topology = run["topology"];
        start.hosts = host_list.get<std::vector<std::string>>();
        start.iteration = progress_.iteration;
        publish(start);
        if (in_.print_progress) {
            spdlog::info("model: {} layers, hidden {}, {} heads, seq {}, vocab {} (padded {}): {:.2f}M parameters",
                         m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, model_vocab_size(cfg_),
                         padded_vocab_size(cfg_), static_cast<double>(params) / 1e6);
            if (par_.world_size() > 1)
                spdlog::info(
                    "layout: {} ranks = TP {} x PP {} x DP {}{}{}{}", par_.world_size(), par_.tp_size(), par_.pp_size(),
                    par_.dp_size(), par_.sequence_parallel() ? ", sequence parallel" : "",
                    model_.num_chunks() > 1 ? fmt::format(", {} virtual stages per rank", model_.num_chunks()) : "",
                    distributed_ ? ", distributed optimizer" : "");
            spdlog::info(
                "batch: {} x {} micro-batches x {} data-parallel = {} samples/iteration; {} | {} thread(s), {}",
                cfg_.training.micro_batch_size, micro_batches_, par_.dp_size(), cfg_.training.global_batch_size,
                in_.data_description, ops::num_threads(),
                cfg_.training.bf16   ? "bf16 (emulated)"
                : cfg_.training.fp16 ? "fp16 (emulated)"
                                     : "fp32");
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
            log_.stats().data_s += seconds_since(t0);
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
        IntervalStats& interval = log_.stats();
        const auto comm_before = par_.stats();
        const int64_t it = progress_.iteration + 1;
        if (!grads_zeroed_) model_.zero_grads();
        // The global batch of this iteration (rampup_batch_size / step_batch_size_schedule change the
        // number of micro-batches, as Megatron-LM's num-microbatches calculator does).
        const int64_t batch = global_batch_size_at(cfg_, progress_.consumed_samples);
        const int64_t micro_batches = num_micro_batches(cfg_, par_.world_size(), progress_.consumed_samples);
        const double loss_scale = scaler_.scale();
        const float grad_scale = static_cast<float>(loss_scale / static_cast<double>(micro_batches));
        const PipelineResult pr = runner_.run(micro_batches, true, [&](int64_t m, bool needs_tokens) {
            return micro_batch(*in_.train, progress_.consumed_samples, m, needs_tokens, it, grad_scale);
        });
        if (model_.storage() != DType::F32 && !cfg_.training.accumulate_allreduce_grads_in_fp32)
            ops::round_to(ctx_, model_.grads(), model_.storage());
        const auto t_reduce = Clock::now();
        reducer_.reduce();
        const double loss = mean_loss(pr.loss_sum, micro_batches);
        interval.reduce_s += seconds_since(t_reduce);
        const auto t_opt = Clock::now();
        // Megatron-LM's scheduler counts the samples of successful steps only: a skipped step leaves
        // the learning rate (and weight decay) where it was.
        const double lr = schedule_.lr(static_cast<double>(progress_.scheduled_samples));
        optimizer_->set_weight_decay(schedule_.weight_decay(static_cast<double>(progress_.scheduled_samples)));
        const StepResult step = optimizer_->step(lr, loss_scale, /*zero_grads=*/true);
        grads_zeroed_ = step.grads_zeroed;
        if (!step.skipped) progress_.scheduled_samples += batch;
        scaler_.update(step.skipped);
        interval.optimizer_s += seconds_since(t_opt);
        interval.forward_s += pr.forward_seconds;
        interval.backward_s += pr.backward_seconds;
        progress_.iteration = it;
        progress_.consumed_samples += batch;
        interval.samples += batch;
        progress_.last_batch = batch;
        checkpointed_ = false;

        if (step.skipped) {
            ++progress_.skipped;
            ++interval.skipped;
            publish_event(ipc::SkippedIterationEvent{it, loss_scale, "gradients are not finite"});
        }
        if (!std::isfinite(loss)) {
            ++nonfinite_in_a_row_;
            publish_event(ipc::NanLossEvent{it});
            MWB_CHECK(nonfinite_in_a_row_ < 10 || scaler_.dynamic(),
                      "training diverged: the loss was not finite for {} iterations in a row (last at iteration {})",
                      nonfinite_in_a_row_, it);
        } else {
            nonfinite_in_a_row_ = 0;
            interval.loss += loss;
            ++interval.loss_count;
        }
        progress_.last_lr = lr;
        progress_.last_grad_norm = step.grad_norm;
        progress_.last_loss_scale = loss_scale;
        log_.tensorboard_step(loss, progress_);
        ++interval.iterations;
        interval.comm.add_delta(comm_before, par_.stats());
        interval.time += seconds_since(t0);
    }

    /// eval_iters global batches of `source`, forward only. Validation reads fresh samples each time
    /// (Megatron-LM's consumed_valid_samples); the test split is read from its start, once.
    void evaluate(const data::SampleSource& source, bool test) {
        const auto t0 = Clock::now();
        const int64_t gbs = cfg_.training.global_batch_size;
        const int64_t first = test ? 0 : progress_.consumed_valid_samples;
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
        if (!test) progress_.consumed_valid_samples += samples;
        if (TensorBoardWriter* tb = log_.tensorboard()) {  // Megatron-LM writes the test split under the same tags
            tensorboard_scalar(*tb, "lm loss validation", loss, progress_);
            if (cfg_.logging.log_validation_ppl_to_tensorboard)
                tensorboard_scalar(*tb, "lm loss validation ppl", std::exp(std::min(20.0, loss)), progress_);
            tb->flush();
        }
        ipc::EvalRecord eval;
        eval.iteration = progress_.iteration;
        eval.consumed_tokens = progress_.consumed_samples * dims_.seq;
        eval.consumed_samples = progress_.consumed_samples;
        eval.split = test ? "test" : "valid";
        eval.consumed_valid_samples = progress_.consumed_valid_samples;
        eval.lm_loss = loss;
        eval.ppl = std::exp(std::min(loss, 700.0));
        eval.samples = samples;
        eval.time_s = seconds_since(t0);
        publish(eval);
        if (in_.print_progress && leader())
            spdlog::info("{} at iter {}: loss {:.4f} | ppl {:.3f} ({} samples, {:.1f} s)", test ? "test" : "validation",
                         progress_.iteration, loss, std::exp(std::min(loss, 700.0)), samples, seconds_since(t0));
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
        return last || (cfg_.logging.save_interval > 0 && progress_.iteration % cfg_.logging.save_interval == 0);
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
        s.iteration = progress_.iteration;
        s.consumed_samples = progress_.consumed_samples;
        s.optimizer_steps = optimizer_->steps();
        s.skipped_iterations = progress_.skipped;
        s.scheduler_samples = progress_.scheduled_samples;
        s.consumed_valid_samples = progress_.consumed_valid_samples;
        s.loss_scaler = scaler_.state();
        s.config = to_json(cfg_);
        FullState full = full_state(true);
        const fs::path where =
            save_checkpoint(save_dir(requested), s, checkpoint_tensors(full), par_, par_.coord().dp == 0);
        checkpointed_ = true;
        publish_event(ipc::CheckpointSavedEvent{progress_.iteration, where.string(), seconds_since(t0)});
        if (in_.print_progress && leader())
            spdlog::info("saved checkpoint {} ({:.2f} s)", where.string(), seconds_since(t0));
        return where;
    }

    /// Resumes from --load; a directory without a checkpoint yet starts the run fresh (Megatron-LM's
    /// behaviour: one job script serves the first submission and every requeue).
    void load(const fs::path& from) {
        const std::optional<fs::path> found = find_checkpoint(from);
        if (!found) {
            publish_event(ipc::CheckpointNotFoundEvent{from.string()});
            if (in_.print_progress && leader())
                spdlog::info("no checkpoint in {} yet: starting from iteration 0", from.string());
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
        if (l.finetune || l.no_load_optim ||
            !has_optimizer) {  // Megatron-LM: optimizer, loss scale and scheduler start over
            for (const TensorView v : {optimizer_->exp_avg(), optimizer_->exp_avg_sq()}) ops::fill(ctx_, v, 0.0f);
            optimizer_->set_steps(0);
        }
        if (!l.finetune) {
            progress_.iteration = s.iteration;
            progress_.consumed_samples = s.consumed_samples;
            progress_.skipped = s.skipped_iterations;
        }
        // The scheduler's position and the validation samples read are in the checkpoint (as Megatron-LM
        // saves its opt_param_scheduler and consumed_valid_samples), so a resumed run repeats the
        // uninterrupted one exactly, batch ramp and skipped steps included. A checkpoint from before
        // they were saved: the scheduler's count follows from the successful steps (exact for a constant
        // batch), validation from eval_iters batches per evaluation (Megatron-LM's own fallback).
        const int64_t gbs = cfg_.training.global_batch_size;
        const bool constant_batch =
            cfg_.training.rampup_batch_size.empty() && cfg_.training.step_batch_size_schedule.empty();
        if (s.scheduler_samples >= 0)
            progress_.scheduled_samples = s.scheduler_samples;
        else
            progress_.scheduled_samples =
                constant_batch ? optimizer_->steps() * gbs
                               : progress_.consumed_samples -
                                     progress_.skipped * global_batch_size_at(cfg_, progress_.consumed_samples);
        if (l.finetune || l.no_load_optim || !has_optimizer) progress_.scheduled_samples = 0;
        if (l.finetune)
            progress_.consumed_valid_samples = 0;
        else if (s.consumed_valid_samples >= 0)
            progress_.consumed_valid_samples = s.consumed_valid_samples;
        else if (cfg_.data.eval_interval > 0)
            progress_.consumed_valid_samples =
                progress_.iteration / cfg_.data.eval_interval * cfg_.data.eval_iters * gbs;
        publish_event(ipc::CheckpointLoadedEvent{progress_.iteration, dir.string()});
        if (in_.print_progress && leader())
            spdlog::info("resumed from {} at iteration {}", dir.string(), progress_.iteration);
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
        publish(ipc::RunEndRecord{
            status, reason,
            ipc::RunTotals{progress_.iteration, progress_.consumed_samples, progress_.skipped, memory_record(mem)}});
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
    std::unique_ptr<generate::TrainingSamples> samples_;  // rank 0 with sample_interval
    LossScaler scaler_;
    FlopCounts flops_;
    Buffer tokens_;  // (B, S+1) of the micro-batch being read
    fs::path run_dir_path_;

    IntervalLog log_;

    Progress progress_;
    Clock::time_point train_start_ = Clock::now();
    int nonfinite_in_a_row_ = 0;
    bool grads_zeroed_ = false;  // the last update zeroed the gradients as it read them
    bool checkpointed_ = false, paused_ = false, stop_requested_ = false;
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
            run_dir->publish(ipc::RunEndRecord::kTopic, ipc::RunEndRecord{"failed", e.what(), std::nullopt});
        throw;
    }
}

}  // namespace mwb
