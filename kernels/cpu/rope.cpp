// Rotary position embedding (Su et al. 2021) applied in place to the query and key heads of the
// grouped qkv activation; value heads are skipped. Rows (s, b) run in parallel; each element is
// touched once, so results do not depend on the thread count.
#include "cpu_ops.h"
#include "storage.h"

namespace mwb::cpu {

namespace {

struct RopeGeometry {
    int64_t S, B, G, per_group, D, R;
};

/// The head layout of qkv (S, B, G·(A/G + 2)·D); the dispatcher has checked it against p.
RopeGeometry geometry(const TensorView& qkv, const AttentionParams& p, int rotary_dim) {
    return {qkv.dim(0), qkv.dim(1), p.groups(), p.num_heads / p.groups(), qkv.dim(2) / p.qkv_heads(), rotary_dim};
}

/// Rotates every query and key head of every row by the angle table; sign = +1 forward, -1 backward
/// (the inverse rotation is the transposed one: sin negated). T: qkv's storage (a 16-bit result is
/// rounded once per element, as the emulated store after it did).
template <DType T>
void rotate(typename Storage<T>::type* qkv, const float* cos, const float* sin, const RopeGeometry& g, bool interleaved,
            int64_t position_offset, float sign) {
    const int64_t half = g.R / 2, group_width = (g.per_group + 2) * g.D, row_width = g.G * group_width;
    const int64_t rows = g.S * g.B;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < rows; ++n) {
        const int64_t pos = n / g.B + position_offset;
        const float* c = cos + pos * half;
        const float* s = sin + pos * half;
        auto* row = qkv + n * row_width;
        for (int64_t grp = 0; grp < g.G; ++grp)
            for (int64_t h = 0; h <= g.per_group; ++h) {  // the group's query heads and its key head
                auto* x = row + grp * group_width + h * g.D;
                if (interleaved) {
#pragma omp simd
                    for (int64_t i = 0; i < half; ++i) {
                        const float a = Storage<T>::load(x[2 * i]), b = Storage<T>::load(x[2 * i + 1]);
                        const float si = sign * s[i];
                        x[2 * i] = Storage<T>::store(a * c[i] - b * si);
                        x[2 * i + 1] = Storage<T>::store(b * c[i] + a * si);
                    }
                } else {
#pragma omp simd
                    for (int64_t i = 0; i < half; ++i) {
                        const float a = Storage<T>::load(x[i]), b = Storage<T>::load(x[i + half]);
                        const float si = sign * s[i];
                        x[i] = Storage<T>::store(a * c[i] - b * si);
                        x[i + half] = Storage<T>::store(b * c[i] + a * si);
                    }
                }
            }
    }
}

}  // namespace

void rope_forward(OpContext&, TensorView qkv, TensorView cos, TensorView sin, const AttentionParams& p, int rotary_dim,
                  bool interleaved, int64_t position_offset) {
    const RopeGeometry g = geometry(qkv, p, rotary_dim);
    with_storage(qkv.dtype, [&](auto t) {
        constexpr DType T = decltype(t)::value;
        rotate<T>(elements<T>(qkv), cos.f32(), sin.f32(), g, interleaved, position_offset, 1.0f);
    });
}

void rope_backward(OpContext&, TensorView dqkv, TensorView cos, TensorView sin, const AttentionParams& p,
                   int rotary_dim, bool interleaved, int64_t position_offset) {
    const RopeGeometry g = geometry(dqkv, p, rotary_dim);
    with_storage(dqkv.dtype, [&](auto t) {
        constexpr DType T = decltype(t)::value;
        rotate<T>(elements<T>(dqkv), cos.f32(), sin.f32(), g, interleaved, position_offset, -1.0f);
    });
}

}  // namespace mwb::cpu
