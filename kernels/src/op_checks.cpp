// The argument checks of every op, in the order of ops.inc: what each op's contract asks of its
// shapes, dtypes and devices, for both devices. Limits of one device (the head dims CUDA has kernels
// for, the dtypes a backend's GEMM runs) stay in that backend.
#include "op_checks.h"

#include "mwb/kernels/error.h"

#include <algorithm>
#include <string_view>

namespace mwb::ops::check {

namespace {
/// The dtypes a weight or activation is stored in (GEMM operands, rounding targets).
bool storage_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }
}  // namespace

// ---- the vocabulary ----------------------------------------------------------------------------------

void Args::reject(const char* arg, const std::string& expected, const std::string& got) const {
    MWB_FAIL("{}: {} must be {}, got {}", op_, arg, expected, got);
}

void Args::reject_tensor(const char* arg, const TensorView& t, const char* dtypes, bool device) const {
    const std::string what = dtypes ? fmt::format("a tensor of dtype {}", dtypes) : std::string("a tensor");
    reject(arg, fmt::format("{} on the {}{}", what, device_name(device_), device ? " (the context's device)" : ""),
           t.ndim == 0 ? std::string("none") : t.describe());
}

const Args& Args::placed(const char* arg, const TensorView& t, const char* dtypes) const {
    if (t.ndim == 0 || (t.data == nullptr && t.numel() > 0)) [[unlikely]]
        reject_tensor(arg, t, dtypes, false);
    if (t.device != device_) [[unlikely]]
        reject_tensor(arg, t, dtypes, true);
    return *this;
}

const Args& Args::tensor(const char* arg, const TensorView& t, DType dtype) const {
    placed(arg, t, dtype_name(dtype));
    if (t.dtype != dtype) [[unlikely]]
        reject_tensor(arg, t, dtype_name(dtype), false);
    return *this;
}

const Args& Args::optional(const char* arg, const TensorView& t, DType dtype) const {
    return t.empty() ? *this : tensor(arg, t, dtype);
}

const Args& Args::gemm_operand(const char* arg, const TensorView& t) const {
    constexpr const char* kGemmDtypes = "f32, bf16 or f16";
    placed(arg, t, kGemmDtypes);
    if (!storage_dtype(t.dtype)) [[unlikely]]
        reject_tensor(arg, t, kGemmDtypes, false);
    return *this;
}

namespace {
/// The ops whose kernels read and write 16-bit (bf16/f16) stored activations, per device: their
/// Args::stored arguments take f32, bf16 or f16 there, every other op's f32 only. One row per op.
struct SixteenBit {
    const char* op;
    bool cpu, cuda;
};
constexpr SixteenBit kSixteenBitOps[] = {
    // op                          cpu    cuda
    {"fill", true, true},
    {"scale", true, true},
    {"add", true, true},
    {"round_to", true, true},
    {"linear_gelu_forward", true, true},
    {"linear_backward_gelu", true, true},
    {"embedding_forward", true, true},
    {"embedding_backward", true, true},
    {"position_embedding_forward", true, true},
    {"position_embedding_backward", true, true},
    {"layernorm_forward", true, true},
    {"layernorm_backward", true, true},
    {"rmsnorm_forward", true, true},
    {"rmsnorm_backward", true, true},
    {"gelu_forward", true, true},
    {"gelu_backward", true, true},
    {"swiglu_forward", true, true},
    {"swiglu_backward", true, true},
    {"rope_forward", true, true},
    {"rope_backward", true, true},
    {"dropout_forward", true, true},
    {"dropout_backward", true, true},
    {"dropout_add_forward", true, true},
    {"bias_dropout_add_forward", true, true},
    {"bias_dropout_add_norm_forward", true, true},
    {"attention_forward", true, true},
    {"attention_backward", true, true},
    // Weight arguments: linear biases; the optimizer's gradients and working copy (the 16-bit arenas).
    {"linear_forward", true, true},
    {"adamw_update", true, true},
};

bool takes_16bit(const char* op, Device device) {
    for (const SixteenBit& row : kSixteenBitOps)
        if (std::string_view(row.op) == op) return device == Device::CPU ? row.cpu : row.cuda;
    return false;
}

/// The ops whose kernels accumulate parameter gradients into an f16 arena (Args::gradient), per device:
/// each call's sum computed in fp32 and rounded once into the f16 element (what cuBLAS does with an f16
/// C, beta = 1 and fp32 compute). The arena is f16 in fp16 runs without accumulate_allreduce_grads_in_fp32
/// (mwb::gradient_dtype, backend/config/validate.h), on both devices.
/// fill, scale and copy (zeroing, the data-parallel mean, the shard's move) and adamw_update's grad
/// take it through kSixteenBitOps.
constexpr SixteenBit kF16GradientOps[] = {
    // op                          cpu    cuda
    {"linear_backward", true, true},       // dw: an f16 C (gemm.cpp); dbias: fp32 column sums added once
    {"linear_backward_gelu", true, true},  // the same, and fc1's bias gradient
    {"embedding_backward", true, true},    // the table widened into fp32 scratch a slice at a time
    {"position_embedding_backward", true, true},
    {"layernorm_backward", true, true},  // k_sum_partials' f16 output (norm_kernels.cuh)
    {"rmsnorm_backward", true, true},
    {"sum_squares_ranges", true, true},  // the gradient norm (grad_norm_kernels.cuh reads f16)
};

bool takes_f16_gradient(const char* op, Device device) {
    for (const SixteenBit& row : kF16GradientOps)
        if (std::string_view(row.op) == op) return device == Device::CPU ? row.cpu : row.cuda;
    return false;
}
}  // namespace

