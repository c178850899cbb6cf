#pragma once
// The memory-bound elementwise kernels of ops_elementwise.cu (fill, scale, add, GELU forward and
// backward; contracts: ops.inc) as one grid-stride map: out[i] = f(a[i], b[i]), each thread moving V
// floats per tensor in one access (128-bit for V = 4; the launcher runs the aligned bulk with V = 4
// and a tail of fewer than 4 elements with V = 1). Each element is read and written by one thread,
// so out may alias a or b. fp32 arithmetic. Plain CUDA C++ without runtime calls, so that
// test_kernels_elementwise_emulated runs this source on CPU threads.
#include "kernel_common.cuh"

#include <cmath>
#include <cstdint>

namespace mwb::cuda::elementwise {

using kernel::first_index;
using kernel::Floats;
using kernel::grid_stride;
using kernel::load;
using kernel::store;

/// out[i] = f(a[i], b[i]) for i < n (n a multiple of V); a null input reads as 0.
template <int V, class I, class F>
__global__ void k_map(float* out, const float* a, const float* b, int64_t n, F f) {
    const I count = static_cast<I>(n / V);
    for (I t = first_index<I>(); t < count; t += grid_stride<I>()) {
        const int64_t i = static_cast<int64_t>(t) * V;
        Floats<V> x{}, y{}, o;
        if (a) x = load<V>(a + i);
        if (b) y = load<V>(b + i);
#pragma unroll
        for (int k = 0; k < V; ++k) o.v[k] = f(x.v[k], y.v[k]);
        store<V>(out + i, o);
    }
}

struct Fill {
    float value;
    __device__ float operator()(float, float) const { return value; }
};
struct Scale {
    float alpha;
    __device__ float operator()(float x, float) const { return x * alpha; }
};
struct Add {
    __device__ float operator()(float x, float y) const { return x + y; }
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

}  // namespace mwb::cuda::elementwise
