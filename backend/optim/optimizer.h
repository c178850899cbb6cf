#pragma once
// AdamW over the parameter arena with Megatron-LM's mixed-precision recipe: fp32 master weights
// (16-bit runs) or the weights themselves (fp32 runs), Adam moments in fp32, gradients unscaled,
// global-norm clipped, and the step skipped when any gradient is Inf/NaN.
#include "config/config.h"
#include "core/memory.h"
#include "model/param_layout.h"
#include "mwb/kernels/ops.h"

#include <nlohmann/json.hpp>

namespace mwb {

struct StepResult {
    double grad_norm = 0;    ///< global L2 norm of the unscaled gradients (before clipping)
    bool skipped = false;    ///< gradients were not finite: no update
    double clip_coeff = 1;   ///< factor the gradients were multiplied by (1 = not clipped)
};

class Optimizer {
public:
    Optimizer(const ParamLayout& layout, TensorView params, TensorView grads, const TrainingConfig& t, DType storage,
              OpContext& ctx, Allocator& alloc);

    /// One update with learning rate `lr`; gradients hold loss_scale × the true gradients.
    StepResult step(double lr, double loss_scale);

    /// Successful steps so far (Adam's bias-correction count).
    int64_t steps() const { return steps_; }
    void set_steps(int64_t steps) { steps_ = steps; }
    /// The fp32 weights the optimizer updates (the master copy in 16-bit runs, else the model weights).
    TensorView master() const { return master_.empty() ? params_ : master_.view(); }
    TensorView exp_avg() const { return exp_avg_.view(); }
    TensorView exp_avg_sq() const { return exp_avg_sq_.view(); }
    /// After master() was overwritten (checkpoint load): refresh the model weights from it.
    void sync_params_from_master();

private:
    const ParamLayout& layout_;
    TensorView params_, grads_;
    DType storage_;
    float beta1_, beta2_, eps_, weight_decay_;
    double clip_grad_;
    OpContext& ctx_;
    Buffer master_, exp_avg_, exp_avg_sq_;
    int64_t steps_ = 0;
};

}  // namespace mwb
