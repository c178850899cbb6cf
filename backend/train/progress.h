#pragma once
// Where a run stands: the counters a checkpoint saves and resumes, and what the last training step
// reported. Every part of the loop reads it; the step, evaluation and a checkpoint load advance it.
#include <cstdint>

namespace mwb {

struct Progress {
    int64_t iteration = 0;
    int64_t consumed_samples = 0;
    int64_t skipped = 0;                 ///< iterations whose step was skipped (gradients not finite)
    int64_t scheduled_samples = 0;       ///< Megatron's scheduler num_steps: samples of successful steps
    int64_t consumed_valid_samples = 0;  ///< validation samples read so far
    // The last training step's.
    int64_t last_batch = 0;
    double last_lr = 0, last_grad_norm = 0, last_loss_scale = 1;
};

}  // namespace mwb
