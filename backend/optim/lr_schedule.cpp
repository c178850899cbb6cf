#include "backend/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mwb {

LrSchedule::LrSchedule(const TrainingConfig& t)
    : init_lr_(t.lr_warmup_init), max_lr_(t.lr), min_lr_(t.min_lr) {
    const bool by_samples = t.train_samples > 0;
    const auto gbs = static_cast<double>(t.global_batch_size);
    // megatron/training/training.py get_optimizer_param_scheduler
    decay_ = by_samples ? static_cast<double>(t.lr_decay_samples) : static_cast<double>(t.lr_decay_iters) * gbs;
    wsd_decay_ = by_samples ? static_cast<double>(t.lr_wsd_decay_samples) : static_cast<double>(t.lr_wsd_decay_iters) * gbs;
    warmup_ = t.lr_warmup_fraction > 0 ? t.lr_warmup_fraction * decay_
              : by_samples            ? static_cast<double>(t.lr_warmup_samples)
                                      : static_cast<double>(t.lr_warmup_iters) * gbs;
    wd_incr_ = by_samples ? static_cast<double>(t.train_samples) : static_cast<double>(t.train_iters) * gbs;
    const std::string& s = t.lr_decay_style;
    style_ = s == "constant"              ? Style::Constant
             : s == "cosine"              ? Style::Cosine
             : s == "inverse-square-root" ? Style::InverseSquareRoot
             : s == "WSD"                 ? Style::Wsd
                                          : Style::Linear;
    const std::string& a = t.lr_wsd_decay_style;
    anneal_ = a == "linear" ? Anneal::Linear : a == "cosine" ? Anneal::Cosine : a == "minus_sqrt" ? Anneal::MinusSqrt
                                                                                                   : Anneal::Exponential;
    wd_style_ = t.weight_decay_incr_style == "linear"   ? WdStyle::Linear
                : t.weight_decay_incr_style == "cosine" ? WdStyle::Cosine
                                                        : WdStyle::Constant;
    start_wd_ = wd_style_ == WdStyle::Constant ? t.weight_decay : t.start_weight_decay;
    end_wd_ = wd_style_ == WdStyle::Constant ? t.weight_decay : t.end_weight_decay;
}

double LrSchedule::lr(double n) const {
    if (warmup_ > 0 && n <= warmup_) return init_lr_ + (max_lr_ - init_lr_) * n / warmup_;
    if (style_ == Style::Constant) return max_lr_;
    if (n > decay_) return min_lr_;
    if (style_ == Style::InverseSquareRoot) {
        const double w = std::max(warmup_, 1.0), s = std::max(n, 1.0);
        return std::max(min_lr_, max_lr_ * std::sqrt(w) / std::sqrt(s));
    }
    const double ratio = (n - warmup_) / (decay_ - warmup_);
    double coeff = 1;
    switch (style_) {
    case Style::Linear: coeff = 1.0 - ratio; break;
    case Style::Cosine: coeff = 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0); break;
    case Style::Wsd: {
        const double anneal_start = decay_ - wsd_decay_;
        if (n <= anneal_start) break;
        const double r = (n - anneal_start) / wsd_decay_;
        switch (anneal_) {
        case Anneal::Linear: coeff = 1.0 - r; break;
        case Anneal::Cosine: coeff = 0.5 * (std::cos(std::numbers::pi * r) + 1.0); break;
        case Anneal::Exponential: coeff = 2.0 * std::pow(0.5, r) - 1.0; break;
        case Anneal::MinusSqrt: coeff = 1.0 - std::sqrt(r); break;
        }
        break;
    }
    default: break;
    }
    return min_lr_ + coeff * (max_lr_ - min_lr_);
}

double LrSchedule::weight_decay(double n) const {
    if (n > wd_incr_ || wd_style_ == WdStyle::Constant) return end_wd_;
    const double ratio = n / wd_incr_;
    const double coeff = wd_style_ == WdStyle::Linear ? ratio : 0.5 * (std::cos(std::numbers::pi * (1 - ratio)) + 1.0);
    return start_wd_ + coeff * (end_wd_ - start_wd_);
}

}  // namespace mwb
