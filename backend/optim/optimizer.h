#pragma once
// AdamW over the parameter arena with Megatron-LM's mixed-precision recipe: fp32 master weights
// (16-bit runs) or the weights themselves (fp32 runs), Adam moments in fp32, gradients unscaled,
// global-norm clipped, and the step skipped when any gradient is Inf/NaN. With the distributed
// optimizer a rank keeps master weights and moments for its shard of the arena only, updates that
// shard, and the data-parallel group all-gathers the new weights. Norm, clip and skip are decided on
// the device (docs/gpu.md, "Host synchronisation inside a step"); step() reads one value back.
#include "backend/config/config.h"
#include "backend/core/host_staging.h"
#include "backend/core/memory.h"
#include "backend/model/param_layout.h"
#include "backend/parallel/gradient_reducer.h"
#include "mwb/kernels/ops.h"

#include <vector>

namespace mwb {

class ParallelContext;

struct StepResult {
    double grad_norm = 0;    ///< global L2 norm of the unscaled gradients (before clipping)
    bool skipped = false;    ///< gradients were not finite: no update
    double clip_coeff = 1;   ///< factor the gradients were multiplied by (1 = not clipped)
    bool grads_zeroed = false;  ///< the update left every gradient of the arena at 0
};

class Optimizer {
public:
    /// Single process: the whole arena, no communication.
    Optimizer(const ParamLayout& layout, TensorView params, TensorView grads, const TrainingConfig& t, DType storage,
              OpContext& ctx, Allocator& alloc);
    /// One rank of a parallel run: `shard` is the part of the arena it updates (the whole arena
    /// unless the optimizer is distributed).
    Optimizer(const ParamLayout& layout, TensorView params, TensorView grads, const TrainingConfig& t, DType storage,
              OpContext& ctx, Allocator& alloc, ParallelContext* par, ArenaShard shard);

    /// One update with learning rate `lr`; gradients hold loss_scale × the true gradients (reduced).
    /// Reads the host once (OpContext::host_reads + 1): the global Σ x², at the end.
    /// With `zero_grads` the update also zeroes the gradients it reads, where it reads them all (not
    /// distributed, not skipped; StepResult::grads_zeroed says so): the caller's next zeroing pass
    /// over the arena is then not needed.
    StepResult step(double lr, double loss_scale, bool zero_grads = false);
    /// step() in three parts, for a caller that writes the step's scalars before its forward passes
    /// and reads the Σ x² together with other step results in one read (TrainStep): begin_step()
    /// writes the step's parameter block (step_params: learning rate `lr` with the current weight
    /// decay and step count, `loss_scale`, and for the model `iteration` and the loss gradient's
    /// `grad_scale`): in place on the CPU, one upload on the op stream from pinned memory on a GPU (no
    /// host wait), so everything after it up to finish() reads its scalars from device memory and can
    /// be queued once (a CUDA graph). update() does everything on the device with the block and leaves
    /// the global Σ x² in `sumsq` (F64 (1), on the device); finish() takes the value read from there.
    void begin_step(double lr, double loss_scale, int64_t iteration = 0, float grad_scale = 0);
    void update(bool zero_grads, const TensorView& sumsq);
    StepResult finish(double sumsq, double loss_scale);
    /// The step's parameter block (F64 (step_params::Count); device memory on a GPU).
    TensorView step_block() const { return step_.view(); }

    /// The weight decay of the next steps (Megatron-LM's weight-decay increments move it over training).
    void set_weight_decay(double wd) { weight_decay_ = static_cast<float>(wd); }
    /// Successful steps so far (Adam's bias-correction count).
    int64_t steps() const { return steps_; }
    void set_steps(int64_t steps) { steps_ = steps; }
    const ArenaShard& shard() const { return shard_; }
    bool distributed() const { return shard_.size() != params_.numel(); }
    /// The fp32 weights the optimizer updates for its shard: the master copy in 16-bit runs, else the
    /// model weights (views of shard().size() elements, shard-relative).
    TensorView master() const;
    TensorView exp_avg() const { return exp_avg_.view(); }
    TensorView exp_avg_sq() const { return exp_avg_sq_.view(); }
    /// After master() was overwritten (checkpoint load): refresh the model weights from it.
    void sync_params_from_master();

private:
    /// Calls f(param index, first, count): the part of parameter i inside the shard, in arena elements.
    template <typename F>
    void for_each_in_shard(F&& f) const;
    bool counted_in_norm(const ParamInfo& p) const;
    void all_gather_params();

    const ParamLayout& layout_;
    TensorView params_, grads_;
    DType storage_;
    float beta1_, beta2_, eps_, weight_decay_;
    double clip_grad_;
    OpContext& ctx_;
    ParallelContext* par_ = nullptr;
    ArenaShard shard_;
    Buffer master_, exp_avg_, exp_avg_sq_;
    Buffer sumsq_;  // F64 (1): the global Σ x² of the scaled gradients
    Buffer scale_;  // F32 (2): gradient_scale's multiplier and found_inf
    Buffer step_;   // F64 (step_params::Count): the step's scalars, which the kernels read
    std::unique_ptr<HostStaging> staging_;  // on a GPU: the block's pinned upload buffers
    std::vector<IndexRange> norm_ranges_;  // the gradients of the shard counted in the norm, in arena order
    int64_t steps_ = 0;
    bool zeroing_ = false;  // the last update() zeroes the gradients (if the device does not skip it)
};

}  // namespace mwb
