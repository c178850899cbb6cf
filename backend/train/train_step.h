#pragma once
// One training iteration of a rank: the iteration's global batch through the pipeline schedule with
// gradient accumulation, the gradient reduction, the optimizer step with the scheduled learning rate
// and the loss scale; and a forward-only pass of one global batch (evaluation's).
#include "backend/data/sample_source.h"
#include "backend/train/interval_stats.h"
#include "backend/train/progress.h"
#include "backend/train/run_objects.h"

namespace mwb {

class RunDir;

class TrainStep {
public:
    /// `dir`: rank 0's run directory (its "event" records), null on the other ranks.
    TrainStep(RunObjects& objects, const data::SampleSource& train, IntervalLog& log, RunDir* dir)
        : o_(objects), train_(train), log_(log), dir_(dir) {}

    /// Iteration p.iteration + 1 on the samples from p.consumed_samples: advances `p`, adds to the
    /// log's interval statistics. Throws when the loss stays not finite without a dynamic loss scale.
    void run(Progress& p);

    /// The mean loss of the global batch [base, base + global_batch_size) of `source`, forward only.
    double forward_loss(const data::SampleSource& source, int64_t base);

private:
    MicroBatch micro_batch(const data::SampleSource& source, int64_t base, int64_t m, bool needs_tokens, int64_t it,
                           float grad_scale);
    double mean_loss(double loss_sum, int64_t micro_batches);

    RunObjects& o_;
    const data::SampleSource& train_;
    IntervalLog& log_;
    RunDir* dir_;
    int nonfinite_in_a_row_ = 0;
    bool grads_zeroed_ = false;  // the last update zeroed the gradients as it read them
};

}  // namespace mwb
