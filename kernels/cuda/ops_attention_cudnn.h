#pragma once
// The cuDNN path of attention_forward/backward (ops_attention_cudnn.cu), tried first when
// AttentionParams::backend is Cudnn; false when it does not run this call (the own kernels do).
#include "attention_kernels.cuh"

namespace mwb::cuda {

/// Floats of `probs` with cuDNN: the B·A·S log-sum-exps, padded to 256 bytes, then the bf16 output
/// cuDNN's backward reads (cuDNN wants 16-byte aligned tensors).
int64_t cudnn_saved_elements(const AttentionParams& p, int64_t seq_len);

bool cudnn_attention_forward(const OpContext& ctx, float* out, float* saved, const float* qkv,
                             const attention::Geometry& g, const AttentionParams& p);
bool cudnn_attention_backward(const OpContext& ctx, float* dqkv, const float* dout, const float* qkv,
                              const float* saved, const attention::Geometry& g, const AttentionParams& p);

}  // namespace mwb::cuda
