#pragma once
// The SwiGLU and rotary-position-embedding kernels of ops_rope_swiglu.cu (contracts: ops.h). Both are
// memory-bound and elementwise: grid-stride loops, each thread moving V elements per tensor, each
// tensor in its storage (storage.cuh: f32, bf16 or f16, widened on load, rounded once on store), in
// 16-byte accesses (V = 8 with a 16-bit tensor, 4 with f32 ones, when rows and pointers allow; V = 1
// otherwise), fp32 arithmetic. Plain CUDA C++
// without runtime calls, so that test_kernels_rope_swiglu_emulated runs this source on CPU threads
// (tests/kernels/cuda_emulation.h) against float64 references, in CI, where there is no GPU.
#include "kernel_common.cuh"
#include "storage.cuh"

#include <cstdint>

namespace mwb::cuda::rope_swiglu {

using kernel::first_index;
using kernel::Floats;
using kernel::grid_stride;
using storage::load_n;
using storage::store_n;

__device__ __forceinline__ float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

// ---- SwiGLU: x (rows, 2F) = [gate | up] per row ---------------------------------------------------------

/// out (rows, F) = silu(gate)·up, silu(g) = g·sigmoid(g); a thread per V columns of a row.
template <int V, class I, class SX = storage::F32, class SO = SX>
__global__ void k_swiglu_fwd(typename SO::type* out, const typename SX::type* x, int64_t rows, int64_t F) {
    const I per_row = static_cast<I>(F / V), n = static_cast<I>(rows) * per_row;
    for (I t = first_index<I>(); t < n; t += grid_stride<I>()) {
        const int64_t r = t / per_row, c = static_cast<int64_t>(t % per_row) * V;
        const Floats<V> gate = load_n<SX, V>(x + r * 2 * F + c), up = load_n<SX, V>(x + r * 2 * F + F + c);
        Floats<V> o;
#pragma unroll
        for (int k = 0; k < V; ++k) o.v[k] = gate.v[k] * sigmoid(gate.v[k]) * up.v[k];
        store_n<SO, V>(out + r * F + c, o);
    }
}

/// dx (rows, 2F) = [dout·up·silu'(gate) | dout·silu(gate)], silu'(g) = σ(g)·(1 + g·(1 − σ(g))). Each
/// thread reads its gate and up before it writes, so dx may alias x.
template <int V, class I, class SX = storage::F32, class SG = SX>
__global__ void k_swiglu_bwd(typename SG::type* dx, const typename SG::type* dout, const typename SX::type* x,
                             int64_t rows, int64_t F) {
    const I per_row = static_cast<I>(F / V), n = static_cast<I>(rows) * per_row;
    for (I t = first_index<I>(); t < n; t += grid_stride<I>()) {
        const int64_t r = t / per_row, c = static_cast<int64_t>(t % per_row) * V;
        const Floats<V> gate = load_n<SX, V>(x + r * 2 * F + c), up = load_n<SX, V>(x + r * 2 * F + F + c);
        const Floats<V> d = load_n<SG, V>(dout + r * F + c);
        Floats<V> dgate, dup;
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const float g = gate.v[k], s = sigmoid(g);
            dgate.v[k] = d.v[k] * up.v[k] * s * (1.0f + g * (1.0f - s));
            dup.v[k] = d.v[k] * g * s;
        }
        store_n<SG, V>(dx + r * 2 * F + c, dgate);
        store_n<SG, V>(dx + r * 2 * F + F + c, dup);
    }
}

// ---- rotary position embedding ----------------------------------------------------------------------------

/// One rope call: qkv (S, B, G·(A/G + 2)·D), tables (P, R/2); sign +1 rotates by the angle (forward),
/// −1 by its negative (backward: the transposed rotation).
struct RopeGeometry {
    int64_t S, B, A, G, D;
    int64_t R;                // rotated dims of each head (even, <= D)
    int64_t position_offset;  // table row of sequence index 0
    float sign;
};

/// Rotates V consecutive pairs (i0 … i0 + V − 1) of one query or key head per thread; value heads are
/// skipped. Pairs: (i, i + R/2) (rotate-half) or (2i, 2i + 1) (`Interleaved`, GPT-J):
/// (a, b) -> (a·cos − sign·b·sin, b·cos + sign·a·sin).
/// qkv in storage S (rounded once per rotated element; unrotated elements are not written), the
/// tables f32.
template <int V, bool Interleaved, class I, class S = storage::F32>
__global__ void k_rope(typename S::type* qkv, const float* cos_table, const float* sin_table, RopeGeometry g) {
    const int64_t half = g.R / 2;
    // Per position and sequence: every query head and every key head, R/(2V) threads each.
    const I per_head = static_cast<I>(half / V), per_group = static_cast<I>(g.A / g.G),
            rotated = static_cast<I>(g.A + g.G);
    const I n = static_cast<I>(g.S * g.B) * rotated * per_head;
    for (I t = first_index<I>(); t < n; t += grid_stride<I>()) {
        const I u = (t / per_head) % rotated, sb = t / (per_head * rotated);
        const I grp = u / (per_group + 1), slot = u % (per_group + 1);  // slot A/G: the group's key
        const int64_t i0 = static_cast<int64_t>(t % per_head) * V, s = sb / static_cast<I>(g.B);
        typename S::type* head = qkv + (static_cast<int64_t>(sb) * (g.A + 2 * g.G) + grp * (per_group + 2) + slot) * g.D;
        const int64_t row = (s + g.position_offset) * half + i0;
        const Floats<V> c = load_n<storage::F32, V>(cos_table + row), sn = load_n<storage::F32, V>(sin_table + row);
        if constexpr (Interleaved) {
            const Floats<V> lo = load_n<S, V>(head + 2 * i0), hi = load_n<S, V>(head + 2 * i0 + V);
            float x[2 * V];
#pragma unroll
            for (int k = 0; k < V; ++k) {
                x[k] = lo.v[k];
                x[V + k] = hi.v[k];
            }
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const float a = x[2 * k], b = x[2 * k + 1];
                x[2 * k] = a * c.v[k] - g.sign * b * sn.v[k];
                x[2 * k + 1] = b * c.v[k] + g.sign * a * sn.v[k];
            }
            Floats<V> out_lo, out_hi;
#pragma unroll
            for (int k = 0; k < V; ++k) {
                out_lo.v[k] = x[k];
                out_hi.v[k] = x[V + k];
            }
            store_n<S, V>(head + 2 * i0, out_lo);
            store_n<S, V>(head + 2 * i0 + V, out_hi);
        } else {
            const Floats<V> a = load_n<S, V>(head + i0), b = load_n<S, V>(head + half + i0);
            Floats<V> ra, rb;
#pragma unroll
            for (int k = 0; k < V; ++k) {
                ra.v[k] = a.v[k] * c.v[k] - g.sign * b.v[k] * sn.v[k];
                rb.v[k] = b.v[k] * c.v[k] + g.sign * a.v[k] * sn.v[k];
            }
            store_n<S, V>(head + i0, ra);
            store_n<S, V>(head + half + i0, rb);
        }
    }
}

}  // namespace mwb::cuda::rope_swiglu
