#pragma once
// Loss scaling for fp16 (Megatron-LM's DynamicGradScaler / ConstantGradScaler): the loss gradient is
// multiplied by the scale so small fp16 gradients don't flush to zero; an iteration whose gradients
// overflow is skipped, and after `hysteresis` such iterations the scale halves; after
// `loss_scale_window` clean iterations it doubles. bf16 and fp32 runs use a constant scale of 1.
#include "backend/config/config.h"

#include <nlohmann/json.hpp>

namespace mwb {

class LossScaler {
public:
    explicit LossScaler(const TrainingConfig& t);
    double scale() const { return scale_; }
    bool dynamic() const { return dynamic_; }
    /// Records the outcome of an iteration (found_inf: gradients had Inf/NaN) and adapts the scale.
    void update(bool found_inf);

    nlohmann::json state() const;
    void load_state(const nlohmann::json& state);

private:
    bool dynamic_;
    double scale_, min_scale_;
    int window_, hysteresis_;
    int growth_tracker_ = 0;
    int hysteresis_tracker_;
};

}  // namespace mwb