const Args& Args::gradient(const char* arg, const TensorView& t) const {
    const bool f16 = takes_f16_gradient(op_, device_);
    const char* dtypes = f16 ? "f32 or f16" : "f32";
    placed(arg, t, dtypes);
    if (!(t.dtype == DType::F32 || (f16 && t.dtype == DType::F16))) [[unlikely]]
        reject_tensor(arg, t, dtypes, false);
    return *this;
}

const Args& Args::stored(const char* arg, const TensorView& t) const {
    const bool sixteen = takes_16bit(op_, device_);
    const char* dtypes = sixteen ? "f32, bf16 or f16" : "f32";
    placed(arg, t, dtypes);
    if (!(t.dtype == DType::F32 || (sixteen && (t.dtype == DType::BF16 || t.dtype == DType::F16)))) [[unlikely]]
        reject_tensor(arg, t, dtypes, false);
    return *this;
}

const Args& Args::dims(const char* arg, const TensorView& t, int ndim) const {
    shape(t.ndim == ndim, arg, t, "{}-dimensional", ndim);
    return *this;
}

namespace {

constexpr DType F32 = DType::F32;
constexpr DType I32 = DType::I32;
constexpr DType F64 = DType::F64;

/// `t` holds `n` elements (`what` says why, for the message).
void elements(const Args& c, const char* arg, const TensorView& t, int64_t n, const char* what) {
    c.shape(t.numel() == n, arg, t, "{} elements ({})", n, what);
}

/// S and D of qkv (S, B, G·(A/G + 2)·D) and the head layout of `p`, shared by RoPE and attention.
struct Heads {
    int64_t S, D;
};

Heads heads_of(const Args& c, const char* arg, const TensorView& qkv, const AttentionParams& p) {
    c.value(p.num_heads > 0, "p.num_heads", p.num_heads, "> 0");
    c.value(p.num_query_groups >= 0 && p.num_heads % p.groups() == 0, "p.num_query_groups", p.num_query_groups,
            "0 or a divisor of the {} query heads", p.num_heads);
    c.value(p.batch > 0, "p.batch", p.batch, "> 0");
    c.shape(qkv.ndim == 3 && qkv.dim(1) == p.batch && qkv.dim(2) % p.qkv_heads() == 0, arg, qkv,
            "(S, B={}, G·(A/G+2)·D) with A={} query heads in G={} groups", p.batch, p.num_heads, p.groups());
    return {qkv.dim(0), qkv.dim(2) / p.qkv_heads()};
}

void rope(const Args& c, const char* arg, const TensorView& qkv, const TensorView& cos, const TensorView& sin,
          const AttentionParams& p, int rotary_dim, int64_t position_offset) {
    c.stored(arg, qkv).tensor("cos", cos, F32).tensor("sin", sin, F32);
    const Heads h = heads_of(c, arg, qkv, p);
    c.value(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= h.D, "rotary_dim", rotary_dim,
            "even and in (0, head dim {}]", h.D);
    c.shape(cos.ndim == 2 && cos.dim(1) == rotary_dim / 2, "cos", cos, "(P, rotary_dim/2={})", rotary_dim / 2);
    c.shape(sin.ndim == 2 && sin.dim(1) == rotary_dim / 2 && sin.dim(0) == cos.dim(0), "sin", sin,
            "(P={}, rotary_dim/2={}) as cos", cos.dim(0), rotary_dim / 2);
    c.value(position_offset >= 0 && position_offset + h.S <= cos.dim(0), "position_offset", position_offset,
            ">= 0 with positions [offset, offset + S={}) inside the {} rows of cos and sin", h.S, cos.dim(0));
}

void dropout_p(const Args& c, float p) {
    c.value(p >= 0.0f && p < 1.0f, "p", p, "a dropout probability in [0, 1)");
}

void dropout_offset(const Args& c, int64_t element_offset) {
    c.value(element_offset >= 0, "element_offset", element_offset, ">= 0");
}

/// out and x of one size (x's element count).
void same_size(const Args& c, const char* out_arg, const TensorView& out, const char* x_arg, const TensorView& x) {
    c.shape(out.numel() == x.numel(), out_arg, out, "of {}'s size ({} elements)", x_arg, x.numel());
}

/// A stored attention tensor (qkv, out and their gradients): f32, bf16 or f16 on both devices (the
/// CPU op widens each; the CUDA kernels are templated on one storage dtype for all of them).
void attention_stored(const Args& c, const char* arg, const TensorView& t, const TensorView& qkv) {
    c.gemm_operand(arg, t);
    if (c.device() == Device::CUDA)
        c.shape(t.dtype == qkv.dtype, arg, t, "of qkv's dtype {} (CUDA's kernels take one storage dtype)",
                dtype_name(qkv.dtype));
}

/// The attention tensors both directions share: qkv, out/dout, probs, workspace and the head range.
/// qkv, out and their gradients are stored activations (16-bit in 16-bit runs).
int64_t attention(const Args& c, const char* out_arg, const TensorView& out, const TensorView& probs,
                  const TensorView& qkv, const TensorView& workspace, const AttentionParams& p) {
    attention_stored(c, "qkv", qkv, qkv);
    attention_stored(c, out_arg, out, qkv);
    c.tensor("probs", probs, F32);
    c.placed("workspace", workspace);
    const Heads h = heads_of(c, "qkv", qkv, p);
    c.shape(out.numel() == h.S * p.batch * p.num_heads * h.D, out_arg, out, "(S={}, B={}, A·D={})", h.S, p.batch,
            p.num_heads * h.D);
    c.value(p.head_dim == 0 || p.head_dim == h.D, "p.head_dim", p.head_dim, "0 or qkv's head dim {}", h.D);
    const int64_t saved = attention_saved_elements(c.device(), p, h.S);
    c.shape(probs.numel() == saved, "probs", probs, "{} elements on the {} (ops::attention_saved_elements)", saved,
            device_name(c.device()));
    const int64_t need = attention_workspace_bytes(c.device(), p, h.S, num_threads());
    c.shape(workspace.numel() * static_cast<int64_t>(dtype_size(workspace.dtype)) >= need, "workspace", workspace,
            "at least {} bytes (ops::attention_workspace_bytes for {} threads)", need, num_threads());
    c.value(p.head_offset >= 0 && p.head_offset + p.num_heads <= p.total_heads, "p.head_offset", p.head_offset,
            ">= 0 with heads [offset, offset + {}) inside the layer's {} heads", p.num_heads, p.total_heads);
    c.value(p.dropout_p >= 0.0f && p.dropout_p < 1.0f, "p.dropout_p", p.dropout_p, "in [0, 1)");
    return h.S;
}

}  // namespace

