#pragma once
// One training iteration of a rank: the iteration's global batch through the pipeline schedule with
// gradient accumulation, the gradient reduction, the optimizer step with the scheduled learning rate
// and the loss scale; and a forward-only pass of one global batch (evaluation's).
#include "backend/data/sample_source.h"
#include "backend/train/interval_stats.h"
#include "backend/train/progress.h"
#include "backend/train/run_objects.h"
#include "backend/train/step_graph.h"

namespace mwb {

class RunDir;

class TrainStep {
public:
    /// `dir`: rank 0's run directory (its "event" records), null on the other ranks.
    TrainStep(RunObjects& objects, const data::SampleSource& train, IntervalLog& log, RunDir* dir);

    /// Iteration p.iteration + 1 on the samples from p.consumed_samples: advances `p`, adds to the
    /// log's interval statistics. Throws when the loss stays not finite without a dynamic loss scale.
    void run(Progress& p);

    /// The mean loss of the global batch [base, base + global_batch_size) of `source`, forward only.
    double forward_loss(const data::SampleSource& source, int64_t base);

    /// The step's CUDA graph (runtime.enable_cuda_graph; eager on the CPU or without it).
    const StepGraph& graph() const { return graph_; }

private:
    MicroBatch micro_batch(const data::SampleSource& source, int64_t base, int64_t m, bool needs_tokens, int64_t it,
                           float grad_scale);
    /// A graphed step's inputs: every micro-batch's tokens read, laid out and uploaded into the graph's
    /// fixed buffer before the launch.
    void stage_graph_inputs(int64_t base, int64_t micro_batches);
    double mean_loss(double loss_sum, int64_t micro_batches);
    TensorView sumsq() const { return slice_1d(results_.view(), 0, 1); }
    TensorView loss_sum() const { return slice_1d(results_.view(), 1, 1); }

    RunObjects& o_;
    const data::SampleSource& train_;
    IntervalLog& log_;
    RunDir* dir_;
    // F64 (2) on the device: the step's results, read by the host in one read at its end — the
    // gradients' global Σ x² (the optimizer's) and the Σ of the micro-batch losses (the pipeline's,
    // on the last stage; 0 elsewhere).
    Buffer results_;
    StepGraph graph_;
    int nonfinite_in_a_row_ = 0;
    bool grads_zeroed_ = false;  // the last update zeroed the gradients as it read them
};

}  // namespace mwb
