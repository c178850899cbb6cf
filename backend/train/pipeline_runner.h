#pragma once
// Runs one iteration's micro-batches through this rank's model chunks in pipeline-schedule order,
// exchanging activations and gradients with the neighbouring stages at one point per schedule
// step: the previous step's outputs go out together with this step's inputs (one NCCL group; the
// receives block right before the passes that need them), and sends complete in the background.
#include "backend/model/gpt_model.h"
#include "backend/parallel/parallel_context.h"
#include "backend/parallel/schedule.h"

#include <functional>

namespace mwb {

struct PipelineResult {
    double forward_seconds = 0;   ///< in forward passes (including the head's backward on the last stage)
    double backward_seconds = 0;  ///< in backward passes
};

class PipelineRunner {
public:
    PipelineRunner(GptModel& model, ParallelContext& par) : model_(model), par_(par) {}

    /// micro(m): the MicroBatch of this rank's micro-batch m, with its tokens when `needs_tokens`
    /// (ranks holding the embedding or the head). Training runs forward and backward (gradients
    /// accumulate), evaluation forward only. On the last pipeline stage `loss_sum` (F64 (1), on the
    /// device) becomes the Σ of the micro-batch losses, added on the device in schedule order (the
    /// caller reads it once, at the end of the step); other stages leave it untouched.
    PipelineResult run(int64_t micro_batches, bool training,
                       const std::function<MicroBatch(int64_t m, bool needs_tokens)>& micro,
                       const TensorView& loss_sum);

private:
    GptModel& model_;
    ParallelContext& par_;
};

}  // namespace mwb