// ---- elementwise and reductions -------------------------------------------------------------------

void fill(OpContext& ctx, TensorView x, float) {
    Args("fill", ctx).stored("x", x);
}

void fill_from(OpContext& ctx, TensorView x, TensorView value, float divisor) {
    const Args c("fill_from", ctx);
    c.tensor("x", x, F32).tensor("value", value, F64);
    elements(c, "value", value, 1, "one value");
    c.value(divisor != 0.0f, "divisor", divisor, "!= 0");
}

void copy(OpContext& ctx, TensorView dst, TensorView src) {
    // On a CUDA context either side may be host memory: the copy is then an upload or a download.
    const Args c("copy", ctx);
    for (const auto& [arg, t] : {std::pair{"dst", dst}, std::pair{"src", src}}) {
        const bool given = t.ndim > 0 && (t.data != nullptr || t.numel() == 0);
        c.shape(given && (t.device == ctx.device || t.device == Device::CPU), arg, t, "a tensor on the {}{}",
                device_name(ctx.device), ctx.device == Device::CPU ? "" : " or the host");
    }
    same_size(c, "dst", dst, "src", src);
    // Same dtype, or a conversion between the storage dtypes f32, bf16 and f16 (narrowing rounds once; the
    // CUDA kernels convert any pair too); a mismatch blames the side that is neither.
    if (dst.dtype != src.dtype && !(storage_dtype(dst.dtype) && storage_dtype(src.dtype))) {
        const bool blame_dst = !storage_dtype(dst.dtype);
        const TensorView& other = blame_dst ? src : dst;
        c.shape(false, blame_dst ? "dst" : "src", blame_dst ? dst : src, "of {}'s dtype {} (or f32, bf16 or f16)",
                blame_dst ? "src" : "dst", dtype_name(other.dtype));
    }
    if (ctx.device == Device::CPU) c.shape(storage_dtype(dst.dtype), "dst", dst, "of dtype f32, bf16 or f16 on the CPU");
}

void scale(OpContext& ctx, TensorView x, float) {
    Args("scale", ctx).stored("x", x);
}

void add(OpContext& ctx, TensorView out, TensorView a, TensorView b) {
    const Args c("add", ctx);
    c.stored("out", out).tensor("a", a, out.dtype).tensor("b", b, out.dtype);
    same_size(c, "a", a, "out", out);
    same_size(c, "b", b, "out", out);
}

void round_to(OpContext& ctx, TensorView x, DType dtype) {
    const Args c("round_to", ctx);
    c.stored("x", x);
    c.value(storage_dtype(dtype), "dtype", dtype_name(dtype), "f32, bf16 or f16");
}

void sum_squares(OpContext& ctx, TensorView x) {
    Args("sum_squares", ctx).tensor("x", x, F32);
}

