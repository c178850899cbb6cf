#pragma once
// The op interface of Megatron Workbench: every tensor operation the model needs, one signature per
// op, dispatched on the context's device to the CPU implementation (kernels/cpu, OpenBLAS + OpenMP)
// or the CUDA one (kernels/cuda). Ops know nothing about models, ranks or sockets.
//
// Conventions
//   - Activations are row-major matrices of N = S·B rows (sequence-major, as Megatron-LM: row n is
//     position n / B of sequence n % B) and H columns. Shapes in comments use
//     B = micro batch, S = sequence, H = hidden (local shard), A = heads (local), D = head dim,
//     V = vocabulary (local shard), N = S·B rows.
//   - Linear weights are (out, in) as in PyTorch/Megatron: y = x·Wᵀ + b.
//   - Parameter gradients are always accumulated (+=), activation gradients overwrite unless an op
//     says otherwise.
//   - Dropout masks are regenerated from (RngStream, global element index) and never stored; ops
//     that shard a tensor take the offset of their shard so masks match the unsharded tensor.
//   - Reductions are done in a fixed order, so results do not depend on the number of threads.
#include "mwb/kernels/philox.h"
#include "mwb/kernels/tensor.h"

#include <cstdint>

namespace mwb {

/// Where and how ops run. On the CPU the stream is unused; on CUDA it is the cudaStream_t.
struct OpContext {
    Device device = Device::CPU;
    void* stream = nullptr;
    /// CUDA only: BF16 makes matmul/linear round their f32 inputs to bf16 and run on bf16 tensor cores
    /// (fp32 accumulation). Lossless when the inputs are already bf16 values, as in bf16-storage runs.
    /// The CPU ignores it.
    DType gemm_inputs = DType::F32;
};

/// Shapes and randomness of the attention core of one layer on one rank.
struct AttentionParams {
    int num_heads = 1;         ///< A: query heads held by this rank
    /// G: key/value heads held by this rank, each shared by A/G query heads (grouped-query attention;
    /// G = 1 is multi-query attention). 0 means G = A (multi-head attention).
    int num_query_groups = 0;
    int head_offset = 0;       ///< global index of this rank's first head (for dropout masks)
    int total_heads = 1;       ///< heads of the whole layer
    int batch = 1;             ///< B
    float softmax_scale = 1;   ///< usually 1/sqrt(D)
    float dropout_p = 0;       ///< attention dropout on the probabilities
    RngStream rng;

    int groups() const { return num_query_groups > 0 ? num_query_groups : num_heads; }
    /// Columns of one qkv row per head dim: G groups of [A/G query heads | k | v].
    int qkv_heads() const { return num_heads + 2 * groups(); }
};

/// One AdamW step's hyper-parameters.
struct AdamWParams {
    float lr = 0;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float eps = 1e-8f;
    float weight_decay = 0;
    int64_t step = 1;        ///< 1-based step count for bias correction
    float grad_scale = 1;    ///< grads are multiplied by this first (loss-scale undo × clip coefficient)
};

namespace ops {

// ---- threads (CPU) --------------------------------------------------------------------------------
/// Sets the number of CPU threads used by every op (OpenMP and OpenBLAS share one pool).
void set_num_threads(int n);
int num_threads();

// ---- elementwise and reductions -------------------------------------------------------------------
void fill(OpContext& ctx, TensorView x, float value);
void copy(OpContext& ctx, TensorView dst, TensorView src);
/// x *= alpha
void scale(OpContext& ctx, TensorView x, float alpha);
/// out = a + b (out may alias a or b)
void add(OpContext& ctx, TensorView out, TensorView a, TensorView b);
/// Rounds x in place to what a `dtype` store keeps (no-op for F32). Emulates 16-bit storage on the CPU.
void round_to(OpContext& ctx, TensorView x, DType dtype);
/// Σ x² accumulated in float64 over fixed-size chunks in a fixed order (NaN/Inf propagate).
double sum_squares(OpContext& ctx, TensorView x);

// ---- GEMM ------------------------------------------------------------------------------------------
/// C = alpha·op(A)·op(B) + beta·C for 2-D row-major views; op(X) = Xᵀ when trans_X.
void matmul(OpContext& ctx, TensorView c, TensorView a, TensorView b, bool trans_a, bool trans_b,
            float alpha = 1.0f, float beta = 0.0f);

// ---- linear layer ------------------------------------------------------------------------------------
/// y (N, out) = x (N, in) · wᵀ (in, out) + bias (out); bias may be empty.
void linear_forward(OpContext& ctx, TensorView y, TensorView x, TensorView w, TensorView bias);
/// dx (N, in) = dy·w (skipped when dx is empty; added to dx when accumulate_dx),
/// dw (out, in) += dyᵀ·x, dbias (out) += Σ_rows dy (skipped when empty).
void linear_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dbias, TensorView dy,
                     TensorView x, TensorView w, bool accumulate_dx = false);

// ---- embeddings --------------------------------------------------------------------------------------
/// out (N, H) = table[ids[n] - vocab_start] for ids inside this shard [vocab_start, vocab_start + V),
/// zero rows for ids outside it (vocab-parallel embedding; the tensor group then sums the shards).
void embedding_forward(OpContext& ctx, TensorView out, TensorView ids, TensorView table, int64_t vocab_start);
/// dtable (V, H) += scatter of dout rows by ids (ids outside the shard are skipped).
void embedding_backward(OpContext& ctx, TensorView dtable, TensorView dout, TensorView ids, int64_t vocab_start);
/// out (S, B, H) += wpe[s + position_offset] for every b.
void position_embedding_forward(OpContext& ctx, TensorView out, TensorView wpe, int64_t position_offset);
/// dwpe[s + position_offset] += Σ_b dout[s, b].
void position_embedding_backward(OpContext& ctx, TensorView dwpe, TensorView dout, int64_t position_offset);

// ---- normalisation -----------------------------------------------------------------------------------
/// out = (x - mean)·rstd·w + b per row; mean and rstd (N) are saved for backward.
void layernorm_forward(OpContext& ctx, TensorView out, TensorView mean, TensorView rstd, TensorView x,
                       TensorView w, TensorView b, float eps);
/// dx (=, or += when accumulate_dx), dw += Σ dout·x̂, db += Σ dout.
void layernorm_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView db, TensorView dout,
                        TensorView x, TensorView mean, TensorView rstd, TensorView w, bool accumulate_dx);
