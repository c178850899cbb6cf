#include "mwb/planner/activations.h"

#include "backend/model/gpt_dims.h"
#include "mwb/kernels/ops.h"

#include <algorithm>

namespace mwb::planner {

int64_t token_buffer_bytes(const ModelShape& m) {
    return 4 * m.b * (m.s + 1);
}
int64_t token_ids_bytes(const ModelShape& m) {
    return 4 * m.s * m.b;
}

LayerBytes layer_bytes(const ModelShape& m, const Layout& l, const Precision& p, Accounting a) {
    const int64_t t = l.tp;
    const int64_t rows = m.s * m.b;                   // N = s·b
    const int64_t rows_rep = l.sp ? rows / t : rows;  // replicated regions, sharded along s under SP
    const int64_t heads = m.a / t;
    LayerBytes b;
    if (a == Accounting::Engine) {
        const int64_t e = p.activation, stat = p.statistic * (m.rmsnorm ? 1 : 2), st = p.layer_stored;
        b.input = rows_rep * m.h * e;
        b.ln1_out = rows_rep * m.h * e;
        b.ln1_stats = rows_rep * stat;
        b.qkv = rows * (m.qkv_width() / t) * st;  // after RoPE (applied in place)
        // As ops::attention_saved_elements counts them, fp32: the probabilities (CPU) or one
        // log-sum-exp per score row (CUDA, own kernels and cuDNN alike).
        b.probs = m.b * heads * m.s * (p.attention_row_stats ? 1 : m.s) * p.probs;
        b.context = rows * (m.q_width() / t) * st;
        b.residual2 = rows_rep * m.h * e;
        b.ln2_out = rows_rep * m.h * e;
        b.ln2_stats = rows_rep * stat;
        b.fc1 = rows * (m.fc1_width() / t) * st;  // SwiGLU: gate and up
        b.gelu = rows * (m.f / t) * st;           // GELU or SwiGLU output
        return b;
    }
    // Korthikanti et al. 2022, section 4.1, with 16-bit activations (2 bytes) and 1-byte masks.
    const int64_t e = 2;
    b.input = rows_rep * m.h * e;              // LayerNorm 1 input: 2sbh
    b.ln1_out = rows_rep * m.h * e;            // QKV input: 2sbh
    b.qkv = rows * (m.qkv_width() / t) * e;    // Q, K (4sbh) and V (2sbh); with G groups (2a + 4G)·d·sb
    b.probs = m.b * heads * m.s * m.s * 5;     // softmax 2as²b + dropout mask as²b + dropped 2as²b
    b.context = rows * (m.q_width() / t) * e;  // projection input: 2sbh
    b.residual2 = rows_rep * m.h * e;          // LayerNorm 2 input: 2sbh
    b.masks = 2 * rows_rep * m.h;              // attention- and MLP-output dropout masks: sbh each
    b.ln2_out = rows_rep * m.h * e;            // fc1 input: 2sbh
    b.fc1 = rows * (m.fc1_width() / t) * e;    // GELU input: 8sbh with f = 4h (SwiGLU: gate and up, 4sbf)
    b.gelu = rows * (m.f / t) * e;             // fc2 input: 8sbh
    return b;
}

HeadBytes head_bytes(const ModelShape& m, const Layout& l, const Precision& p, Accounting a) {
    const int64_t rows = m.s * m.b, rows_rep = l.sp ? rows / l.tp : rows;
    HeadBytes h;
    if (a == Accounting::Engine) {
        h.norm_out = rows_rep * m.h * p.activation;
        h.norm_stats = rows_rep * p.statistic * (m.rmsnorm ? 1 : 2);
        // One chunk of rows at a time (GptModel::head), sized by the same function.
        const int64_t v = m.V / l.tp;
        h.logits = logits_chunk_rows(rows, v, p.logits, l.logits_chunk_bytes) * v * p.logits;
    } else {
        h.norm_out = rows_rep * m.h * 2;
        h.logits = rows * (m.V / l.tp) * 4;  // Megatron-LM's cross-entropy works on fp32 logits
    }
    return h;
}

WorkspaceBytes workspace_bytes(const ModelShape& m, const Layout& l, const Precision& p, const DeviceSpec& d) {
    const int64_t t = l.tp, e = p.activation, sum = p.partial_sum;
    const int64_t rows = m.s * m.b, rows_rep = l.sp ? rows / t : rows;
    WorkspaceBytes w;
    w.full = rows * m.h * e;
    w.full_sum = rows * m.h * sum;
    // A norm output's gradient: f32 partial sums under tensor parallelism, rounded after the reduction.
    w.grad_input = rows * std::max(m.h, m.q_width() / t) * (t > 1 ? sum : e);
    w.grad_norm_out = rows * m.h * (t > 1 ? sum : e);
    w.local = rows_rep * m.h * e;
    w.local_sum = rows_rep * m.h * sum;
    const int64_t st = p.layer_stored;  // the layer intermediates' gradients are stored like them
    w.grad_f = rows * (m.f / t) * st;
    w.grad_fc1 = m.swiglu ? rows * (m.fc1_width() / t) * st : 0;
    w.grad_ctx = rows * (m.q_width() / t) * st;
    w.grad_qkv = rows * (m.qkv_width() / t) * st;
    w.loss_stats = 4 * rows * p.statistic;
    w.row_max = t > 1 ? rows * p.statistic : 0;
    // The CPU attention kernel keeps 2 s×s fp32 rows of scratch per thread (kernels/cpu/attention.cpp).
    w.persistent = d.emulated_16bit ? int64_t{std::max(1, d.threads)} * 2 * m.s * m.s * 4 : d.workspace_bytes;
    // Every rank holds layers, so every rank builds the tables (GptModel::build_rope_tables).
    w.rope_tables = 2 * m.s * (m.rotary_dim / 2) * 4;
    w.persistent += w.rope_tables;
    // On every rank: the optimizer's 8 bytes of Σ x², 2 floats of scale and the doubles of its step
    // block (step_params::Count, backend/optim/optimizer.cpp), and the step's 2 doubles read at its end,
    // [Σ x², loss sum] (backend/train/train_step.cpp).
    w.step_scalars = 8 + 2 * 4 + step_params::Count * 8 + 2 * 8;
    w.persistent += w.step_scalars;
    return w;
}

int64_t embedding_mask_bytes(const ModelShape& m, const Layout& l, Accounting a) {
    if (a != Accounting::MegatronLM) return 0;
    return (l.sp ? m.s * m.b / l.tp : m.s * m.b) * m.h;
}

int64_t kept_layer_bytes(const LayerBytes& lb, Recompute r, bool chunk_start) {
    switch (r) {
        case Recompute::None:
            return lb.all();
        case Recompute::Selective:
            return lb.without_core();
        case Recompute::FullUniform:
        case Recompute::FullBlock:
            return chunk_start ? lb.input : 0;
    }
    return 0;
}

}  // namespace mwb::planner