void sum_squares_ranges(OpContext& ctx, TensorView out, TensorView x, const std::vector<IndexRange>& ranges) {
    const Args c("sum_squares_ranges", ctx);
    c.tensor("out", out, F64).gradient("x", x);
    elements(c, "out", out, 1, "the sum");
    for (const IndexRange& r : ranges)
        if (r.first < 0 || r.count < 0 || r.first + r.count > x.numel()) [[unlikely]]
            c.value(false, "ranges", fmt::format("[{}, {})", r.first, r.first + r.count),
                    "element ranges inside x's {} elements", x.numel());
}

namespace {
void step_block(const Args& c, const TensorView& step) {
    c.optional("step", step, F64);
    if (!step.empty()) elements(c, "step", step, step_params::Count, "the step's parameter block");
}
}  // namespace

void gradient_scale(OpContext& ctx, TensorView scale, TensorView sumsq, double loss_scale, double, TensorView step) {
    const Args c("gradient_scale", ctx);
    c.tensor("scale", scale, F32).tensor("sumsq", sumsq, F64);
    elements(c, "scale", scale, 2, "multiplier and found_inf");
    elements(c, "sumsq", sumsq, 1, "the global sum of squares");
    step_block(c, step);
    // With the block the loss scale is read on the device (its writer checks it).
    if (step.empty()) c.value(loss_scale > 0, "loss_scale", loss_scale, "> 0");
}

void read_f64(OpContext& ctx, TensorView x) {
    const Args c("read_f64", ctx);
    c.tensor("x", x, F64);
    c.shape(x.numel() >= 1 && x.numel() <= 16, "x", x, "1 to 16 elements (a step's scalar results)");
}

// ---- GEMM ------------------------------------------------------------------------------------------

void matmul(OpContext& ctx, TensorView c, TensorView a, TensorView b, bool trans_a, bool trans_b, float, float) {
    const Args k("matmul", ctx);
    k.gemm_operand("c", c).gemm_operand("a", a).gemm_operand("b", b);
    k.dims("c", c, 2).dims("a", a, 2).dims("b", b, 2);
    const int64_t m = trans_a ? a.dim(1) : a.dim(0), inner = trans_a ? a.dim(0) : a.dim(1);
    const int64_t b_inner = trans_b ? b.dim(1) : b.dim(0), n = trans_b ? b.dim(0) : b.dim(1);
    k.shape(b_inner == inner, "b", b, "{} to multiply op(a) ({}, {})", trans_b ? "(n, inner)" : "(inner, n)", m, inner);
    k.shape(c.dim(0) == m && c.dim(1) == n, "c", c, "({}, {}) = op(a)·op(b)", m, n);
}

// ---- linear layer ------------------------------------------------------------------------------------

namespace {
/// x (N, in), w (out, in): returns out.
int64_t linear_weight(const Args& c, const TensorView& x, const TensorView& w) {
    c.gemm_operand("x", x).gemm_operand("w", w).dims("w", w, 2);
    c.shape(w.dim(1) == x.cols(), "w", w, "(out, in={}) for x {}", x.cols(), x.describe());
    return w.dim(0);
}
}  // namespace

void linear_forward(OpContext& ctx, TensorView y, TensorView x, TensorView w, TensorView bias) {
    const Args c("linear_forward", ctx);
    const int64_t out = linear_weight(c, x, w);
    c.gemm_operand("y", y);
    if (!bias.empty()) c.stored("bias", bias);  // a weight: 16-bit on the CPU in 16-bit runs
    c.shape(y.rows() == x.rows() && y.cols() == out, "y", y, "(N={}, out={})", x.rows(), out);
    if (!bias.empty()) elements(c, "bias", bias, out, "one per output");
}

void linear_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dbias, TensorView dy, TensorView x,
                     TensorView w, bool) {
    const Args c("linear_backward", ctx);
    const int64_t out = linear_weight(c, x, w);
    c.gemm_operand("dy", dy).gemm_operand("dw", dw).optional_gradient("dbias", dbias);
    c.shape(dy.rows() == x.rows() && dy.cols() == out, "dy", dy, "(N={}, out={})", x.rows(), out);
    c.shape(same_shape(dw, w), "dw", dw, "w's shape {}", w.describe());
    if (!dx.empty()) {
        c.gemm_operand("dx", dx);
        same_size(c, "dx", dx, "x", x);
    }
    if (!dbias.empty()) elements(c, "dbias", dbias, out, "one per output");
}

void linear_gelu_forward(OpContext& ctx, TensorView act, TensorView pre, TensorView x, TensorView w, TensorView bias,
                         DType storage) {
    const Args c("linear_gelu_forward", ctx);
    const int64_t out = linear_weight(c, x, w);
    c.stored("pre", pre).stored("act", act);
    if (!bias.empty()) c.stored("bias", bias);
    c.shape(pre.rows() == x.rows() && pre.cols() == out, "pre", pre, "(N={}, out={})", x.rows(), out);
    same_size(c, "act", act, "pre", pre);
    if (!bias.empty()) elements(c, "bias", bias, out, "one per output");
    c.value(storage_dtype(storage), "storage", dtype_name(storage), "f32, bf16 or f16");
}

