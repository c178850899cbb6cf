#include "optim/optimizer.h"

#include <cmath>

namespace mwb {

Optimizer::Optimizer(const ParamLayout& layout, TensorView params, TensorView grads, const TrainingConfig& t,
                     DType storage, OpContext& ctx, Allocator& alloc)
    : layout_(layout), params_(params), grads_(grads), storage_(storage), beta1_(static_cast<float>(t.adam_beta1)),
      beta2_(static_cast<float>(t.adam_beta2)), eps_(static_cast<float>(t.adam_eps)),
      weight_decay_(static_cast<float>(t.weight_decay)), clip_grad_(t.clip_grad), ctx_(ctx) {
    const int64_t n = layout.arena_elements();
    if (storage_ != DType::F32) {
        // As in Megatron-LM, the master copy starts from the (already rounded) 16-bit weights.
        master_ = Buffer(alloc, MemCategory::Optimizer, n);
        ops::copy(ctx_, master_.view(), params_);
    }
    exp_avg_ = Buffer(alloc, MemCategory::Optimizer, n);
    exp_avg_sq_ = Buffer(alloc, MemCategory::Optimizer, n);
    ops::fill(ctx_, exp_avg_.view(), 0.0f);
    ops::fill(ctx_, exp_avg_sq_.view(), 0.0f);
}

StepResult Optimizer::step(double lr, double loss_scale) {
    StepResult r;
    const double sumsq = ops::sum_squares(ctx_, grads_);
    r.grad_norm = std::sqrt(sumsq) / loss_scale;
    if (!std::isfinite(r.grad_norm)) {
        r.skipped = true;
        return r;
    }
    if (clip_grad_ > 0) {
        const double coeff = clip_grad_ / (r.grad_norm + 1e-6);
        if (coeff < 1.0) r.clip_coeff = coeff;
    }
    ++steps_;
    AdamWParams p;
    p.lr = static_cast<float>(lr);
    p.beta1 = beta1_;
    p.beta2 = beta2_;
    p.eps = eps_;
    p.step = steps_;
    p.grad_scale = static_cast<float>(r.clip_coeff / loss_scale);
    const TensorView master_arena = master();
    for (std::size_t i = 0; i < layout_.size(); ++i) {
        p.weight_decay = layout_[i].weight_decay ? weight_decay_ : 0.0f;
        const TensorView copy = master_.empty() ? TensorView{} : layout_.view(params_, i);
        ops::adamw_update(ctx_, layout_.view(master_arena, i), layout_.view(grads_, i), layout_.view(exp_avg(), i),
                          layout_.view(exp_avg_sq(), i), p, copy, storage_);
    }
    return r;
}

void Optimizer::sync_params_from_master() {
    if (master_.empty()) return;
    ops::copy(ctx_, params_, master_.view());
    ops::round_to(ctx_, params_, storage_);
}

}  // namespace mwb
