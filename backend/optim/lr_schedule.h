#pragma once
// Megatron-LM's learning-rate schedule (OptimizerParamScheduler, counted in iterations): linear
// warm-up from 0 to lr over lr_warmup_iters, then constant, linear or cosine decay to min_lr at
// lr_decay_iters, then min_lr.
#include "config/config.h"

#include <cstdint>

namespace mwb {

class LrSchedule {
public:
    explicit LrSchedule(const TrainingConfig& t);
    /// Learning rate after `steps` completed optimizer steps; iteration i (1-based) trains with lr(i - 1),
    /// as Megatron-LM does.
    double lr(int64_t steps) const;

private:
    double max_lr_, min_lr_;
    int64_t warmup_, decay_;
    enum class Style { Constant, Linear, Cosine } style_;
};

}  // namespace mwb