void linear_backward_gelu(OpContext& ctx, TensorView dpre, TensorView dpre_bias, TensorView dw, TensorView dbias,
                          TensorView dy, TensorView x, TensorView w, TensorView pre, DType storage) {
    const Args c("linear_backward_gelu", ctx);
    const int64_t out = linear_weight(c, x, w);
    c.stored("dpre", dpre).stored("pre", pre).gemm_operand("dy", dy).gemm_operand("dw", dw);
    c.optional_gradient("dbias", dbias).optional_gradient("dpre_bias", dpre_bias);
    c.shape(dy.rows() == x.rows() && dy.cols() == out, "dy", dy, "(N={}, out={})", x.rows(), out);
    c.shape(same_shape(dw, w), "dw", dw, "w's shape {}", w.describe());
    c.shape(dpre.rows() == x.rows() && dpre.cols() == x.cols(), "dpre", dpre, "x's shape {}", x.describe());
    same_size(c, "pre", pre, "dpre", dpre);
    if (!dbias.empty()) elements(c, "dbias", dbias, out, "one per output");
    if (!dpre_bias.empty()) elements(c, "dpre_bias", dpre_bias, x.cols(), "one per input");
    c.value(storage_dtype(storage), "storage", dtype_name(storage), "f32, bf16 or f16");
}

// ---- embeddings --------------------------------------------------------------------------------------

namespace {
/// `weights`: the table is the model's weights (16-bit on the CPU in 16-bit runs), else their gradient.
void embedding(const Args& c, const char* rows_arg, const TensorView& rows, const TensorView& ids,
               const char* table_arg, const TensorView& table, bool weights) {
    c.stored(rows_arg, rows).tensor("ids", ids, I32);
    if (weights)
        c.stored(table_arg, table);
    else
        c.gradient(table_arg, table);
    c.dims(table_arg, table, 2);
    c.shape(rows.rows() == ids.numel() && rows.cols() == table.dim(1), rows_arg, rows, "(N={} ids, H={})", ids.numel(),
            table.dim(1));
}

void position_embedding(const Args& c, const char* rows_arg, const TensorView& rows, const char* table_arg,
                        const TensorView& table, int64_t position_offset, bool weights) {
    c.stored(rows_arg, rows);
    if (weights)
        c.stored(table_arg, table);
    else
        c.gradient(table_arg, table);
    c.dims(rows_arg, rows, 3).dims(table_arg, table, 2);
    c.shape(table.dim(1) == rows.dim(2), table_arg, table, "(P, H={})", rows.dim(2));
    c.value(position_offset >= 0 && position_offset + rows.dim(0) <= table.dim(0), "position_offset", position_offset,
            ">= 0 with positions [offset, offset + S={}) inside the {} rows of {}", rows.dim(0), table.dim(0),
            table_arg);
}
}  // namespace

void embedding_forward(OpContext& ctx, TensorView out, TensorView ids, TensorView table, int64_t) {
    embedding(Args("embedding_forward", ctx), "out", out, ids, "table", table, true);
}

void embedding_backward(OpContext& ctx, TensorView dtable, TensorView dout, TensorView ids, int64_t) {
    embedding(Args("embedding_backward", ctx), "dout", dout, ids, "dtable", dtable, false);
}

void position_embedding_forward(OpContext& ctx, TensorView out, TensorView wpe, int64_t position_offset) {
    position_embedding(Args("position_embedding_forward", ctx), "out", out, "wpe", wpe, position_offset, true);
}

void position_embedding_backward(OpContext& ctx, TensorView dwpe, TensorView dout, int64_t position_offset) {
    position_embedding(Args("position_embedding_backward", ctx), "dout", dout, "dwpe", dwpe, position_offset, false);
}

// ---- normalisation -----------------------------------------------------------------------------------

namespace {
/// x (N, H), a tensor of x's size, w (H) and a per-row statistic (N). x, out, dout and dx are
/// stored activations (the residual stream, norm outputs and their gradients); w is a weight (16-bit on
/// the CPU in 16-bit runs).
void norm(const Args& c, const TensorView& x, const char* like_x_arg, const TensorView& like_x, const TensorView& w,
          const char* stat_arg, const TensorView& stat) {
    c.stored("x", x).stored(like_x_arg, like_x).stored("w", w).tensor(stat_arg, stat, F32);
    same_size(c, like_x_arg, like_x, "x", x);
    elements(c, "w", w, x.cols(), "one per column of x");
    elements(c, stat_arg, stat, x.rows(), "one per row of x");
}
}  // namespace

void layernorm_forward(OpContext& ctx, TensorView out, TensorView mean, TensorView rstd, TensorView x, TensorView w,
                       TensorView b, float) {
    const Args c("layernorm_forward", ctx);
    norm(c, x, "out", out, w, "rstd", rstd);
    c.tensor("mean", mean, F32).stored("b", b);
    elements(c, "mean", mean, x.rows(), "one per row of x");
    elements(c, "b", b, x.cols(), "one per column of x");
}

