// SwiGLU and rotary position embedding on CUDA: checked entries and launchers for the kernels of
// rope_swiglu_kernels.cuh, templated on each tensor's storage (f32, bf16, f16; RoPE's tables f32).
// Rows whose widths are multiples of 8 (with a 16-bit tensor) or 4 elements on pointers aligned to
// that many elements move in 16-byte accesses (8 bytes for 4 16-bit elements), any other shape one
// element at a time. No reductions: results do not depend on the launch.
#include "cuda_ops.h"
#include "rope_swiglu_kernels.cuh"
#include "runtime.h"

#include <numeric>

namespace mwb::cuda {

namespace {

using namespace rope_swiglu;

using kernel::narrow;
using storage::elements;

/// Runs launch(integral_constant<int, V>) with the widest V (8, 4 or 1 elements per thread and tensor)
/// that `width` (every row's and offset's multiple) and every pointer's alignment allow; V = 8 only
/// with a 16-bit tensor (whose accesses it widens to 16 bytes).
template <bool Has16Bit, class L, class... P>
void with_vector(int64_t width, L&& launch, const P*... p) {
    const auto fits = [&](int v) { return width % v == 0 && ((reinterpret_cast<uintptr_t>(p) % (v * sizeof(P)) == 0) && ...); };
    if constexpr (Has16Bit) {
        if (fits(8)) return launch(std::integral_constant<int, 8>{});
    }
    if (fits(4)) return launch(std::integral_constant<int, 4>{});
    launch(std::integral_constant<int, 1>{});
}

/// The 32-bit index kernel when the items fit, else the 64-bit one: run(tag of I).
template <class L>
void with_index(int64_t items, L&& run) {
    if (narrow(items))
        run(uint32_t{});
    else
        run(int64_t{});
}

void run_rope(OpContext& ctx, const char* op, TensorView qkv, TensorView cos_t, TensorView sin_t,
              const AttentionParams& p, int rotary_dim, bool interleaved, int64_t position_offset, float sign) {
    const int64_t heads = p.qkv_heads();  // the dispatcher checked qkv against p
    RopeGeometry g{};
    g.S = qkv.dim(0);
    g.B = qkv.dim(1);
    g.A = p.num_heads;
    g.G = p.groups();
    g.D = qkv.dim(2) / heads;
    g.R = rotary_dim;
    g.position_offset = position_offset;
    g.sign = sign;
    if (qkv.numel() == 0) return;
    const auto* cos_p = static_cast<const float*>(cos_t.data);
    const auto* sin_p = static_cast<const float*>(sin_t.data);
    storage::with_storage(qkv.dtype, [&](auto sq) {
        using S = decltype(sq);
        auto* q = elements<S>(qkv);
        // Rows of the tables advance by R/2 and heads by D: V must divide both.
        const int64_t width = std::gcd(g.R / 2, g.D);
        with_vector<storage::any_16bit<S>>(
            width,
            [&](auto vector) {
                constexpr int V = decltype(vector)::value;
                const int64_t n = g.S * g.B * (g.A + g.G) * (g.R / 2) / V;
                with_index(n, [&](auto index) {
                    using I = decltype(index);
                    if (interleaved)
                        k_rope<V, true, I, S><<<blocks_for(n), kElementwiseThreads, 0, stream_of(ctx)>>>(q, cos_p, sin_p, g);
                    else
                        k_rope<V, false, I, S><<<blocks_for(n), kElementwiseThreads, 0, stream_of(ctx)>>>(q, cos_p, sin_p, g);
                });
            },
            q, cos_p, sin_p);
    });
    check_launch(op);
}

}  // namespace

void swiglu_forward(OpContext& ctx, TensorView out, TensorView x) {
    const int64_t F = x.cols() / 2;  // x (N, 2F) = [gate | up] per row
    if (out.numel() == 0) return;
    storage::with_storages(x.dtype, out.dtype, [&](auto sx, auto so) {
        using SX = decltype(sx);
        using SO = decltype(so);
        auto* o = elements<SO>(out);
        const auto* in = elements<SX>(x);
        with_vector<storage::any_16bit<SX, SO>>(
            F,
            [&](auto vector) {
                constexpr int V = decltype(vector)::value;
                const int64_t n = x.rows() * F / V;
                with_index(n, [&](auto index) {
                    k_swiglu_fwd<V, decltype(index), SX, SO>
                        <<<blocks_for(n), kElementwiseThreads, 0, stream_of(ctx)>>>(o, in, x.rows(), F);
                });
            },
            o, in);
    });
    check_launch("swiglu_forward");
}

void swiglu_backward(OpContext& ctx, TensorView dx, TensorView dout, TensorView x) {
    const int64_t F = x.cols() / 2;
    if (dout.numel() == 0) return;
    // dx and dout share a dtype (the checks): the gradient of fc1's output, stored like it.
    storage::with_storages(x.dtype, dx.dtype, [&](auto sx, auto sg) {
        using SX = decltype(sx);
        using SG = decltype(sg);
        auto* d = elements<SG>(dx);
        const auto* g = elements<SG>(dout);
        const auto* in = elements<SX>(x);
        with_vector<storage::any_16bit<SX, SG>>(
            F,
            [&](auto vector) {
                constexpr int V = decltype(vector)::value;
                const int64_t n = x.rows() * F / V;
                with_index(n, [&](auto index) {
                    k_swiglu_bwd<V, decltype(index), SX, SG>
                        <<<blocks_for(n), kElementwiseThreads, 0, stream_of(ctx)>>>(d, g, in, x.rows(), F);
                });
            },
            d, g, in);
    });
    check_launch("swiglu_backward");
}

void rope_forward(OpContext& ctx, TensorView qkv, TensorView cos, TensorView sin, const AttentionParams& p,
                  int rotary_dim, bool interleaved, int64_t position_offset) {
    run_rope(ctx, "rope_forward", qkv, cos, sin, p, rotary_dim, interleaved, position_offset, 1.0f);
}

void rope_backward(OpContext& ctx, TensorView dqkv, TensorView cos, TensorView sin, const AttentionParams& p,
                   int rotary_dim, bool interleaved, int64_t position_offset) {
    run_rope(ctx, "rope_backward", dqkv, cos, sin, p, rotary_dim, interleaved, position_offset, -1.0f);
}

}  // namespace mwb::cuda
