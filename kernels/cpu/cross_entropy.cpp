// Softmax + cross-entropy over a vocabulary shard. Two passes over each row (max, then Σexp), done
// while the row sits in cache; backward overwrites the logits with their gradient. With the whole
// vocabulary in one tensor, the fused op also writes the gradient while the row is still in cache.
// The per-row combinations of the shards' statistics (rescale, lse) and the loss sum are plain loops
// with the host arithmetic GptModel::head used before them (std::exp, std::log, float64 row order).
#include "cpu_ops.h"
#include "mwb/kernels/error.h"
#include "vec_math.h"

#include <algorithm>
#include <cmath>

namespace mwb::cpu {

void cross_entropy_partials(OpContext&, TensorView row_max, TensorView row_sumexp, TensorView target_logit,
                            TensorView logits, TensorView targets, int64_t vocab_start) {
    const int64_t rows = logits.rows(), v = logits.cols();
    const float* pl = logits.f32();
    const int32_t* pt = targets.i32();
    float *pm = row_max.f32(), *ps = row_sumexp.f32(), *ptl = target_logit.f32();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = pl + r * v;
        const float mx = max_of(row, v);
        float sum = 0;
#pragma omp simd reduction(+ : sum) simdlen(16)
        for (int64_t j = 0; j < v; ++j) sum += exp_approx(row[j] - mx);
        pm[r] = mx;
        ps[r] = sum;
        const int64_t local = static_cast<int64_t>(pt[r]) - vocab_start;
        ptl[r] = (local >= 0 && local < v) ? row[local] : 0.0f;
    }
}

void cross_entropy_backward(OpContext&, TensorView logits, TensorView targets, TensorView lse, TensorView row_scale,
                            int64_t vocab_start) {
    const int64_t rows = logits.rows(), v = logits.cols();
    float* pl = logits.f32();
    const int32_t* pt = targets.i32();
    const float *plse = lse.f32(), *pscale = row_scale.f32();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        float* row = pl + r * v;
        const float m = plse[r], s = pscale[r];
#pragma omp simd simdlen(16)
        for (int64_t j = 0; j < v; ++j) row[j] = exp_approx(row[j] - m) * s;
        const int64_t local = static_cast<int64_t>(pt[r]) - vocab_start;
        if (local >= 0 && local < v) row[local] -= s;
    }
}

void cross_entropy_fused(OpContext&, TensorView lse, TensorView target_logit, TensorView logits, TensorView targets,
                         TensorView row_scale) {
    const int64_t rows = logits.rows(), v = logits.cols();
    float* pl = logits.f32();
    const int32_t* pt = targets.i32();
    const float* pscale = row_scale.f32();
    float *plse = lse.f32(), *ptl = target_logit.f32();
    for (int64_t r = 0; r < rows; ++r)  // checked here: an exception must not leave the parallel loop
        MWB_CHECK(pt[r] >= 0 && pt[r] < v, "cross_entropy_fused: target {} of row {} is outside the vocabulary [0, {})",
                  pt[r], r, v);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        // One row (128 KB at a 32000-word vocabulary) stays in L2 across the three passes, so the
        // logits are read from memory once instead of twice, and each exp is computed once (the
        // pass is bound by exp, not memory, then): softmax = exp(logit - max) / Σ, rather than the
        // two-op path's exp(logit - lse), which is also free of lse's float rounding. The loss
        // statistics are the partials' arithmetic.
        float* row = pl + r * v;
        const int64_t t = pt[r];
        ptl[r] = row[t];
        const float mx = max_of(row, v);
        float sum = 0;
#pragma omp simd reduction(+ : sum) simdlen(16)
        for (int64_t j = 0; j < v; ++j) {
            const float e = exp_approx(row[j] - mx);
            row[j] = e;
            sum += e;
        }
        const float s = pscale[r], per_exp = s / sum;
        plse[r] = mx + std::log(sum);
#pragma omp simd
        for (int64_t j = 0; j < v; ++j) row[j] *= per_exp;
        row[t] -= s;
    }
}

void cross_entropy_rescale(OpContext&, TensorView row_sumexp, TensorView row_max, TensorView global_max) {
    float* ps = row_sumexp.f32();
    const float *pm = row_max.f32(), *pg = global_max.f32();
    for (int64_t n = 0; n < row_sumexp.numel(); ++n) ps[n] *= std::exp(pm[n] - pg[n]);
}

void cross_entropy_lse(OpContext&, TensorView lse, TensorView row_max, TensorView row_sumexp) {
    float* pl = lse.f32();
    const float *pm = row_max.f32(), *ps = row_sumexp.f32();
    for (int64_t n = 0; n < lse.numel(); ++n) pl[n] = pm[n] + std::log(ps[n]);
}

void cross_entropy_loss_sum(OpContext&, TensorView loss, TensorView lse, TensorView target_logit, double divisor,
                            bool accumulate) {
    const float *pl = lse.f32(), *pt = target_logit.f32();
    double sum = 0;  // in row order: the same for any thread count
    for (int64_t n = 0; n < lse.numel(); ++n) sum += static_cast<double>(pl[n]) - static_cast<double>(pt[n]);
    double* out = loss.f64();
    *out = (accumulate ? *out : 0.0) + sum / divisor;
}

}  // namespace mwb::cpu