void layernorm_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView db, TensorView dout, TensorView x,
                        TensorView mean, TensorView rstd, TensorView w, bool) {
    const Args c("layernorm_backward", ctx);
    norm(c, x, "dout", dout, w, "rstd", rstd);
    c.tensor("dx", dx, x.dtype).gradient("dw", dw).gradient("db", db).tensor("mean", mean, F32);
    same_size(c, "dx", dx, "x", x);
    same_size(c, "dw", dw, "w", w);
    same_size(c, "db", db, "w", w);
    elements(c, "mean", mean, x.rows(), "one per row of x");
}

void rmsnorm_forward(OpContext& ctx, TensorView out, TensorView rstd, TensorView x, TensorView w, float) {
    norm(Args("rmsnorm_forward", ctx), x, "out", out, w, "rstd", rstd);
}

void rmsnorm_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dout, TensorView x, TensorView rstd,
                      TensorView w, bool) {
    const Args c("rmsnorm_backward", ctx);
    norm(c, x, "dout", dout, w, "rstd", rstd);
    c.tensor("dx", dx, x.dtype).gradient("dw", dw);
    same_size(c, "dx", dx, "x", x);
    same_size(c, "dw", dw, "w", w);
}

// ---- activation ---------------------------------------------------------------------------------------

namespace {
/// x (N, 2F) = [gate | up] per row and an (N, F) tensor beside it.
/// x, out and their gradients are stored activations.
void swiglu(const Args& c, const TensorView& x, const char* half_arg, const TensorView& half) {
    c.stored("x", x).stored(half_arg, half);
    c.shape(x.cols() % 2 == 0, "x", x, "(N, 2F): [gate | up] per row");
    c.shape(half.rows() == x.rows() && half.cols() == x.cols() / 2, half_arg, half, "(N={}, F={}) for x {}", x.rows(),
            x.cols() / 2, x.describe());
}
}  // namespace

void gelu_forward(OpContext& ctx, TensorView out, TensorView x) {
    const Args c("gelu_forward", ctx);
    c.stored("out", out).stored("x", x);
    same_size(c, "out", out, "x", x);
}

void gelu_backward(OpContext& ctx, TensorView dx, TensorView dout, TensorView x) {
    const Args c("gelu_backward", ctx);
    c.stored("dx", dx).stored("dout", dout).stored("x", x);
    c.shape(dout.dtype == dx.dtype, "dout", dout, "of dx's dtype {}", dtype_name(dx.dtype));
    same_size(c, "dx", dx, "x", x);
    same_size(c, "dout", dout, "x", x);
}

void swiglu_forward(OpContext& ctx, TensorView out, TensorView x) {
    swiglu(Args("swiglu_forward", ctx), x, "out", out);
}

void swiglu_backward(OpContext& ctx, TensorView dx, TensorView dout, TensorView x) {
    const Args c("swiglu_backward", ctx);
    swiglu(c, x, "dout", dout);
    c.stored("dx", dx);
    c.shape(dout.dtype == dx.dtype, "dout", dout, "of dx's dtype {}", dtype_name(dx.dtype));
    same_size(c, "dx", dx, "x", x);
}

// ---- rotary position embedding -----------------------------------------------------------------------

void rope_forward(OpContext& ctx, TensorView qkv, TensorView cos, TensorView sin, const AttentionParams& p,
                  int rotary_dim, bool, int64_t position_offset) {
    rope(Args("rope_forward", ctx), "qkv", qkv, cos, sin, p, rotary_dim, position_offset);
}

void rope_backward(OpContext& ctx, TensorView dqkv, TensorView cos, TensorView sin, const AttentionParams& p,
                   int rotary_dim, bool, int64_t position_offset) {
    rope(Args("rope_backward", ctx), "dqkv", dqkv, cos, sin, p, rotary_dim, position_offset);
}

// ---- dropout and residual ----------------------------------------------------------------------------

void dropout_forward(OpContext& ctx, TensorView out, TensorView x, float p, RngStream, int64_t element_offset) {
    const Args c("dropout_forward", ctx);
    c.stored("out", out).stored("x", x);
    same_size(c, "out", out, "x", x);
    dropout_p(c, p);
    dropout_offset(c, element_offset);
}

void dropout_backward(OpContext& ctx, TensorView dx, TensorView dout, float p, RngStream, int64_t element_offset) {
    const Args c("dropout_backward", ctx);
    c.stored("dx", dx).stored("dout", dout);
    same_size(c, "dx", dx, "dout", dout);
    dropout_p(c, p);
    dropout_offset(c, element_offset);
}

void dropout_add_forward(OpContext& ctx, TensorView out, TensorView residual, TensorView x, float p, RngStream,
                         int64_t element_offset) {
    const Args c("dropout_add_forward", ctx);
    c.stored("out", out).tensor("residual", residual, out.dtype).stored("x", x);
    same_size(c, "out", out, "x", x);
    same_size(c, "residual", residual, "x", x);
    dropout_p(c, p);
    dropout_offset(c, element_offset);
}

