// Dispatch of every op to the implementation for the context's device.
#include "mwb/kernels/ops.h"

#include "../cpu/cpu_ops.h"
#include "mwb/kernels/error.h"

#if defined(MWB_WITH_CUDA)
#include "../cuda/cuda_ops.h"
#endif

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <utility>

namespace mwb::ops {

#if defined(MWB_WITH_CUDA)
// Each entry: the CPU implementation on CPU contexts, the CUDA one on CUDA contexts.
#define MWB_DISPATCH(op, ...)                                   \
    do {                                                        \
        if (ctx.device == Device::CPU) return cpu::op(__VA_ARGS__); \
        return cuda::op(__VA_ARGS__);                           \
    } while (0)
#else
namespace {
[[noreturn]] void no_cuda_kernel(const char* op) {
    MWB_FAIL("{}: no CUDA implementation in this build (use --device cpu)", op);
}
}  // namespace

#define MWB_DISPATCH(op, ...)                                   \
    do {                                                        \
        if (ctx.device == Device::CPU) return cpu::op(__VA_ARGS__); \
        no_cuda_kernel(#op);                                    \
    } while (0)
#endif

void set_num_threads(int n) {
    MWB_CHECK(n >= 1, "thread count must be >= 1, got {}", n);
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

void fill(OpContext& ctx, TensorView x, float value) { MWB_DISPATCH(fill, ctx, x, value); }
void copy(OpContext& ctx, TensorView dst, TensorView src) { MWB_DISPATCH(copy, ctx, dst, src); }
void scale(OpContext& ctx, TensorView x, float alpha) { MWB_DISPATCH(scale, ctx, x, alpha); }
void add(OpContext& ctx, TensorView out, TensorView a, TensorView b) { MWB_DISPATCH(add, ctx, out, a, b); }
void round_to(OpContext& ctx, TensorView x, DType dtype) { MWB_DISPATCH(round_to, ctx, x, dtype); }
double sum_squares(OpContext& ctx, TensorView x) { MWB_DISPATCH(sum_squares, ctx, x); }

void matmul(OpContext& ctx, TensorView c, TensorView a, TensorView b, bool trans_a, bool trans_b, float alpha,
            float beta) {
    MWB_DISPATCH(matmul, ctx, c, a, b, trans_a, trans_b, alpha, beta);
}
void linear_forward(OpContext& ctx, TensorView y, TensorView x, TensorView w, TensorView bias) {
    MWB_DISPATCH(linear_forward, ctx, y, x, w, bias);
}
void linear_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dbias, TensorView dy, TensorView x,
                     TensorView w, bool accumulate_dx) {
    MWB_DISPATCH(linear_backward, ctx, dx, dw, dbias, dy, x, w, accumulate_dx);
}

void embedding_forward(OpContext& ctx, TensorView out, TensorView ids, TensorView table, int64_t vocab_start) {
    MWB_DISPATCH(embedding_forward, ctx, out, ids, table, vocab_start);
}
void embedding_backward(OpContext& ctx, TensorView dtable, TensorView dout, TensorView ids, int64_t vocab_start) {
    MWB_DISPATCH(embedding_backward, ctx, dtable, dout, ids, vocab_start);
}
void position_embedding_forward(OpContext& ctx, TensorView out, TensorView wpe, int64_t position_offset) {
    MWB_DISPATCH(position_embedding_forward, ctx, out, wpe, position_offset);
}
void position_embedding_backward(OpContext& ctx, TensorView dwpe, TensorView dout, int64_t position_offset) {
    MWB_DISPATCH(position_embedding_backward, ctx, dwpe, dout, position_offset);
}

void layernorm_forward(OpContext& ctx, TensorView out, TensorView mean, TensorView rstd, TensorView x, TensorView w,
                       TensorView b, float eps) {
    MWB_DISPATCH(layernorm_forward, ctx, out, mean, rstd, x, w, b, eps);
}
void layernorm_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView db, TensorView dout, TensorView x,
                        TensorView mean, TensorView rstd, TensorView w, bool accumulate_dx) {
    MWB_DISPATCH(layernorm_backward, ctx, dx, dw, db, dout, x, mean, rstd, w, accumulate_dx);
}
void rmsnorm_forward(OpContext& ctx, TensorView out, TensorView rstd, TensorView x, TensorView w, float eps) {
    MWB_DISPATCH(rmsnorm_forward, ctx, out, rstd, x, w, eps);
}
void rmsnorm_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dout, TensorView x, TensorView rstd,
                      TensorView w, bool accumulate_dx) {
    MWB_DISPATCH(rmsnorm_backward, ctx, dx, dw, dout, x, rstd, w, accumulate_dx);
}

