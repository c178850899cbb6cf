// SwiGLU and rotary position embedding on CUDA: checked entries and launchers for the kernels of
// rope_swiglu_kernels.cuh. Tensors are F32 (bf16 runs hold bf16 values in them, as every elementwise
// op here); rows whose widths are multiples of 4 floats on 16-byte aligned pointers move as 128-bit
// accesses, any other shape one float at a time. No reductions: results do not depend on the launch.
#include "cuda_ops.h"
#include "rope_swiglu_kernels.cuh"
#include "runtime.h"

namespace mwb::cuda {

namespace {

using namespace rope_swiglu;

using kernel::aligned16;
using kernel::narrow;

template <int V>
void swiglu_forward_launch(float* out, const float* x, int64_t rows, int64_t F, cudaStream_t s) {
    const int64_t n = rows * F / V;
    if (narrow(n))
        k_swiglu_fwd<V, uint32_t><<<blocks_for(n), kElementwiseThreads, 0, s>>>(out, x, rows, F);
    else
        k_swiglu_fwd<V, int64_t><<<blocks_for(n), kElementwiseThreads, 0, s>>>(out, x, rows, F);
}

template <int V>
void swiglu_backward_launch(float* dx, const float* dout, const float* x, int64_t rows, int64_t F, cudaStream_t s) {
    const int64_t n = rows * F / V;
    if (narrow(n))
        k_swiglu_bwd<V, uint32_t><<<blocks_for(n), kElementwiseThreads, 0, s>>>(dx, dout, x, rows, F);
    else
        k_swiglu_bwd<V, int64_t><<<blocks_for(n), kElementwiseThreads, 0, s>>>(dx, dout, x, rows, F);
}

template <int V, bool Interleaved>
void rope_kernel_launch(float* qkv, const float* cos_t, const float* sin_t, const RopeGeometry& g, cudaStream_t s) {
    const int64_t n = g.S * g.B * (g.A + g.G) * (g.R / 2) / V;
    if (narrow(n))
        k_rope<V, Interleaved, uint32_t><<<blocks_for(n), kElementwiseThreads, 0, s>>>(qkv, cos_t, sin_t, g);
    else
        k_rope<V, Interleaved, int64_t><<<blocks_for(n), kElementwiseThreads, 0, s>>>(qkv, cos_t, sin_t, g);
}

void rope_launch(float* qkv, const float* cos_t, const float* sin_t, const RopeGeometry& g, bool interleaved,
                 cudaStream_t s) {
    const bool wide = (g.R / 2) % 4 == 0 && g.D % 4 == 0 && aligned16(qkv) && aligned16(cos_t) && aligned16(sin_t);
    if (wide && interleaved)
        rope_kernel_launch<4, true>(qkv, cos_t, sin_t, g, s);
    else if (wide)
        rope_kernel_launch<4, false>(qkv, cos_t, sin_t, g, s);
    else if (interleaved)
        rope_kernel_launch<1, true>(qkv, cos_t, sin_t, g, s);
    else
        rope_kernel_launch<1, false>(qkv, cos_t, sin_t, g, s);
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
    rope_launch(static_cast<float*>(qkv.data), static_cast<const float*>(cos_t.data),
                static_cast<const float*>(sin_t.data), g, interleaved, stream_of(ctx));
    check_launch(op);
}

}  // namespace

void swiglu_forward(OpContext& ctx, TensorView out, TensorView x) {
    const int64_t F = x.cols() / 2;  // x (N, 2F) = [gate | up] per row
    if (out.numel() == 0) return;
    float* o = static_cast<float*>(out.data);
    const float* in = static_cast<const float*>(x.data);
    if (F % 4 == 0 && aligned16(o) && aligned16(in))
        swiglu_forward_launch<4>(o, in, x.rows(), F, stream_of(ctx));
    else
        swiglu_forward_launch<1>(o, in, x.rows(), F, stream_of(ctx));
    check_launch("swiglu_forward");
}

void swiglu_backward(OpContext& ctx, TensorView dx, TensorView dout, TensorView x) {
    const int64_t F = x.cols() / 2;
    if (dout.numel() == 0) return;
    float* d = static_cast<float*>(dx.data);
    const float* g = static_cast<const float*>(dout.data);
    const float* in = static_cast<const float*>(x.data);
    if (F % 4 == 0 && aligned16(d) && aligned16(g) && aligned16(in))
        swiglu_backward_launch<4>(d, g, in, x.rows(), F, stream_of(ctx));
    else
        swiglu_backward_launch<1>(d, g, in, x.rows(), F, stream_of(ctx));
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