/// out = x·rstd·w with rstd = 1/sqrt(mean(x²) + eps) (N) saved for backward.
void rmsnorm_forward(OpContext& ctx, TensorView out, TensorView rstd, TensorView x, TensorView w, float eps);
void rmsnorm_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dout, TensorView x,
                      TensorView rstd, TensorView w, bool accumulate_dx);

// ---- activation ---------------------------------------------------------------------------------------
/// GELU, tanh approximation as GPT-2: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
void gelu_forward(OpContext& ctx, TensorView out, TensorView x);
/// dx = dout·gelu'(x); dx may alias dout.
void gelu_backward(OpContext& ctx, TensorView dx, TensorView dout, TensorView x);
/// SwiGLU (Shazeer 2020, as Megatron-LM's --swiglu): x (N, 2F) holds per row [gate | up] (each rank's
/// fc1 shard holds its own gate and up halves); out (N, F) = silu(gate)·up, silu(g) = g·sigmoid(g).
void swiglu_forward(OpContext& ctx, TensorView out, TensorView x);
/// dx (N, 2F) = [dout·up·silu'(gate) | dout·silu(gate)] from dout (N, F) and the forward's x.
void swiglu_backward(OpContext& ctx, TensorView dx, TensorView dout, TensorView x);

// ---- rotary position embedding -----------------------------------------------------------------------
/// Rotates, in place, the first `rotary_dim` (R, even, <= D) dims of every query and key head of
/// qkv (S, B, G·(A/G + 2)·D) — the layout attention_forward reads; value heads are untouched. The
/// token at sequence index s uses row s + position_offset of cos and sin (P, R/2), whose column i
/// holds the angle of frequency i. Pairs: rotate-half (i, i + R/2) as GPT-NeoX/Llama by default,
/// (2i, 2i + 1) as GPT-J when `interleaved`:  (a, b) -> (a·cos − b·sin, b·cos + a·sin).
void rope_forward(OpContext& ctx, TensorView qkv, TensorView cos, TensorView sin, const AttentionParams& p,
                  int rotary_dim, bool interleaved, int64_t position_offset);
/// The backward of rope_forward on the gradient dqkv, in place (the transposed rotation).
void rope_backward(OpContext& ctx, TensorView dqkv, TensorView cos, TensorView sin, const AttentionParams& p,
                   int rotary_dim, bool interleaved, int64_t position_offset);

// ---- dropout and residual ----------------------------------------------------------------------------
/// out = x·mask/(1-p) where mask[i] = keep(rng, element_offset + i); out may alias x.
void dropout_forward(OpContext& ctx, TensorView out, TensorView x, float p, RngStream rng, int64_t element_offset);
/// dx = dout·mask/(1-p), the same mask as forward; dx may alias dout.
void dropout_backward(OpContext& ctx, TensorView dx, TensorView dout, float p, RngStream rng, int64_t element_offset);
/// out = residual + dropout(x): the residual connection after attention and MLP (out may alias either).
void dropout_add_forward(OpContext& ctx, TensorView out, TensorView residual, TensorView x, float p,
                         RngStream rng, int64_t element_offset);
