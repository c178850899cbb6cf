#include "backend/train/train_step.h"

#include "backend/config/validate.h"
#include "mwb/kernels/error.h"
#include "backend/telemetry/run_dir.h"
#include "backend/train/records.h"
#include "backend/train/clock.h"

#include <cmath>

namespace mwb {

TrainStep::TrainStep(RunObjects& objects, const data::SampleSource& train, IntervalLog& log, RunDir* dir)
    : o_(objects), train_(train), log_(log), dir_(dir), results_(objects.alloc, MemCategory::Workspace, 2, DType::F64),
      graph_(objects.ctx, objects.alloc, objects.cuda_graph, objects.cfg.runtime.cuda_graph_warmup_steps,
             max_num_micro_batches(objects.cfg, objects.par.world_size()),
             2 * objects.dims.seq * objects.dims.micro_batch) {
    graph_.count_replays_of(o_.par.data_groups());
    // Zero bits are 0.0 as doubles too: stages without the head keep a loss sum of 0.
    ops::fill(o_.ctx, make_view(results_.data(), DType::F32, {4}, results_.view().device), 0.0f);
}

/// The micro-batch m of this rank: global micro-batch m·DP + dp (as Megatron-LM's sampler), its
/// samples [base + g·B, base + (g+1)·B) of `source`.
MicroBatch TrainStep::micro_batch(const data::SampleSource& source, int64_t base, int64_t m, bool needs_tokens,
                                  int64_t it, float grad_scale) {
    const int64_t g = m * o_.par.dp_size() + o_.par.coord().dp;
    const bool graphed = it > 0 && graph_.graphed();  // the tokens are in the graph's buffer already
    if (needs_tokens && !graphed) {
        const auto t0 = Clock::now();
        const int64_t per = o_.dims.seq + 1;
        for (int64_t b = 0; b < o_.dims.micro_batch; ++b)
            source.read(base + g * o_.dims.micro_batch + b,
                        std::span<int32_t>(o_.tokens.i32() + b * per, static_cast<std::size_t>(per)));
        log_.stats().data_s += seconds_since(t0);
    }
    MicroBatch mb;
    mb.tokens = needs_tokens && !graphed ? o_.tokens.i32() : nullptr;
    if (needs_tokens && graphed) mb.inputs = graph_.inputs(m);
    mb.seed = static_cast<uint64_t>(o_.cfg.training.seed);
    mb.stream_base = micro_batch_stream(it, g);
    mb.grad_scale = grad_scale;
    if (it > 0) {
        // A training step: the loss gradient's scale and the dropout streams come from the step's
        // block (Optimizer::begin_step wrote this iteration and scale there), read where the ops run.
        mb.step = o_.optimizer->step_block();
        mb.global_micro_batch = g;
    }
    return mb;
}

void TrainStep::stage_graph_inputs(int64_t base, int64_t micro_batches) {
    const auto t0 = Clock::now();
    const int64_t per = o_.dims.seq + 1, n = o_.dims.seq * o_.dims.micro_batch;
    int32_t* host = graph_.host_inputs();
    for (int64_t m = 0; m < micro_batches; ++m) {
        const int64_t g = m * o_.par.dp_size() + o_.par.coord().dp;
        for (int64_t b = 0; b < o_.dims.micro_batch; ++b)
            train_.read(base + g * o_.dims.micro_batch + b,
                        std::span<int32_t>(o_.tokens.i32() + b * per, static_cast<std::size_t>(per)));
        o_.model.lay_out_inputs(o_.tokens.i32(), host + 2 * m * n, host + 2 * m * n + n);
    }
    graph_.upload_inputs();
    log_.stats().data_s += seconds_since(t0);
}

/// Σ of the last stage's `micro_batches` micro-batch losses -> the iteration's mean loss on every rank.
double TrainStep::mean_loss(double loss_sum, int64_t micro_batches) {
    o_.par.host_pp().all_reduce_sum(&loss_sum, 1);
    o_.par.host_dp().all_reduce_sum(&loss_sum, 1);
    return loss_sum / static_cast<double>(micro_batches * o_.par.dp_size());
}

double TrainStep::forward_loss(const data::SampleSource& source, int64_t base) {
    o_.runner.run(
        o_.micro_batches, false,
        [&](int64_t m, bool needs_tokens) { return micro_batch(source, base, m, needs_tokens, 0, 0.0f); }, loss_sum());
    return mean_loss(ops::read_f64(o_.ctx, loss_sum())[0], o_.micro_batches);
}

void TrainStep::run(Progress& p) {
    const auto t0 = Clock::now();
    IntervalStats& interval = log_.stats();
    const auto comm_before = o_.par.stats();
    const int64_t it = p.iteration + 1;
    if (!grads_zeroed_) o_.model.zero_grads();
    // The global batch of this iteration (rampup_batch_size / step_batch_size_schedule change the
    // number of micro-batches, as Megatron-LM's num-microbatches calculator does).
    const int64_t batch = global_batch_size_at(o_.cfg, p.consumed_samples);
    const int64_t micro_batches = num_micro_batches(o_.cfg, o_.par.world_size(), p.consumed_samples);
    const double loss_scale = o_.scaler.scale();
    const float grad_scale = static_cast<float>(loss_scale / static_cast<double>(micro_batches));
    // Megatron-LM's scheduler counts the samples of successful steps only: a skipped step leaves
    // the learning rate (and weight decay) where it was. The step's scalars go to the device before
    // its first op: everything up to the end-of-step read takes them from there.
    const double lr = o_.schedule.lr(static_cast<double>(p.scheduled_samples));
    o_.optimizer->set_weight_decay(o_.schedule.weight_decay(static_cast<double>(p.scheduled_samples)));
    o_.optimizer->begin_step(lr, loss_scale, it, grad_scale);
    graph_.prepare(micro_batches);  // eager, captured or replayed: the graph of this micro-batch count
    if (graph_.graphed()) stage_graph_inputs(p.consumed_samples, micro_batches);
    // Everything between the block's upload and the end-of-step read: queued eagerly, or captured
    // once into the step's CUDA graph and replayed from then on (StepGraph; then not called).
    PipelineResult pr;
    auto t_opt = Clock::now();
    graph_.run([&] {
        pr = o_.runner.run(
            micro_batches, true,
            [&](int64_t m, bool needs_tokens) {
                return micro_batch(train_, p.consumed_samples, m, needs_tokens, it, grad_scale);
            },
            loss_sum());
        // fp16 without accumulate_allreduce_grads_in_fp32: the arena is f16 itself on both devices (each
        // op rounded its sums into it; gradient_dtype, docs/numerics.md "Gradients").
        const auto t_reduce = Clock::now();
        o_.reducer.reduce();
        interval.reduce_s += seconds_since(t_reduce);
        t_opt = Clock::now();
        o_.optimizer->update(/*zero_grads=*/true, sumsq());
    });
    // The step's one host read: the global Σ x² and the loss sum together. With NCCL groups the host
    // first waits for the step polling their asynchronous errors and the timeout (a dead or hung peer
    // fails this rank by name here: nothing inside the step waits on the host any more).
    o_.par.await_device_step(o_.ctx.stream);
    const std::vector<double> results = ops::read_f64(o_.ctx, results_.view());
    const StepResult step = o_.optimizer->finish(results[0], loss_scale);
    grads_zeroed_ = step.grads_zeroed;
    if (!step.skipped) p.scheduled_samples += batch;
    o_.scaler.update(step.skipped);
    interval.optimizer_s += seconds_since(t_opt);
    const double loss = mean_loss(results[1], micro_batches);
    interval.forward_s += pr.forward_seconds;
    interval.backward_s += pr.backward_seconds;
    p.iteration = it;
    p.consumed_samples += batch;
    interval.samples += batch;
    p.last_batch = batch;

    if (step.skipped) {
        ++p.skipped;
        ++interval.skipped;
        publish_event(dir_, ipc::SkippedIterationEvent{it, loss_scale, "gradients are not finite"});
    }
    if (!std::isfinite(loss)) {
        ++nonfinite_in_a_row_;
        publish_event(dir_, ipc::NanLossEvent{it});
        MWB_CHECK(nonfinite_in_a_row_ < 10 || o_.scaler.dynamic(),
                  "training diverged: the loss was not finite for {} iterations in a row (last at iteration {})",
                  nonfinite_in_a_row_, it);
    } else {
        nonfinite_in_a_row_ = 0;
        interval.loss += loss;
        ++interval.loss_count;
    }
    p.last_lr = lr;
    p.last_grad_norm = step.grad_norm;
    p.last_loss_scale = loss_scale;
    log_.tensorboard_step(loss, p);
    ++interval.iterations;
    interval.comm.add_delta(comm_before, o_.par.stats());
    interval.time += seconds_since(t0);
}

}  // namespace mwb
