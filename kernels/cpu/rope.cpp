// Rotary position embedding (Su et al. 2021) applied in place to the query and key heads of the
// grouped qkv activation; value heads are skipped. Rows (s, b) run in parallel; each element is
// touched once, so results do not depend on the thread count.
#include "cpu_ops.h"

#include "mwb/kernels/error.h"

namespace mwb::cpu {

namespace {

struct RopeGeometry {
    int64_t S, B, G, per_group, D, R;
};

RopeGeometry check_rope(const char* op, const TensorView& qkv, const TensorView& cos, const TensorView& sin,
                        const AttentionParams& p, int rotary_dim, int64_t position_offset) {
    MWB_CHECK(p.num_heads > 0 && p.groups() > 0 && p.num_heads % p.groups() == 0,
              "{}: {} query heads do not split into {} key/value groups", op, p.num_heads, p.groups());
    MWB_CHECK(qkv.ndim == 3 && qkv.dim(1) == p.batch && qkv.dim(2) % p.qkv_heads() == 0,
              "{}: qkv {} must be (S, B={}, G·(A/G+2)·D) with A={}, G={}", op, qkv.describe(), p.batch, p.num_heads,
              p.groups());
    const RopeGeometry g{qkv.dim(0), qkv.dim(1), p.groups(), p.num_heads / p.groups(), qkv.dim(2) / p.qkv_heads(),
                         rotary_dim};
    MWB_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= g.D,
              "{}: rotary_dim {} must be even and in (0, head dim {}]", op, rotary_dim, g.D);
    MWB_CHECK(cos.ndim == 2 && sin.ndim == 2 && cos.dim(1) == rotary_dim / 2 && sin.dim(1) == rotary_dim / 2 &&
                  cos.dim(0) == sin.dim(0),
              "{}: cos {} and sin {} must both be (positions, {})", op, cos.describe(), sin.describe(), rotary_dim / 2);
    MWB_CHECK(position_offset >= 0 && position_offset + g.S <= cos.dim(0),
              "{}: positions [{}, {}) outside the {} rows of the tables", op, position_offset, position_offset + g.S,
              cos.dim(0));
    return g;
}

/// Rotates every query and key head of every row by the angle table; sign = +1 forward, -1 backward
/// (the inverse rotation is the transposed one: sin negated).
void rotate(float* qkv, const float* cos, const float* sin, const RopeGeometry& g, bool interleaved,
            int64_t position_offset, float sign) {
    const int64_t half = g.R / 2, group_width = (g.per_group + 2) * g.D, row_width = g.G * group_width;
    const int64_t rows = g.S * g.B;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < rows; ++n) {
        const int64_t pos = n / g.B + position_offset;
        const float* c = cos + pos * half;
        const float* s = sin + pos * half;
        float* row = qkv + n * row_width;
        for (int64_t grp = 0; grp < g.G; ++grp)
            for (int64_t h = 0; h <= g.per_group; ++h) {  // the group's query heads and its key head
                float* x = row + grp * group_width + h * g.D;
                if (interleaved) {
#pragma omp simd
                    for (int64_t i = 0; i < half; ++i) {
                        const float a = x[2 * i], b = x[2 * i + 1], si = sign * s[i];
                        x[2 * i] = a * c[i] - b * si;
                        x[2 * i + 1] = b * c[i] + a * si;
                    }
                } else {
#pragma omp simd
                    for (int64_t i = 0; i < half; ++i) {
                        const float a = x[i], b = x[i + half], si = sign * s[i];
                        x[i] = a * c[i] - b * si;
                        x[i + half] = b * c[i] + a * si;
                    }
                }
            }
    }
}

}  // namespace

void rope_forward(OpContext&, TensorView qkv, TensorView cos, TensorView sin, const AttentionParams& p, int rotary_dim,
                  bool interleaved, int64_t position_offset) {
    const RopeGeometry g = check_rope("rope_forward", qkv, cos, sin, p, rotary_dim, position_offset);
    rotate(qkv.f32(), cos.f32(), sin.f32(), g, interleaved, position_offset, 1.0f);
}

void rope_backward(OpContext&, TensorView dqkv, TensorView cos, TensorView sin, const AttentionParams& p,
                   int rotary_dim, bool interleaved, int64_t position_offset) {
    const RopeGeometry g = check_rope("rope_backward", dqkv, cos, sin, p, rotary_dim, position_offset);
    rotate(dqkv.f32(), cos.f32(), sin.f32(), g, interleaved, position_offset, -1.0f);
}

}  // namespace mwb::cpu
