// Generation's attention over a key/value cache on the CPU (contract: ops.h cached_attention_forward):
// each new token's k and v go into its cache row, then each (token, query head) pair attends over its
// row's positions [0, pos]: scores, a max-subtracted softmax, the weighted sum of v. Pairs run in
// parallel (each writes only its own output); every sum has a fixed order, so results do not depend on
// the thread count. Threads wake only when the pairs hold enough work to pay for it (decode steps of a
// small model are microseconds).
#include "cpu_ops.h"

#include "mwb/kernels/error.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace mwb::cpu {

namespace {

struct CacheGeometry {
    int64_t n, A, G, D, R, L;
    int64_t per_group() const { return A / G; }
    int64_t ld_qkv() const { return (A + 2 * G) * D; }
    int64_t q(int64_t h) const { return (h / per_group() * (per_group() + 2) + h % per_group()) * D; }
    int64_t k(int64_t grp) const { return (grp * (per_group() + 2) + per_group()) * D; }
    int64_t at(int64_t row, int64_t grp) const { return (row * G + grp) * L * D; }
};

CacheGeometry geometry(const TensorView& k_cache, const TensorView& qkv, const AttentionParams& p) {
    return {qkv.dim(0), p.num_heads, p.groups(), k_cache.dim(3), k_cache.dim(0), k_cache.dim(2)};
}

}  // namespace

void cached_attention_forward(OpContext&, TensorView out, TensorView k_cache, TensorView v_cache, TensorView qkv,
                              TensorView rows, TensorView positions, const AttentionParams& p) {
    // Shapes and dtypes: checked by the dispatcher (src/ops.cpp); the indices here, in host memory.
    const CacheGeometry g = geometry(k_cache, qkv, p);
    const int32_t* row = rows.i32();
    const int32_t* pos = positions.i32();
    const float* x = qkv.f32();
    float *K = k_cache.f32(), *V = v_cache.f32(), *o = out.f32();
    int64_t work = 0;  // multiply-adds: q·k and p·v over each token's row
    for (int64_t i = 0; i < g.n; ++i) {
        MWB_CHECK(row[i] >= 0 && row[i] < g.R && pos[i] >= 0 && pos[i] < g.L,
                  "cached_attention_forward: token {} at row {}, position {}: outside the cache's {} rows of {}", i,
                  row[i], pos[i], g.R, g.L);
        for (int64_t grp = 0; grp < g.G; ++grp) {
            const float* k = x + i * g.ld_qkv() + g.k(grp);
            const int64_t at = g.at(row[i], grp) + int64_t{pos[i]} * g.D;
            std::memcpy(K + at, k, static_cast<std::size_t>(g.D) * sizeof(float));
            std::memcpy(V + at, k + g.D, static_cast<std::size_t>(g.D) * sizeof(float));
        }
        work += 2 * g.A * (int64_t{pos[i]} + 1) * g.D;
    }
    const float scale = p.softmax_scale;
    // One (token, query head) pair; s: the scores' scratch of the calling thread.
    const auto attend = [&](int64_t i, int64_t h, float* s) {
        const int64_t grp = h / g.per_group(), len = int64_t{pos[i]} + 1;
        const float* q = x + i * g.ld_qkv() + g.q(h);
        const float* Kr = K + g.at(row[i], grp);
        const float* Vr = V + g.at(row[i], grp);
        float max = -INFINITY;
        for (int64_t j = 0; j < len; ++j) {
            const float* k = Kr + j * g.D;
            float dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int64_t c = 0; c < g.D; ++c) dot += q[c] * k[c];
            s[j] = dot * scale;
            max = std::max(max, s[j]);
        }
        float sum = 0;
        for (int64_t j = 0; j < len; ++j) sum += (s[j] = std::exp(s[j] - max));
        float* out_ih = o + (i * g.A + h) * g.D;
        std::fill(out_ih, out_ih + g.D, 0.0f);
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j < len; ++j) {
            const float w = s[j] * inv;
            const float* v = Vr + j * g.D;
#pragma omp simd
            for (int64_t c = 0; c < g.D; ++c) out_ih[c] += w * v[c];
        }
    };
    if (work < (int64_t{1} << 17) || omp_get_max_threads() == 1) {
        // Not even an inactive parallel region: entering one costs futex calls, more than this work
        // (a decode step calls this once per layer and thread: backend/generate/decoder.cpp).
        std::vector<float> s(static_cast<std::size_t>(g.L));
        for (int64_t i = 0; i < g.n; ++i)
            for (int64_t h = 0; h < g.A; ++h) attend(i, h, s.data());
        return;
    }
#pragma omp parallel
    {
        std::vector<float> s(static_cast<std::size_t>(g.L));  // one per thread, not per pair
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int64_t i = 0; i < g.n; ++i)
            for (int64_t h = 0; h < g.A; ++h) attend(i, h, s.data());
    }
}

}  // namespace mwb::cpu
