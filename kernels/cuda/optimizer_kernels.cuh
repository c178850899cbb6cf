#pragma once
// AdamW's kernel of ops_elementwise.cu (contract: adamw_update in ops.inc): one grid-stride pass over
// the fp32 master weights and both moments, the gradients (f32, bf16 or f16: storage SG) and the
// weights' working copy (f32, bf16 or f16: storage SC), each thread moving V elements per array in
// 16-byte accesses (storage.cuh's load_n/store_n: 4 floats or 8 16-bit values per access; the
// launcher runs the 16-byte aligned bulk with V = 4, or 8 when a 16-bit array is involved, and the
// tail with V = 1). The step's constants come from the step's parameter block in device memory when
// given (so a captured step replays with the next step's values), else from the launch's arguments.
// Elementwise: the bits do not depend on V. Plain CUDA C++ without runtime calls, so
// test_kernels_optimizer_emulated runs this source on CPU threads. A 16-bit copy is rounded by its
// store (the bit twins of precision.h); an f32 copy holding 16-bit values by the launcher's functor.
#include "kernel_common.cuh"
#include "storage.cuh"

#include "mwb/kernels/ops.h"

#include <cmath>
#include <cstdint>

namespace mwb::cuda::optimizer {

using kernel::first_index;
using kernel::Floats;
using kernel::grid_stride;
using storage::load_n;
using storage::store_n;

/// The constants of one launch (AdamWConstants and the hyper-parameters).
struct AdamArgs {
    float b1, b2, step_size, inv_sqrt_bc2, decay, gs, eps;
    bool zero_grad;
};

/// n (a multiple of V) elements from w, g, m, v (and copy, when not null, receiving round(w) stored as
/// SC). g is read in storage SG and, with zero_grad, receives zeros of that storage.
/// scale: gradient_scale's [multiplier, found_inf] (nothing is written when found_inf is set); step:
/// the step's block (step_params), whose decay applies when `decays`.
template <int V, class I, class SG, class SC, class Round>
__global__ void k_adamw(float* w, typename SG::type* g, float* m, float* v, typename SC::type* copy, int64_t n,
                        AdamArgs a, const float* scale, const double* step, bool decays, Round round) {
    using F32 = storage::F32;
    if (scale && scale[1] != 0.0f) return;
    if (step) {
        a.step_size = static_cast<float>(step[step_params::StepSize]);
        a.inv_sqrt_bc2 = static_cast<float>(step[step_params::InvSqrtBc2]);
        a.decay = decays ? static_cast<float>(step[step_params::Decay]) : 1.0f;
    }
    const float gs = scale ? a.gs * scale[0] : a.gs;
    const I count = static_cast<I>(n / V);
    for (I t = first_index<I>(); t < count; t += grid_stride<I>()) {
        const int64_t i = static_cast<int64_t>(t) * V;
        Floats<V> wv = load_n<F32, V>(w + i), mv = load_n<F32, V>(m + i), vv = load_n<F32, V>(v + i), cv;
        const Floats<V> gv = load_n<SG, V>(g + i);
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const float gi = gv.v[k] * gs;
            const float mi = a.b1 * mv.v[k] + (1.0f - a.b1) * gi;
            const float vi = a.b2 * vv.v[k] + (1.0f - a.b2) * gi * gi;
            mv.v[k] = mi;
            vv.v[k] = vi;
            wv.v[k] = wv.v[k] * a.decay - a.step_size * mi / (sqrtf(vi) * a.inv_sqrt_bc2 + a.eps);
            cv.v[k] = round(wv.v[k]);
        }
        store_n<F32, V>(m + i, mv);
        store_n<F32, V>(v + i, vv);
        store_n<F32, V>(w + i, wv);
        if (copy) store_n<SC, V>(copy + i, cv);
        if (a.zero_grad) store_n<SG, V>(g + i, Floats<V>{});
    }
}

}  // namespace mwb::cuda::optimizer
