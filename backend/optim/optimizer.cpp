#include "backend/optim/optimizer.h"

#include "backend/parallel/parallel_context.h"
#include "mwb/kernels/error.h"

#include <algorithm>
#include <cmath>

namespace mwb {

Optimizer::Optimizer(const ParamLayout& layout, TensorView params, TensorView grads, const TrainingConfig& t,
                     DType storage, OpContext& ctx, Allocator& alloc)
    : Optimizer(layout, params, grads, t, storage, ctx, alloc, nullptr, ArenaShard{0, params.numel()}) {}

Optimizer::Optimizer(const ParamLayout& layout, TensorView params, TensorView grads, const TrainingConfig& t,
                     DType storage, OpContext& ctx, Allocator& alloc, ParallelContext* par, ArenaShard shard)
    : layout_(layout), params_(params), grads_(grads), storage_(storage), beta1_(static_cast<float>(t.adam_beta1)),
      beta2_(static_cast<float>(t.adam_beta2)), eps_(static_cast<float>(t.adam_eps)),
      weight_decay_(static_cast<float>(t.weight_decay)), clip_grad_(t.clip_grad), ctx_(ctx), par_(par), shard_(shard) {
    const int64_t n = shard_.size();
    if (storage_ != DType::F32) {
        // As in Megatron-LM, the master copy starts from the (already rounded) 16-bit weights, widened
        // exactly from the model's working copy (a 16-bit arena, or f32 holding 16-bit values on CUDA).
        master_ = Buffer(alloc, MemCategory::Optimizer, n);
        ops::copy(ctx_, master_.view(), slice_1d(params_, shard_.begin, n));
    }
    exp_avg_ = Buffer(alloc, MemCategory::Optimizer, n);
    exp_avg_sq_ = Buffer(alloc, MemCategory::Optimizer, n);
    ops::fill(ctx_, exp_avg_.view(), 0.0f);
    ops::fill(ctx_, exp_avg_sq_.view(), 0.0f);
    // A few bytes of per-step device scalars: workspace (the optimizer category is the planner's
    // master + moments formula, byte for byte).
    sumsq_ = Buffer(alloc, MemCategory::Workspace, 1, DType::F64);
    scale_ = Buffer(alloc, MemCategory::Workspace, 2);
    step_ = Buffer(alloc, MemCategory::Workspace, step_params::Count, DType::F64);
    if (ctx_.device != Device::CPU) staging_ = std::make_unique<HostStaging>();
    for_each_in_shard([&](std::size_t i, int64_t first, int64_t count) {
        if (counted_in_norm(layout_[i])) norm_ranges_.push_back({first, count});
    });
}

TensorView Optimizer::master() const {
    return master_.empty() ? slice_1d(params_, shard_.begin, shard_.size()) : master_.view();
}

template <typename F>
void Optimizer::for_each_in_shard(F&& f) const {
    for (std::size_t i = 0; i < layout_.size(); ++i) {
        const ParamInfo& p = layout_[i];
        const int64_t first = std::max(p.offset, shard_.begin), last = std::min(p.offset + p.numel, shard_.end);
        if (first < last) f(i, first, last - first);
    }
}

bool Optimizer::counted_in_norm(const ParamInfo& p) const {
    // Each gradient element counts once in the model: tensor-parallel replicas on TP rank 0 only,
    // the last stage's tied embedding copy not at all (its first-stage twin counts).
    if (p.tied_copy) return false;
    return p.split_dim >= 0 || !par_ || par_->coord().tp == 0;
}

StepResult Optimizer::step(double lr, double loss_scale, bool zero_grads) {
    begin_step(lr, loss_scale);
    update(zero_grads, sumsq_.view());
    return finish(ops::read_f64(ctx_, sumsq_.view())[0], loss_scale);
}

void Optimizer::begin_step(double lr, double loss_scale, int64_t iteration, float grad_scale) {
    MWB_CHECK(loss_scale > 0, "optimizer: the loss scale must be > 0, got {}", loss_scale);
    AdamWParams p;
    p.lr = static_cast<float>(lr);
    p.beta1 = beta1_;
    p.beta2 = beta2_;
    p.weight_decay = weight_decay_;
    p.step = steps_ + 1;  // if the device does not skip it
    const AdamWConstants k = adamw_constants(p);
    const int64_t bytes = step_params::Count * static_cast<int64_t>(sizeof(double));
    auto* block = static_cast<double*>(staging_ ? staging_->next(bytes) : step_.data());
    block[step_params::StepSize] = k.step_size;
    block[step_params::InvSqrtBc2] = k.inv_sqrt_bc2;
    block[step_params::Decay] = k.decay;
    block[step_params::LossScale] = loss_scale;
    block[step_params::Iteration] = static_cast<double>(iteration);  // exact below 2^53
    block[step_params::GradScale] = grad_scale;
    if (!staging_) return;
    staging_->upload(step_.data(), 0, bytes, ctx_.stream);
    staging_->uploaded(ctx_.stream);
}

void Optimizer::update(bool zero_grads, const TensorView& sumsq) {
    // Everything up to the one read after it stays on the device: the norm's Σ x² of every counted
    // gradient in one pass, its sum over the model's ranks on the data groups (NCCL on GPUs), the
    // clip and skip decision as a device scale that AdamW reads. The per-step scalars reach the
    // kernels through the step's parameter block (begin_step's), not as launch arguments.
    ops::sum_squares_ranges(ctx_, sumsq, grads_, norm_ranges_);
    if (par_) {
        par_->model_replica().all_reduce_sum(sumsq.f64(), 1);
        if (distributed()) par_->dp().all_reduce_sum(sumsq.f64(), 1);
    }
    ops::gradient_scale(ctx_, scale_.view(), sumsq, /*loss_scale: the block's*/ 1.0, clip_grad_, step_.view());
    // The learning rate, step count and decay come from the step's block; p.weight_decay says which
    // runs decay.
    AdamWParams p;
    p.beta1 = beta1_;
    p.beta2 = beta2_;
    p.eps = eps_;
    p.grad_scale = 1.0f;  // × scale_[0]: the clip coefficient over the loss scale
    // Every parameter is in the shard then; the arena's padding between them is never written.
    p.zero_grad = zero_grads && !distributed();
    const TensorView m = master();
    // Multi-tensor: adjacent parameters with the same decay are updated by one call over their whole
    // range of the arena (one kernel on a GPU instead of one per tensor; elementwise, so the same bits).
    int64_t run_first = 0, run_count = 0;
    bool run_decay = false;
    const auto flush = [&] {
        if (run_count == 0) return;
        // Whether the range decays is the layout's, not the current value's: a decay of 0 now (the
        // start of weight-decay increments) makes the block's 1 − lr·wd exactly 1, the same bits as not
        // decaying, and a step queued once (a CUDA graph) still decays once the value grows.
        p.weight_decay = run_decay ? 1.0f : 0.0f;
        const int64_t local = run_first - shard_.begin;
        const auto slice = [&](const TensorView& arena, int64_t at) { return slice_1d(arena, at, run_count); };
        ops::adamw_update(ctx_, slice(m, local), slice(grads_, run_first), slice(exp_avg(), local),
                          slice(exp_avg_sq(), local), p, master_.empty() ? TensorView{} : slice(params_, run_first),
                          storage_, scale_.view(), step_.view());
        run_count = 0;
    };
    for_each_in_shard([&](std::size_t i, int64_t first, int64_t count) {
        const bool decay = layout_[i].weight_decay;
        if (run_count > 0 && (decay != run_decay || first != run_first + run_count)) flush();
        if (run_count == 0) {
            run_first = first;
            run_decay = decay;
        }
        run_count += count;
    });
    flush();
    // A skipped step left the weights as they were on every rank: gathering them again is harmless.
    if (distributed()) all_gather_params();
    zeroing_ = p.zero_grad;
}

StepResult Optimizer::finish(double sumsq, double loss_scale) {
    // From the step's one host read (telemetry, the scaler, the schedule): the global Σ x², the same
    // value on every rank, from which the device decided the same skip and clip.
    StepResult r;
    r.grad_norm = std::sqrt(sumsq) / loss_scale;
    r.skipped = !std::isfinite(r.grad_norm);
    if (r.skipped) return r;
    r.clip_coeff = clip_coefficient(r.grad_norm, clip_grad_);
    r.grads_zeroed = zeroing_;
    ++steps_;
    return r;
}

void Optimizer::all_gather_params() {
    // Every rank updated its shard of the weights; the data-parallel group exchanges them in the
    // arena's dtype (2 bytes an element for a 16-bit working copy).
    const auto bytes = static_cast<int64_t>(dtype_size(params_.dtype));
    char* arena = static_cast<char*>(params_.data);
    par_->dp().all_gather_elements(arena + shard_.begin * bytes, arena, shard_.size(), bytes);
}

void Optimizer::sync_params_from_master() {
    if (!master_.empty()) {
        const TensorView mine = slice_1d(params_, shard_.begin, shard_.size());
        ops::copy(ctx_, mine, master_.view());  // a 16-bit arena: rounded by the copy
        if (mine.dtype == DType::F32) ops::round_to(ctx_, mine, storage_);
    }
    if (distributed()) all_gather_params();
}

}  // namespace mwb
