#include "backend/optim/loss_scaler.h"

#include <algorithm>

namespace mwb {

LossScaler::LossScaler(const TrainingConfig& t)
    : dynamic_(t.fp16 && t.loss_scale == 0), scale_(t.fp16 ? (t.loss_scale > 0 ? t.loss_scale : t.initial_loss_scale) : 1.0),
      min_scale_(t.min_loss_scale), window_(t.loss_scale_window), hysteresis_(t.hysteresis),
      hysteresis_tracker_(t.hysteresis) {}

void LossScaler::update(bool found_inf) {
    if (!dynamic_) return;
    if (found_inf) {
        growth_tracker_ = 0;
        if (--hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * 0.5, min_scale_);
        return;
    }
    if (++growth_tracker_ == window_) {
        growth_tracker_ = 0;
        hysteresis_tracker_ = hysteresis_;
        scale_ *= 2.0;
    }
}

nlohmann::json LossScaler::state() const {
    return {{"scale", scale_}, {"growth_tracker", growth_tracker_}, {"hysteresis_tracker", hysteresis_tracker_}};
}

void LossScaler::load_state(const nlohmann::json& s) {
    scale_ = s.at("scale").get<double>();
    growth_tracker_ = s.at("growth_tracker").get<int>();
    hysteresis_tracker_ = s.at("hysteresis_tracker").get<int>();
}

}  // namespace mwb
