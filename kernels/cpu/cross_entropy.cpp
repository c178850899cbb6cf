// Softmax + cross-entropy over a vocabulary shard. Two passes over each row (max, then Σexp), done
// while the row sits in cache; backward overwrites the logits with their gradient.
#include "cpu_ops.h"
#include "vec_math.h"

#include <algorithm>

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

}  // namespace mwb::cpu
