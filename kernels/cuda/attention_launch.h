#pragma once
// The own attention kernels' launches (attention_launch.cuh), declared for ops_attention.cu and
// instantiated in ops_attention_{f32,bf16,f16}.cu.
#include "attention_kernels.cuh"

namespace mwb::cuda::attention {

template <class T, class E>
void launch_forward(const OpContext& ctx, T* out, float* lse, const T* qkv, const Geometry& g);
template <class T, class E>
void launch_backward(const OpContext& ctx, T* dqkv, float* delta, const T* dout, const T* qkv, const float* lse,
                     const Geometry& g);

}  // namespace mwb::cuda::attention
