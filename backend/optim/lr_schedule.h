#pragma once
// Megatron-LM's OptimizerParamScheduler: the learning rate and weight decay as functions of the
// samples consumed by successful optimizer steps (its num_steps, which advances by the global batch
// of each step that was not skipped). Iteration-based settings are converted to samples by the global
// batch size, as Megatron-LM does. Warm-up is linear from lr_warmup_init to lr; then constant, linear,
// cosine, inverse-square-root or WSD decay to min_lr at the end of the decay, then min_lr. Weight
// decay stays at weight_decay or moves linearly/cosine-like from start_ to end_weight_decay.
#include "backend/config/config.h"

#include <cstdint>

namespace mwb {

class LrSchedule {
public:
    /// `t` resolved (lr_decay_iters or lr_decay_samples filled in).
    explicit LrSchedule(const TrainingConfig& t);
    /// Learning rate after successful steps that consumed `samples` samples; an iteration trains with
    /// the rate of the samples before it.
    double lr(double samples) const;
    /// Weight decay after `samples` samples of successful steps.
    double weight_decay(double samples) const;

    double warmup_samples() const { return warmup_; }
    double decay_samples() const { return decay_; }

private:
    enum class Style { Constant, Linear, Cosine, InverseSquareRoot, Wsd };
    enum class Anneal { Exponential, Linear, Cosine, MinusSqrt };
    enum class WdStyle { Constant, Linear, Cosine };
    double init_lr_, max_lr_, min_lr_;
    double warmup_, decay_, wsd_decay_;
    Style style_;
    Anneal anneal_;
    double start_wd_, end_wd_, wd_incr_;
    WdStyle wd_style_;
};

}  // namespace mwb
