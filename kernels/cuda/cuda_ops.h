#pragma once
// CUDA implementations of the ops in mwb/kernels/ops.h (same signatures; see there for the contracts).
// Tensors live in device memory (TensorView::device == CUDA); ctx.stream is the cudaStream_t.
// Elementwise ops take F32; GEMMs also take BF16 inputs (fp32 accumulation); copy converts
// F32 <-> BF16. Every reduction runs in a fixed order with no atomics: results are bit-identical
// run to run.
#include "mwb/kernels/ops.h"

namespace mwb::cuda {

void fill(OpContext& ctx, TensorView x, float value);
void copy(OpContext& ctx, TensorView dst, TensorView src);
void scale(OpContext& ctx, TensorView x, float alpha);
void add(OpContext& ctx, TensorView out, TensorView a, TensorView b);
void round_to(OpContext& ctx, TensorView x, DType dtype);
double sum_squares(OpContext& ctx, TensorView x);

void matmul(OpContext& ctx, TensorView c, TensorView a, TensorView b, bool trans_a, bool trans_b, float alpha,
            float beta);
void linear_forward(OpContext& ctx, TensorView y, TensorView x, TensorView w, TensorView bias);
void linear_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dbias, TensorView dy, TensorView x,
                     TensorView w, bool accumulate_dx);

void embedding_forward(OpContext& ctx, TensorView out, TensorView ids, TensorView table, int64_t vocab_start);
void embedding_backward(OpContext& ctx, TensorView dtable, TensorView dout, TensorView ids, int64_t vocab_start);
void position_embedding_forward(OpContext& ctx, TensorView out, TensorView wpe, int64_t position_offset);
void position_embedding_backward(OpContext& ctx, TensorView dwpe, TensorView dout, int64_t position_offset);

void layernorm_forward(OpContext& ctx, TensorView out, TensorView mean, TensorView rstd, TensorView x, TensorView w,
                       TensorView b, float eps);
void layernorm_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView db, TensorView dout, TensorView x,
                        TensorView mean, TensorView rstd, TensorView w, bool accumulate_dx);
void rmsnorm_forward(OpContext& ctx, TensorView out, TensorView rstd, TensorView x, TensorView w, float eps);
void rmsnorm_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dout, TensorView x, TensorView rstd,
                      TensorView w, bool accumulate_dx);

void gelu_forward(OpContext& ctx, TensorView out, TensorView x);
void gelu_backward(OpContext& ctx, TensorView dx, TensorView dout, TensorView x);
void swiglu_forward(OpContext& ctx, TensorView out, TensorView x);
void swiglu_backward(OpContext& ctx, TensorView dx, TensorView dout, TensorView x);
void rope_forward(OpContext& ctx, TensorView qkv, TensorView cos, TensorView sin, const AttentionParams& p,
                  int rotary_dim, bool interleaved, int64_t position_offset);
void rope_backward(OpContext& ctx, TensorView dqkv, TensorView cos, TensorView sin, const AttentionParams& p,
                   int rotary_dim, bool interleaved, int64_t position_offset);

void dropout_forward(OpContext& ctx, TensorView out, TensorView x, float p, RngStream rng, int64_t element_offset);
void dropout_backward(OpContext& ctx, TensorView dx, TensorView dout, float p, RngStream rng, int64_t element_offset);
void dropout_add_forward(OpContext& ctx, TensorView out, TensorView residual, TensorView x, float p, RngStream rng,
                         int64_t element_offset);
void bias_dropout_add_forward(OpContext& ctx, TensorView out, TensorView residual, TensorView x, TensorView bias,
                              float p, RngStream rng, int64_t element_offset);

/// B·A·S floats: the row deltas (dO·O) backward computes.
int64_t attention_workspace_bytes(const AttentionParams& p, int64_t seq_len);
/// B·A·S: the log-sum-exp of every score row (`probs` holds these on CUDA).
int64_t attention_saved_elements(const AttentionParams& p, int64_t seq_len);
void attention_forward(OpContext& ctx, TensorView out, TensorView probs, TensorView qkv, TensorView workspace,
                       const AttentionParams& p);
void attention_backward(OpContext& ctx, TensorView dqkv, TensorView dout, TensorView qkv, TensorView probs,
                        TensorView workspace, const AttentionParams& p);
void cached_attention_forward(OpContext& ctx, TensorView out, TensorView k_cache, TensorView v_cache, TensorView qkv,
                              TensorView rows, TensorView positions, const AttentionParams& p);

void cross_entropy_partials(OpContext& ctx, TensorView row_max, TensorView row_sumexp, TensorView target_logit,
                            TensorView logits, TensorView targets, int64_t vocab_start);
void cross_entropy_backward(OpContext& ctx, TensorView logits, TensorView targets, TensorView lse,
                            TensorView row_scale, int64_t vocab_start);

void adamw_update(OpContext& ctx, TensorView param, TensorView grad, TensorView exp_avg, TensorView exp_avg_sq,
                  const AdamWParams& p, TensorView param_copy, DType copy_dtype);

}  // namespace mwb::cuda
