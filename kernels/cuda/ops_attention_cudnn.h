#pragma once
// The cuDNN path of attention_forward/backward (ops_attention_cudnn.cu), tried first when
// AttentionParams::backend is Cudnn; false when it does not run this call (the own kernels do).
// `probs` holds only the log-sum-exps (as for the own kernels): the backward reads O from `out`.
#include "attention_kernels.cuh"

namespace mwb::cuda {

bool cudnn_attention_forward(OpContext& ctx, const TensorView& out, float* lse, const TensorView& qkv,
                             const attention::Geometry& g, const AttentionParams& p);
bool cudnn_attention_backward(OpContext& ctx, const TensorView& dqkv, const TensorView& dout,
                              const TensorView& qkv, const TensorView& out, const float* lse,
                              const attention::Geometry& g, const AttentionParams& p);

}  // namespace mwb::cuda