/// out (N, H) = residual + dropout(x + bias): the row-parallel linear's bias, added after the
/// tensor-parallel reduction, fused with dropout and the residual (Megatron's bias_dropout_add).
void bias_dropout_add_forward(OpContext& ctx, TensorView out, TensorView residual, TensorView x, TensorView bias,
                              float p, RngStream rng, int64_t element_offset);

// ---- attention ------------------------------------------------------------------------------------------

/// Bytes of scratch the CPU attention needs (per-thread S×S tiles); pass a workspace at least this big.
int64_t attention_workspace_bytes(const AttentionParams& p, int64_t seq_len, int threads);
/// The same for `device`: on CUDA the workspace holds one float per query row (B·A·S), for backward.
int64_t attention_workspace_bytes(Device device, const AttentionParams& p, int64_t seq_len, int threads);
/// Elements of the `probs` tensor that forward saves for backward: on the CPU the probabilities
/// (B, A, S, S); on CUDA, flash-attention style, only each row's log-sum-exp (B, A, S) — the S×S
/// matrix is never stored in device memory and backward recomputes it tile by tile.
int64_t attention_saved_elements(Device device, const AttentionParams& p, int64_t seq_len);
/// Causal self-attention core. qkv (S, B, G·(A/G + 2)·D) holds per key/value group g the group's
/// A/G query heads, then its key and its value head: [q_g0 … q_g(A/G−1) | k_g | v_g] (Megatron's
/// layout; with G = A this is [q | k | v] per head). Query head j reads group j / (A/G); K and V are
/// read once per group, never expanded. probs (B, A, S, S) receives softmax(mask(q·kᵀ·scale)) (kept
/// for backward, or recomputed); out (S, B, A·D) = dropout(probs)·v.
void attention_forward(OpContext& ctx, TensorView out, TensorView probs, TensorView qkv, TensorView workspace,
                       const AttentionParams& p);
/// dqkv (S, B, G·(A/G + 2)·D) from dout (S, B, A·D), the forward's qkv and probs; dk and dv of a
/// group sum over its query heads.
void attention_backward(OpContext& ctx, TensorView dqkv, TensorView dout, TensorView qkv, TensorView probs,
                        TensorView workspace, const AttentionParams& p);
/// Generation's attention over a key/value cache. qkv (n, G·(A/G + 2)·D): the projections of n new
/// tokens in attention_forward's layout (RoPE applied); token i sits in cache row rows[i] at position
/// positions[i] (I32 (n) each, distinct (row, position) pairs). First writes each token's k and v into
/// k_cache and v_cache (R, G, L, D) at [rows[i]][g][positions[i]], then out (n, A·D) = softmax(q·kᵀ·
/// p.softmax_scale)·v of each query head over its group's cache row, positions [0, positions[i]]: the
/// caller has filled the row's earlier positions (before this call or as this call's earlier tokens).
/// No dropout; p.batch is not read.
void cached_attention_forward(OpContext& ctx, TensorView out, TensorView k_cache, TensorView v_cache, TensorView qkv,
                              TensorView rows, TensorView positions, const AttentionParams& p);

// ---- softmax + cross-entropy over a (vocab-parallel) vocabulary ---------------------------------------
/// Per row n of logits (N, V): row_max, Σ exp(logit - row_max), and the target's logit when the
/// target falls in this shard [vocab_start, vocab_start + V) (else 0). Shards combine these with
/// log-sum-exp arithmetic, so logits are never gathered.
void cross_entropy_partials(OpContext& ctx, TensorView row_max, TensorView row_sumexp, TensorView target_logit,
                            TensorView logits, TensorView targets, int64_t vocab_start);
/// In place: logits (N, V) become dlogits = (softmax - onehot(target))·row_scale[n], where
/// softmax = exp(logit - lse[n]) over the whole (all shards') vocabulary.
void cross_entropy_backward(OpContext& ctx, TensorView logits, TensorView targets, TensorView lse,
                            TensorView row_scale, int64_t vocab_start);

// ---- optimizer ------------------------------------------------------------------------------------------

/// AdamW (decoupled weight decay, as torch.optim.AdamW) on fp32 master weights `param`.
/// When `param_copy` is given it receives param rounded to `copy_dtype` (the model's 16-bit weights).
void adamw_update(OpContext& ctx, TensorView param, TensorView grad, TensorView exp_avg, TensorView exp_avg_sq,
                  const AdamWParams& p, TensorView param_copy = {}, DType copy_dtype = DType::F32);

}  // namespace ops
}  // namespace mwb