void bias_dropout_add_forward(OpContext& ctx, TensorView out, TensorView residual, TensorView x, TensorView bias,
                              float p, RngStream, int64_t element_offset) {
    const Args c("bias_dropout_add_forward", ctx);
    c.stored("out", out).tensor("residual", residual, out.dtype).stored("x", x).stored("bias", bias);
    same_size(c, "out", out, "x", x);
    same_size(c, "residual", residual, "x", x);
    elements(c, "bias", bias, x.cols(), "one per column of x");
    dropout_p(c, p);
    dropout_offset(c, element_offset);
}

void bias_dropout_add_norm_forward(OpContext& ctx, TensorView out, TensorView norm_out, TensorView mean,
                                   TensorView rstd, TensorView residual, TensorView x, TensorView bias, TensorView w,
                                   TensorView b, float p, RngStream, int64_t element_offset, float) {
    const Args c("bias_dropout_add_norm_forward", ctx);
    c.stored("out", out).tensor("residual", residual, out.dtype).stored("x", x);
    same_size(c, "out", out, "x", x);
    same_size(c, "residual", residual, "x", x);
    if (!bias.empty()) {
        c.stored("bias", bias);
        elements(c, "bias", bias, x.cols(), "one per column of x");
    }
    // The norm of out, stored like out: LayerNorm with mean and b, RMSNorm with neither.
    norm(c, out, "norm_out", norm_out, w, "rstd", rstd);
    c.tensor("norm_out", norm_out, out.dtype);
    if (!b.empty()) c.tensor("mean", mean, F32);
    if (!mean.empty()) {
        c.tensor("mean", mean, F32).stored("b", b);
        elements(c, "mean", mean, x.rows(), "one per row of x");
        elements(c, "b", b, x.cols(), "one per column of x");
    }
    dropout_p(c, p);
    dropout_offset(c, element_offset);
}

// ---- attention ------------------------------------------------------------------------------------------

void attention_forward(OpContext& ctx, TensorView out, TensorView probs, TensorView qkv, TensorView workspace,
                       const AttentionParams& p) {
    attention(Args("attention_forward", ctx), "out", out, probs, qkv, workspace, p);
}

void attention_backward(OpContext& ctx, TensorView dqkv, TensorView dout, TensorView qkv, TensorView out,
                        TensorView probs, TensorView workspace, const AttentionParams& p) {
    const Args c("attention_backward", ctx);
    attention(c, "dout", dout, probs, qkv, workspace, p);
    attention_stored(c, "out", out, qkv);
    same_size(c, "out", out, "dout", dout);
    attention_stored(c, "dqkv", dqkv, qkv);
    same_size(c, "dqkv", dqkv, "qkv", qkv);
}

void cached_attention_forward(OpContext& ctx, TensorView out, TensorView k_cache, TensorView v_cache, TensorView qkv,
                              TensorView rows, TensorView positions, const AttentionParams& p) {
    const Args c("cached_attention_forward", ctx);
    c.tensor("out", out, F32).tensor("k_cache", k_cache, F32).tensor("v_cache", v_cache, F32).tensor("qkv", qkv, F32);
    c.tensor("rows", rows, I32).tensor("positions", positions, I32);
    c.value(p.num_heads > 0, "p.num_heads", p.num_heads, "> 0");
    c.value(p.num_query_groups >= 0 && p.num_heads % p.groups() == 0, "p.num_query_groups", p.num_query_groups,
            "0 or a divisor of the {} query heads", p.num_heads);
    c.value(p.dropout_p == 0.0f, "p.dropout_p", p.dropout_p, "0 (no dropout in generation)");
    const int64_t A = p.num_heads, G = p.groups();
    c.shape(k_cache.ndim == 4 && k_cache.dim(1) == G && k_cache.dim(3) > 0, "k_cache", k_cache, "(R, G={}, L, D)", G);
    c.shape(v_cache.ndim == 4 && std::equal(k_cache.shape, k_cache.shape + 4, v_cache.shape), "v_cache", v_cache,
            "k_cache's shape {}", k_cache.describe());
    const int64_t D = k_cache.dim(3);
    c.shape(qkv.ndim == 2 && qkv.dim(1) == (A + 2 * G) * D, "qkv", qkv, "(n, (A+2G)·D={}) for A={}, G={}, D={}",
            (A + 2 * G) * D, A, G, D);
    const int64_t n = qkv.dim(0);
    c.shape(out.ndim == 2 && out.dim(0) == n && out.dim(1) == A * D, "out", out, "(n={}, A·D={})", n, A * D);
    elements(c, "rows", rows, n, "one per new token");
    elements(c, "positions", positions, n, "one per new token");
}

// ---- softmax + cross-entropy ----------------------------------------------------------------------------