void gelu_forward(OpContext& ctx, TensorView out, TensorView x) { MWB_DISPATCH(gelu_forward, ctx, out, x); }
void gelu_backward(OpContext& ctx, TensorView dx, TensorView dout, TensorView x) {
    MWB_DISPATCH(gelu_backward, ctx, dx, dout, x);
}
void swiglu_forward(OpContext& ctx, TensorView out, TensorView x) { MWB_DISPATCH(swiglu_forward, ctx, out, x); }
void swiglu_backward(OpContext& ctx, TensorView dx, TensorView dout, TensorView x) {
    MWB_DISPATCH(swiglu_backward, ctx, dx, dout, x);
}
void rope_forward(OpContext& ctx, TensorView qkv, TensorView cos, TensorView sin, const AttentionParams& p,
                  int rotary_dim, bool interleaved, int64_t position_offset) {
    MWB_DISPATCH(rope_forward, ctx, qkv, cos, sin, p, rotary_dim, interleaved, position_offset);
}
void rope_backward(OpContext& ctx, TensorView dqkv, TensorView cos, TensorView sin, const AttentionParams& p,
                   int rotary_dim, bool interleaved, int64_t position_offset) {
    MWB_DISPATCH(rope_backward, ctx, dqkv, cos, sin, p, rotary_dim, interleaved, position_offset);
}

void dropout_forward(OpContext& ctx, TensorView out, TensorView x, float p, RngStream rng, int64_t element_offset) {
    MWB_DISPATCH(dropout_forward, ctx, out, x, p, rng, element_offset);
}
void dropout_backward(OpContext& ctx, TensorView dx, TensorView dout, float p, RngStream rng,
                      int64_t element_offset) {
    MWB_DISPATCH(dropout_backward, ctx, dx, dout, p, rng, element_offset);
}
void dropout_add_forward(OpContext& ctx, TensorView out, TensorView residual, TensorView x, float p, RngStream rng,
                         int64_t element_offset) {
    MWB_DISPATCH(dropout_add_forward, ctx, out, residual, x, p, rng, element_offset);
}

void bias_dropout_add_forward(OpContext& ctx, TensorView out, TensorView residual, TensorView x, TensorView bias,
                              float p, RngStream rng, int64_t element_offset) {
    MWB_DISPATCH(bias_dropout_add_forward, ctx, out, residual, x, bias, p, rng, element_offset);
}

