#include "optim/lr_schedule.h"

#include <cmath>
#include <numbers>

namespace mwb {

LrSchedule::LrSchedule(const TrainingConfig& t)
    : max_lr_(t.lr), min_lr_(t.min_lr), warmup_(t.lr_warmup_iters), decay_(t.lr_decay_iters),
      style_(t.lr_decay_style == "constant" ? Style::Constant
             : t.lr_decay_style == "cosine" ? Style::Cosine
                                            : Style::Linear) {}

double LrSchedule::lr(int64_t steps) const {
    if (warmup_ > 0 && steps <= warmup_) return max_lr_ * static_cast<double>(steps) / static_cast<double>(warmup_);
    if (style_ == Style::Constant) return max_lr_;
    if (steps > decay_) return min_lr_;
    const double ratio = static_cast<double>(steps - warmup_) / static_cast<double>(decay_ - warmup_);
    const double coeff = style_ == Style::Linear ? 1.0 - ratio : 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
    return min_lr_ + coeff * (max_lr_ - min_lr_);
}

}  // namespace mwb
