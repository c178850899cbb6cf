#pragma once
// The memory-bound elementwise kernels of ops_elementwise.cu (fill, scale, add, GELU forward and
// backward, storage rounding and dtype conversions; contracts: ops.inc) as one grid-stride map:
// out[i] = f(a[i], b[i]), each tensor in its own storage (storage.cuh: f32, bf16 or f16), loaded and
// widened, computed in fp32, rounded once on the store. Each thread moves V elements per tensor in
// 16-byte accesses (the launcher runs the aligned bulk with V = 8 when a tensor is 16-bit, else 4, and
// the tail one element at a time). Each element is read and written by one thread, so out may alias a
// or b. Plain CUDA C++ without runtime calls, so that test_kernels_elementwise_emulated runs this
// source on CPU threads.
#include "kernel_common.cuh"
#include "storage.cuh"

#include "mwb/kernels/philox.h"

#include <cmath>
#include <cstdint>

namespace mwb::cuda::elementwise {

using kernel::first_index;
using kernel::Floats;
using kernel::grid_stride;
using storage::load_n;
using storage::store_n;

/// out[i] = f(a[i], b[i]) for i < n (n a multiple of V), out in storage SO, a in SA, b in SB; a null
/// input reads as 0.
template <int V, class I, class SO = storage::F32, class SA = SO, class SB = SA, class F>
__global__ void k_map(typename SO::type* out, const typename SA::type* a, const typename SB::type* b, int64_t n,
                      F f) {
    const I count = static_cast<I>(n / V);
    for (I t = first_index<I>(); t < count; t += grid_stride<I>()) {
        const int64_t i = static_cast<int64_t>(t) * V;
        Floats<V> x{}, y{}, o;
        if (a) x = load_n<SA, V>(a + i);
        if (b) y = load_n<SB, V>(b + i);
#pragma unroll
        for (int k = 0; k < V; ++k) o.v[k] = f(x.v[k], y.v[k]);
        store_n<SO, V>(out + i, o);
    }
}

struct Fill {
    float value;
    __device__ float operator()(float, float) const { return value; }
};
/// fill_from's value: read from memory by every thread (a step block's entry).
struct FillFrom {
    const double* value;
    float divisor;
    __device__ float operator()(float, float) const { return static_cast<float>(*value) / divisor; }
};
struct Scale {
    float alpha;
    __device__ float operator()(float x, float) const { return x * alpha; }
};
struct Add {
    __device__ float operator()(float x, float y) const { return x + y; }
};
/// out = a: a dtype conversion (the store rounds) or a copy.
struct Copy {
    __device__ float operator()(float x, float) const { return x; }
};
/// x rounded to what a bf16 / fp16 store keeps, in an f32 tensor (ops::round_to).
struct RoundBf16 {
    __device__ float operator()(float x, float) const { return storage::round_to_bf16(x); }
};
struct RoundFp16 {
    __device__ float operator()(float x, float) const { return storage::round_to_fp16(x); }
};

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

/// GELU, tanh approximation: 0.5·x·(1 + tanh(u)) written as 0.5·x·2/(1 + e^(−2u)).
struct GeluForward {
    __device__ float operator()(float v, float) const {
        return 0.5f * v * (2.0f / (1.0f + expf(-2.0f * kSqrt2OverPi * (v + kCubic * v * v * v))));
    }
};
/// dx = dout·gelu'(x), a = dout, b = x.
struct GeluBackward {
    __device__ float operator()(float dout, float v) const {
        const float e = expf(-2.0f * kSqrt2OverPi * (v + kCubic * v * v * v));
        const float opt = 2.0f / (1.0f + e);
        const float omt = 2.0f / (1.0f + 1.0f / e);
        const float vc = fminf(fmaxf(v, -16.0f), 16.0f);
        const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * vc * vc);
        return dout * (0.5f * opt + 0.5f * vc * (opt * omt) * du);
    }
};

// ---- dropout: one Philox draw per group of four global indices, as the CPU ------------------------------

struct DropoutArgs {
    RngStream rng;
    uint32_t threshold;
    float scale;
    int64_t offset;  ///< global index of element 0
    int64_t n;
    int enabled;
};

/// out[i] = base[i] + (x[i] + bias[i % cols])·mult(offset + i), one thread per group of four global
/// indices (one Philox draw). out and base in storage S, x in SX (f32 beside a 16-bit out: the
/// row-parallel sum into the residual, or a 16-bit gradient into an f32 one), bias in W; base and bias
/// may be null. With
/// `Wide` (offset and cols multiples of 4, pointers aligned to four elements: the launcher's choice)
/// a whole group moves as one access per tensor (16 bytes of f32, 8 of 16-bit), else and at the ends
/// element by element. Each element is read and written by one thread, so out may alias base or x.
template <bool Wide, class S, class W, class SX = S>
__global__ void k_dropout(typename S::type* out, const typename S::type* base, const typename SX::type* x,
                          const typename W::type* bias, int64_t cols, DropoutArgs a) {
    const int64_t first_group = a.offset >> 2, last_group = (a.offset + a.n - 1) >> 2;
    const int64_t groups = last_group - first_group + 1;
    const RngStream rng = a.enabled ? resolved(a.rng) : a.rng;  // the stream of this step (RngStream)
    for (int64_t t = first_index<int64_t>(); t < groups; t += grid_stride<int64_t>()) {
        const int64_t g = first_group + t;
        Philox4 d{{0, 0, 0, 0}};
        if (a.enabled) d = philox_draw(rng, static_cast<uint64_t>(g));
        const int64_t i0 = 4 * g - a.offset;
        float m[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) m[k] = a.enabled ? (d.v[k] < a.threshold ? a.scale : 0.0f) : 1.0f;
        if (Wide && i0 >= 0 && i0 + 4 <= a.n) {
            Floats<4> v = load_n<SX, 4>(x + i0), r{}, o;
            if (bias) {
                const Floats<4> b = load_n<W, 4>(bias + i0 % cols);
#pragma unroll
                for (int k = 0; k < 4; ++k) v.v[k] += b.v[k];
            }
            if (base) r = load_n<S, 4>(base + i0);
#pragma unroll
            for (int k = 0; k < 4; ++k) o.v[k] = r.v[k] + v.v[k] * m[k];
            store_n<S, 4>(out + i0, o);
            continue;
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int64_t i = i0 + k;
            if (i < 0 || i >= a.n) continue;
            float v = SX::load(x[i]);
            if (bias) v += W::load(bias[i % cols]);
            out[i] = S::store((base ? S::load(base[i]) : 0.0f) + v * m[k]);
        }
    }
}

}  // namespace mwb::cuda::elementwise
