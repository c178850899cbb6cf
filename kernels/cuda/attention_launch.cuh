#pragma once
// The launches of the own attention kernels for one storage element T and tensor-core input E (E =
// int: the fp32 CUDA-core kernels only), instantiated per storage dtype in ops_attention_{f32,bf16,f16}.cu
// so that each translation unit compiles a third of the kernels (the fallback build on the device
// machine compiles them in parallel, time-boxed). ops_attention.cu picks T and E (with_elements).
#include "attention_kernels.cuh"
#include "attention_tc_kernels.cuh"
#include "runtime.h"

#include <type_traits>

namespace mwb::cuda::attention {

/// Blocks of `rows` positions per (sequence, query head): forward and dq; per (sequence, key/value
/// group) with `per_group`: dk/dv.
inline dim3 grid_of(const Geometry& g, int rows, bool per_group = false) {
    return dim3(static_cast<unsigned>((g.S + rows - 1) / rows), static_cast<unsigned>(g.B * (per_group ? g.G : g.A)));
}

/// The opt-in shared memory a block may use on this device.
inline int max_block_smem() {
    static const int bytes = [] {
        int device = 0, value = 0;
        MWB_CUDA_CHECK(cudaGetDevice(&device));
        MWB_CUDA_CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        return value;
    }();
    return bytes;
}

/// Tensor cores when the inputs are 16-bit values and the forward's and backward's tiles fit in
/// shared memory (130 KiB at most: every sm_80/sm_90 part).
template <int D, class E>
bool use_tensor_cores() {
    return !std::is_same_v<E, int> && tc_fits<D>(max_block_smem());
}

/// Lets `kernel` use `bytes` of dynamic shared memory (above the default 48 KiB), once per kernel.
template <class Kernel>
void allow_smem(Kernel kernel, int bytes) {
    MWB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <int D, class T, class E>
void forward_d(const OpContext& ctx, T* out, float* lse, const T* qkv, const Geometry& g) {
    const cudaStream_t s = stream_of(ctx);
    if constexpr (!std::is_same_v<E, int>) {
        if (use_tensor_cores<D, E>()) {
            constexpr int bytes = TcForwardSmem<D>::bytes;
            static const bool allowed = (allow_smem(k_attn_fwd_tc<D, T, E>, bytes), true);
            (void)allowed;
            k_attn_fwd_tc<D, T, E><<<grid_of(g, kTcRows), kTcThreads, bytes, s>>>(out, lse, qkv, g);
            return;
        }
    }
    k_attn_fwd<D, T><<<grid_of(g, kRows), kRows, 0, s>>>(out, lse, qkv, g);
}

template <int D, class T, class E>
void backward_d(const OpContext& ctx, T* dqkv, float* delta, const T* dout, const T* qkv, const float* lse,
                const Geometry& g) {
    const cudaStream_t s = stream_of(ctx);
    if constexpr (!std::is_same_v<E, int>) {
        if (use_tensor_cores<D, E>()) {
            constexpr int bytes = TcBackwardSmem<D>::bytes;
            static const bool allowed =
                (allow_smem(k_attn_bwd_dq_tc<D, T, E>, bytes), allow_smem(k_attn_bwd_dkv_tc<D, T, E>, bytes), true);
            (void)allowed;
            k_attn_bwd_dq_tc<D, T, E><<<grid_of(g, kTcRows), kTcThreads, bytes, s>>>(dqkv, delta, dout, qkv, lse, g);
            k_attn_bwd_dkv_tc<D, T, E><<<grid_of(g, kTcRows, true), kTcThreads, bytes, s>>>(dqkv, delta, dout, qkv,
                                                                                             lse, g);
            return;
        }
    }
    k_attn_bwd_dq<D, T><<<grid_of(g, kRows), kRows, 0, s>>>(dqkv, delta, dout, qkv, lse, g);
    k_attn_bwd_dkv<D, T><<<grid_of(g, kRows, true), kRows, 0, s>>>(dqkv, delta, dout, qkv, lse, g);
}

/// f(std::integral_constant<int, D>{}) for the head dim D (geometry() checked it has kernels).
template <class F>
void with_head_dim(int64_t D, F&& f) {
    switch (D) {
    case 16: f(std::integral_constant<int, 16>{}); break;
    case 32: f(std::integral_constant<int, 32>{}); break;
    case 64: f(std::integral_constant<int, 64>{}); break;
    case 80: f(std::integral_constant<int, 80>{}); break;
    case 96: f(std::integral_constant<int, 96>{}); break;
    case 128: f(std::integral_constant<int, 128>{}); break;
    default: f(std::integral_constant<int, 160>{}); break;
    }
}

/// The forward of one call: out and the row log-sum-exps from qkv (T storage; E: see the top).
template <class T, class E>
void launch_forward(const OpContext& ctx, T* out, float* lse, const T* qkv, const Geometry& g) {
    with_head_dim(g.D, [&](auto d) { forward_d<decltype(d)::value, T, E>(ctx, out, lse, qkv, g); });
}

/// The backward of one call: dqkv (and the row deltas in `delta`) from dout, qkv and the log-sum-exps.
template <class T, class E>
void launch_backward(const OpContext& ctx, T* dqkv, float* delta, const T* dout, const T* qkv, const float* lse,
                     const Geometry& g) {
    with_head_dim(g.D, [&](auto d) { backward_d<decltype(d)::value, T, E>(ctx, dqkv, delta, dout, qkv, lse, g); });
}

/// The instantiations one storage dtype's translation unit holds.
#define MWB_ATTENTION_LAUNCHES(T, E)                                                                         \
    template void launch_forward<T, E>(const OpContext&, T*, float*, const T*, const Geometry&);            \
    template void launch_backward<T, E>(const OpContext&, T*, float*, const T*, const T*, const float*,     \
                                        const Geometry&);

}  // namespace mwb::cuda::attention