int64_t attention_workspace_bytes(const AttentionParams& p, int64_t seq_len, int threads) {
    return cpu::attention_workspace_bytes(p, seq_len, threads);
}
int64_t attention_workspace_bytes(Device device, const AttentionParams& p, int64_t seq_len, int threads) {
#if defined(MWB_WITH_CUDA)
    if (device == Device::CUDA) return cuda::attention_workspace_bytes(p, seq_len);
#endif
    (void)device;
    return cpu::attention_workspace_bytes(p, seq_len, threads);
}
int64_t attention_saved_elements(Device device, const AttentionParams& p, int64_t seq_len) {
#if defined(MWB_WITH_CUDA)
    if (device == Device::CUDA) return cuda::attention_saved_elements(p, seq_len);
#endif
    (void)device;
    return static_cast<int64_t>(p.batch) * p.num_heads * seq_len * seq_len;
}
void attention_forward(OpContext& ctx, TensorView out, TensorView probs, TensorView qkv, TensorView workspace,
                       const AttentionParams& p) {
    MWB_DISPATCH(attention_forward, ctx, out, probs, qkv, workspace, p);
}
void attention_backward(OpContext& ctx, TensorView dqkv, TensorView dout, TensorView qkv, TensorView probs,
                        TensorView workspace, const AttentionParams& p) {
    MWB_DISPATCH(attention_backward, ctx, dqkv, dout, qkv, probs, workspace, p);
}
namespace {
/// cached_attention_forward's shapes and dtypes, for both devices (its indices live on the device).
void check_cached_attention(const TensorView& out, const TensorView& k_cache, const TensorView& v_cache,
                            const TensorView& qkv, const TensorView& rows, const TensorView& positions,
                            const AttentionParams& p) {
    const char* op = "cached_attention_forward";
    using Named = std::pair<const char*, const TensorView*>;
    for (const auto& [name, t] :
         {Named{"out", &out}, Named{"k_cache", &k_cache}, Named{"v_cache", &v_cache}, Named{"qkv", &qkv}})
        MWB_CHECK(t->dtype == DType::F32, "{}: {} {} must be F32", op, name, t->describe());
    MWB_CHECK(rows.dtype == DType::I32 && positions.dtype == DType::I32, "{}: rows {} and positions {} must be I32", op,
              rows.describe(), positions.describe());
    MWB_CHECK(p.num_heads > 0 && p.num_query_groups >= 0 && p.num_heads % p.groups() == 0,
              "{}: num_query_groups {} must divide the {} query heads", op, p.num_query_groups, p.num_heads);
    MWB_CHECK(p.dropout_p == 0.0f, "{}: no dropout in generation (got {})", op, p.dropout_p);
    const int64_t A = p.num_heads, G = p.groups();
    MWB_CHECK(k_cache.ndim == 4 && k_cache.dim(1) == G && v_cache.ndim == 4 && k_cache.dim(3) > 0 &&
                  std::equal(k_cache.shape, k_cache.shape + 4, v_cache.shape),
              "{}: k_cache {} and v_cache {} must both be (R, G={}, L, D)", op, k_cache.describe(), v_cache.describe(),
              G);
    const int64_t D = k_cache.dim(3);
    MWB_CHECK(qkv.ndim == 2 && qkv.dim(1) == (A + 2 * G) * D, "{}: qkv {} must be (n, (A+2G)·D={}) for A={}, G={}, D={}",
              op, qkv.describe(), (A + 2 * G) * D, A, G, D);
    const int64_t n = qkv.dim(0);
    MWB_CHECK(out.ndim == 2 && out.dim(0) == n && out.dim(1) == A * D, "{}: out {} must be (n={}, A·D={})", op,
              out.describe(), n, A * D);
    MWB_CHECK(rows.numel() == n && positions.numel() == n, "{}: rows {} and positions {} must hold n={} entries", op,
              rows.describe(), positions.describe(), n);
}
}  // namespace

void cached_attention_forward(OpContext& ctx, TensorView out, TensorView k_cache, TensorView v_cache, TensorView qkv,
                              TensorView rows, TensorView positions, const AttentionParams& p) {
    check_cached_attention(out, k_cache, v_cache, qkv, rows, positions, p);
    MWB_DISPATCH(cached_attention_forward, ctx, out, k_cache, v_cache, qkv, rows, positions, p);
}

void cross_entropy_partials(OpContext& ctx, TensorView row_max, TensorView row_sumexp, TensorView target_logit,
                            TensorView logits, TensorView targets, int64_t vocab_start) {
    MWB_DISPATCH(cross_entropy_partials, ctx, row_max, row_sumexp, target_logit, logits, targets, vocab_start);
}
void cross_entropy_backward(OpContext& ctx, TensorView logits, TensorView targets, TensorView lse,
                            TensorView row_scale, int64_t vocab_start) {
    MWB_DISPATCH(cross_entropy_backward, ctx, logits, targets, lse, row_scale, vocab_start);
}

void adamw_update(OpContext& ctx, TensorView param, TensorView grad, TensorView exp_avg, TensorView exp_avg_sq,
                  const AdamWParams& p, TensorView param_copy, DType copy_dtype) {
    MWB_DISPATCH(adamw_update, ctx, param, grad, exp_avg, exp_avg_sq, p, param_copy, copy_dtype);
}

}  // namespace mwb::ops