void cross_entropy_partials(OpContext& ctx, TensorView row_max, TensorView row_sumexp, TensorView target_logit,
                            TensorView logits, TensorView targets, int64_t) {
    const Args c("cross_entropy_partials", ctx);
    c.tensor("logits", logits, F32).tensor("targets", targets, I32);
    const int64_t rows = logits.rows();
    elements(c, "targets", targets, rows, "one per row of logits");
    for (const auto& [arg, t] : {std::pair{"row_max", row_max}, std::pair{"row_sumexp", row_sumexp},
                                 std::pair{"target_logit", target_logit}}) {
        c.tensor(arg, t, F32);
        elements(c, arg, t, rows, "one per row of logits");
    }
}

void cross_entropy_backward(OpContext& ctx, TensorView logits, TensorView targets, TensorView lse, TensorView row_scale,
                            int64_t) {
    const Args c("cross_entropy_backward", ctx);
    c.tensor("logits", logits, F32).tensor("targets", targets, I32).tensor("lse", lse, F32);
    c.tensor("row_scale", row_scale, F32);
    const int64_t rows = logits.rows();
    elements(c, "targets", targets, rows, "one per row of logits");
    elements(c, "lse", lse, rows, "one per row of logits");
    elements(c, "row_scale", row_scale, rows, "one per row of logits");
}

void cross_entropy_fused(OpContext& ctx, TensorView lse, TensorView target_logit, TensorView logits, TensorView targets,
                         TensorView row_scale) {
    const Args c("cross_entropy_fused", ctx);
    c.tensor("logits", logits, F32).tensor("targets", targets, I32);
    const int64_t rows = logits.rows();
    elements(c, "targets", targets, rows, "one per row of logits");
    for (const auto& [arg, t] :
         {std::pair{"lse", lse}, std::pair{"target_logit", target_logit}, std::pair{"row_scale", row_scale}}) {
        c.tensor(arg, t, F32);
        elements(c, arg, t, rows, "one per row of logits");
    }
}

namespace {
/// Per-row statistics: every tensor F32 with as many elements as the first.
void row_statistics(const Args& c, std::initializer_list<std::pair<const char*, TensorView>> stats) {
    const int64_t rows = stats.begin()->second.numel();
    for (const auto& [arg, t] : stats) {
        c.tensor(arg, t, F32);
        elements(c, arg, t, rows, "one per row");
    }
}
}  // namespace

void cross_entropy_rescale(OpContext& ctx, TensorView row_sumexp, TensorView row_max, TensorView global_max) {
    row_statistics(Args("cross_entropy_rescale", ctx),
                   {{"row_sumexp", row_sumexp}, {"row_max", row_max}, {"global_max", global_max}});
}

void cross_entropy_lse(OpContext& ctx, TensorView lse, TensorView row_max, TensorView row_sumexp) {
    row_statistics(Args("cross_entropy_lse", ctx), {{"lse", lse}, {"row_max", row_max}, {"row_sumexp", row_sumexp}});
}

void cross_entropy_loss_sum(OpContext& ctx, TensorView loss, TensorView lse, TensorView target_logit, double divisor,
                            bool) {
    const Args c("cross_entropy_loss_sum", ctx);
    row_statistics(c, {{"lse", lse}, {"target_logit", target_logit}});
    c.tensor("loss", loss, F64);
    elements(c, "loss", loss, 1, "the loss accumulator");
    c.value(divisor > 0, "divisor", divisor, "> 0");
}

// ---- optimizer ------------------------------------------------------------------------------------------

void adamw_update(OpContext& ctx, TensorView param, TensorView grad, TensorView exp_avg, TensorView exp_avg_sq,
                  const AdamWParams& p, TensorView param_copy, DType copy_dtype, TensorView scale, TensorView step) {
    const Args c("adamw_update", ctx);
    c.tensor("param", param, F32);
    // The gradients as the model keeps them: fp32 main grads, or a 16-bit gradient arena.
    c.stored("grad", grad);
    same_size(c, "grad", grad, "param", param);
    for (const auto& [arg, t] : {std::pair{"exp_avg", exp_avg}, std::pair{"exp_avg_sq", exp_avg_sq}}) {
        c.tensor(arg, t, F32);
        same_size(c, arg, t, "param", param);
    }
    c.value(storage_dtype(copy_dtype), "copy_dtype", dtype_name(copy_dtype), "f32, bf16 or f16");
    if (!param_copy.empty()) {
        // The model's working copy: the 16-bit arena itself, or f32 holding the rounding.
        c.stored("param_copy", param_copy);
        c.shape(param_copy.dtype == DType::F32 || param_copy.dtype == copy_dtype, "param_copy", param_copy,
                "f32 or of copy_dtype {}", dtype_name(copy_dtype));
        same_size(c, "param_copy", param_copy, "param", param);
    }
    c.value(p.step >= 1, "p.step", p.step, ">= 1 (1-based, for the bias correction)");
    c.optional("scale", scale, F32);
    if (!scale.empty()) elements(c, "scale", scale, 2, "gradient_scale's multiplier and found_inf");
    step_block(c, step);
}

}  // namespace mwb::ops::check
