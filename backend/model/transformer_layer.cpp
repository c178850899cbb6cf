#include "backend/model/transformer_layer.h"

#include "mwb/kernels/error.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace mwb {

namespace {
std::string layer_prefix(int64_t index) {
    return "decoder.layers." + std::to_string(index) + ".";
}
}  // namespace

void LayerActivations::drop_intermediates() {
    ln1.reset();
    qkv.reset();
    probs.reset();
    context.reset();
    residual2.reset();
    ln2.reset();
    fc1.reset();
    act.reset();
}

TransformerLayer::TransformerLayer(const GptDims& dims, const TensorParallel& tp, int64_t index, TensorView rope_cos,
                                   TensorView rope_sin)
    : d_(dims),
      index_(index),
      tp_size_(tp.size()),
      tp_rank_(tp.rank()),
      rows_(dims.rows()),
      local_rows_(tp.local_seq(dims.seq) * dims.micro_batch),
      seq_begin_(tp.seq_begin(dims.seq)),
      heads_(dims.heads / tp.size()),
      groups_(dims.kv_groups() / tp.size()),
      qkv_width_(dims.qkv_rows() / tp.size()),
      width_(dims.heads * dims.head_dim() / tp.size()),
      ffn_(dims.ffn / tp.size()),
      fc1_width_(dims.fc1_rows() / tp.size()),
      rope_cos_(rope_cos),
      rope_sin_(rope_sin) {
    MWB_CHECK(dims.heads % tp.size() == 0 && dims.kv_groups() % tp.size() == 0 && dims.ffn % tp.size() == 0 &&
                  (!tp.sequence_parallel() || dims.seq % tp.size() == 0),
              "layer {}: {} heads, {} key/value groups, MLP width {} and sequence {} do not split over {} "
              "tensor-parallel ranks",
              index, dims.heads, dims.kv_groups(), dims.ffn, dims.seq, tp.size());
    MWB_CHECK(dims.positions != GptDims::Positions::Rope || (!rope_cos.empty() && !rope_sin.empty()),
              "layer {}: RoPE needs the model's cos/sin tables", index);
}

void TransformerLayer::add_params(ParamLayout& layout, int64_t index, const GptDims& d, int t, int r,
                                  bool sequence_parallel) {
    const std::string p = layer_prefix(index);
    const int64_t H = d.hidden, F = d.ffn, AD = d.heads * d.head_dim(), F1 = d.fc1_rows();
    const int fc1_blocks = d.swiglu ? 2 : 1;  // [gate | up]: each rank holds its part of both
    // Norms are replicated; under sequence parallelism each rank sees only its positions, so their
    // gradients are partial sums to be all-reduced over the tensor-parallel group.
    const auto norm = [&](const std::string& name, ParamRole role) {
        const std::size_t i = layout.add(p + name, role, {H});
        layout.mark_sequence_parallel(i, sequence_parallel && t > 1);
    };
    norm("input_layernorm.weight", ParamRole::NormWeight);
    if (!d.rmsnorm) norm("input_layernorm.bias", ParamRole::NormBias);
    // qkv rows are G groups of (A/G + 2)·D: a contiguous split gives each rank G/t whole groups.
    layout.add_split(p + "self_attention.linear_qkv.weight", ParamRole::QkvWeight, {d.qkv_rows(), H}, 0, t, r);
    if (d.has_qkv_bias())
        layout.add_split(p + "self_attention.linear_qkv.bias", ParamRole::QkvBias, {d.qkv_rows()}, 0, t, r);
    layout.add_split(p + "self_attention.linear_proj.weight", ParamRole::ProjWeight, {H, AD}, 1, t, r);
    if (d.linear_bias) layout.add(p + "self_attention.linear_proj.bias", ParamRole::ProjBias, {H});
    norm("pre_mlp_layernorm.weight", ParamRole::NormWeight);
    if (!d.rmsnorm) norm("pre_mlp_layernorm.bias", ParamRole::NormBias);
    layout.add_split(p + "mlp.linear_fc1.weight", ParamRole::Fc1Weight, {F1, H}, 0, t, r, fc1_blocks);
    if (d.linear_bias) layout.add_split(p + "mlp.linear_fc1.bias", ParamRole::Fc1Bias, {F1}, 0, t, r, fc1_blocks);
    layout.add_split(p + "mlp.linear_fc2.weight", ParamRole::Fc2Weight, {H, F}, 1, t, r);
    if (d.linear_bias) layout.add(p + "mlp.linear_fc2.bias", ParamRole::Fc2Bias, {H});
}

LayerParams TransformerLayer::params(const ParamLayout& layout, const TensorView& arena, int64_t index,
                                     const GptDims& d) {
    const std::string p = layer_prefix(index);
    const auto v = [&](const char* name) { return layout.view(arena, layout.index_of(p + name)); };
    const auto maybe = [&](bool present, const char* name) { return present ? v(name) : TensorView{}; };
    return LayerParams{v("input_layernorm.weight"),
                       maybe(!d.rmsnorm, "input_layernorm.bias"),
                       v("self_attention.linear_qkv.weight"),
                       maybe(d.has_qkv_bias(), "self_attention.linear_qkv.bias"),
                       v("self_attention.linear_proj.weight"),
                       maybe(d.linear_bias, "self_attention.linear_proj.bias"),
                       v("pre_mlp_layernorm.weight"),
                       maybe(!d.rmsnorm, "pre_mlp_layernorm.bias"),
                       v("mlp.linear_fc1.weight"),
                       maybe(d.linear_bias, "mlp.linear_fc1.bias"),
                       v("mlp.linear_fc2.weight"),
                       maybe(d.linear_bias, "mlp.linear_fc2.bias")};
}

void TransformerLayer::residual_add(ModelRuntime& rt, const TensorView& out, const TensorView& residual,
                                    const TensorView& branch, const TensorView& bias, float p, RngStream rng) const {
    if (bias.empty())
        ops::dropout_add_forward(rt.ctx, out, residual, branch, p, rng, residual_offset());
    else
        ops::bias_dropout_add_forward(rt.ctx, out, residual, branch, bias, p, rng, residual_offset());
}

TensorView TransformerLayer::saved_view(const ModelRuntime& rt, const Buffer& saved) const {
    // CPU: the probabilities (B, A, S, S); CUDA: one log-sum-exp per score row (ops.h).
    if (rt.ctx.device != Device::CPU) return saved.view();
    return saved.view({d_.micro_batch, heads_, d_.seq, d_.seq});
}

AttentionParams TransformerLayer::attention_params(const ModelRuntime& rt) const {
    AttentionParams p;
    p.num_heads = static_cast<int>(heads_);
    p.num_query_groups = static_cast<int>(groups_);
    p.head_offset = static_cast<int>(tp_rank_ * heads_);
    p.total_heads = static_cast<int>(d_.heads);
    p.batch = static_cast<int>(d_.micro_batch);
    p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d_.head_dim()));
    p.dropout_p = rt.dropout(d_.attention_dropout);
    p.rng = rt.rng(index_, DropoutSite::Attention);
    p.backend = rt.ctx.attention;
    p.head_dim = static_cast<int>(d_.head_dim());
    return p;
}

void TransformerLayer::forward(ModelRuntime& rt, TensorParallel& tp, const LayerParams& w, LayerActivations& a,
                               Buffer& out, bool keep, bool store_probs, const TensorView& attention_workspace,
                               const NextNorm& next) const {
    const int64_t N = rows_, R = local_rows_, H = d_.hidden, S = d_.seq, B = d_.micro_batch;
    const float p_hidden = rt.dropout(d_.hidden_dropout);
    const TensorView x = a.input.view({R, H});
    const bool sp = tp.sequence_parallel();
    Buffer gathered = sp ? rt.stored_workspace(N * H) : Buffer{};  // a norm output gathered to all N rows
    // Row-parallel output before the reduction: f32, rounded once after the bias and residual add.
    Buffer branch = rt.workspace(N * H);
    const TensorView br = branch.view({N, H});

    // Attention block. ln1 is there already when the previous layer's output residual computed it.
    if (a.ln1.out.empty()) norm_forward(rt, d_, a.ln1, x, w.ln1_w, w.ln1_b);
    const TensorView ln1_full = sp ? gathered.view({N, H}) : a.ln1.out.view({N, H});
    tp.gather_rows(a.ln1.out.view({R, H}), ln1_full);
    a.qkv = rt.stored_activation(N * qkv_width_);
    const TensorView qkv = a.qkv.view({S, B, qkv_width_});
    ops::linear_forward(rt.ctx, qkv, ln1_full, w.qkv_w, w.qkv_b);
    rt.store(qkv);

    const AttentionParams ap = attention_params(rt);
    if (!rope_cos_.empty()) {  // kept rotated: backward (and selective recompute) never rotates again
        ops::rope_forward(rt.ctx, qkv, rope_cos_, rope_sin_, ap, static_cast<int>(d_.rotary_dim), d_.rotary_interleaved,
                          0);
        rt.store(qkv);
    }
    Buffer probs = rt.activation(ops::attention_saved_elements(rt.ctx.device, ap, S));
    a.context = rt.stored_activation(N * width_);
    const TensorView context = a.context.view({S, B, width_});
    ops::attention_forward(rt.ctx, context, saved_view(rt, probs), qkv, attention_workspace, ap);
    rt.store(context);
    if (store_probs) a.probs = std::move(probs);
    probs.reset();

    ops::linear_forward(rt.ctx, br, reshaped(context, {N, width_}), w.proj_w, {});
    Buffer reduced_buffer = sp ? rt.workspace(R * H) : Buffer{};  // without SP the reduction is in place
    const TensorView reduced = sp ? reduced_buffer.view({R, H}) : br;
    tp.reduce_rows(br, reduced);
    a.residual2 = rt.stored_activation(R * H);
    const TensorView x2 = a.residual2.view({R, H});
    // x2 = x + dropout(proj + b) and the MLP's input norm of x2 in one pass per row (the same bits as
    // residual_add, then norm_forward).
    residual_norm_forward(rt, d_, a.ln2, x2, x, reduced, w.proj_b, p_hidden,
                          rt.rng(index_, DropoutSite::AttentionOutput), residual_offset(), w.ln2_w, w.ln2_b);

    // MLP block.
    const TensorView ln2_full = sp ? gathered.view({N, H}) : a.ln2.out.view({N, H});
    tp.gather_rows(a.ln2.out.view({R, H}), ln2_full);
    a.fc1 = rt.stored_activation(N * fc1_width_);
    const TensorView fc1 = a.fc1.view({N, fc1_width_});
    if (d_.swiglu) {
        ops::linear_forward(rt.ctx, fc1, ln2_full, w.fc1_w, w.fc1_b);
        rt.store(fc1);
    }
    a.act = rt.stored_activation(N * ffn_);
    const TensorView act = a.act.view({N, ffn_});
    if (d_.swiglu)
        ops::swiglu_forward(rt.ctx, act, fc1);
    else  // fc1 + GELU (one cuBLASLt epilogue on CUDA); fc1 keeps the pre-activation for backward
        ops::linear_gelu_forward(rt.ctx, act, fc1, ln2_full, w.fc1_w, w.fc1_b, rt.storage);
    rt.store(act);
    ops::linear_forward(rt.ctx, br, act, w.fc2_w, {});
    tp.reduce_rows(br, reduced);
    out = rt.stored_activation(R * H);
    const TensorView y = out.view({R, H});
    const RngStream mlp_rng = rt.rng(index_, DropoutSite::MlpOutput);
    if (!next) {  // no norm reads the output next on this rank: a pipeline send (or a recompute's last output)
        residual_add(rt, y, x2, reduced, w.fc2_b, p_hidden, mlp_rng);
        rt.store(y);
        if (!keep) a.drop_intermediates();
        return;
    }
    // y = x2 + dropout(fc2 + b) and the next norm of y in one pass per row. The next norm's buffers
    // are allocated here, before this layer's workspace is freed and (without keep) after its
    // intermediates but x2 are: the tracked peaks stay those of the unfused order (docs/memory.md).
    MWB_CHECK(next.n->out.empty(), "layer {}: the next norm's output is computed already", index_);
    Buffer residual2 = keep ? Buffer{} : std::move(a.residual2);
    if (!keep) a.drop_intermediates();
    residual_norm_forward(rt, d_, *next.n, y, x2, reduced, w.fc2_b, p_hidden, mlp_rng, residual_offset(), next.w,
                          next.b);
}

void TransformerLayer::backward(ModelRuntime& rt, TensorParallel& tp, const LayerParams& w, const LayerParams& g,
                                LayerActivations& a, const TensorView& d, const TensorView& attention_workspace) const {
    const int64_t N = rows_, R = local_rows_, H = d_.hidden, S = d_.seq, B = d_.micro_batch;
    const float p_hidden = rt.dropout(d_.hidden_dropout);
    const bool sp = tp.sequence_parallel();
    Buffer branch_local = rt.workspace(R * H);  // gradient of a row-parallel output, local rows (never rounded)
    Buffer branch_full = sp ? rt.workspace(N * H) : Buffer{};
    Buffer gathered = sp ? rt.stored_workspace(N * H) : Buffer{};  // a norm output gathered again
    // Gradient of a column-parallel input (a norm output's gradient), stored like it; f32 partial sums
    // under tensor parallelism, rounded after their reduction. Also holds the unused output of a
    // selective recompute (N, A·D/t), which exceeds N·H only when kv_channels makes A·D > t·H.
    const int64_t grad_h_elements = N * std::max(H, width_);
    Buffer grad_h = tp_size_ == 1 ? rt.stored_workspace(grad_h_elements) : rt.workspace(grad_h_elements);
    Buffer grad_local = sp ? rt.workspace(R * H) : Buffer{};  // ... reduced to local rows (in place without SP)
    const TensorView dbl = branch_local.view({R, H});
    const TensorView dbr = sp ? branch_full.view({N, H}) : dbl;
    const TensorView dh = grad_h.view({N, H}), dhl = sp ? grad_local.view({R, H}) : dh;
    const auto full_rows = [&](const NormActivations& n) {
        if (!sp) return n.out.view({N, H});
        tp.gather_rows(n.out.view({R, H}), gathered.view({N, H}));
        return gathered.view({N, H});
    };

    // MLP block: out = x2 + dropout(fc2(act(fc1(ln2(x2)))) + b).
    ops::dropout_backward(rt.ctx, dbl, d, p_hidden, rt.rng(index_, DropoutSite::MlpOutput), residual_offset());
    tp.gather_rows(dbl, dbr);
    {
        Buffer grad_f = rt.stored_workspace(N * ffn_);
        const TensorView df = grad_f.view({N, ffn_});
        if (d_.swiglu) {
            ops::linear_backward(rt.ctx, df, g.fc2_w, g.fc2_b, dbr, a.act.view({N, ffn_}), w.fc2_w);
            rt.store(df);
        } else {  // fc2's dx through GELU' with fc1's bias gradient (one cuBLASLt epilogue on CUDA)
            ops::linear_backward_gelu(rt.ctx, df, g.fc1_b, g.fc2_w, g.fc2_b, dbr, a.act.view({N, ffn_}), w.fc2_w,
                                      a.fc1.view({N, ffn_}), rt.storage);
        }
        Buffer grad_fc1 = d_.swiglu ? rt.stored_workspace(N * fc1_width_) : Buffer{};  // GELU: in place
        const TensorView dfc1 = d_.swiglu ? grad_fc1.view({N, fc1_width_}) : df;
        if (d_.swiglu) {
            ops::swiglu_backward(rt.ctx, dfc1, df, a.fc1.view({N, fc1_width_}));
            rt.store(dfc1);
        }
        ops::linear_backward(rt.ctx, dh, g.fc1_w, d_.swiglu ? g.fc1_b : TensorView{}, dfc1, full_rows(a.ln2), w.fc1_w);
    }
    tp.reduce_rows(dh, dhl);
    rt.store(dhl);
    a.act.reset();
    a.fc1.reset();
    norm_backward(rt, d_, d, g.ln2_w, g.ln2_b, dhl, a.residual2.view({R, H}), a.ln2, w.ln2_w, true);
    a.ln2.reset();
    a.residual2.reset();

    // Attention block: x2 = x + dropout(proj(attention(qkv(ln1(x)))) + b).
    ops::dropout_backward(rt.ctx, dbl, d, p_hidden, rt.rng(index_, DropoutSite::AttentionOutput), residual_offset());
    tp.gather_rows(dbl, dbr);
    Buffer grad_ctx = rt.stored_workspace(N * width_);
    const TensorView dctx = grad_ctx.view({N, width_});
    ops::linear_backward(rt.ctx, dctx, g.proj_w, g.proj_b, dbr, a.context.view({N, width_}), w.proj_w);
    rt.store(dctx);

    const TensorView qkv = a.qkv.view({S, B, qkv_width_});
    const AttentionParams ap = attention_params(rt);
    TensorView context = a.context.view({S, B, width_});  // O for cuDNN's backward
    if (a.probs.empty()) {
        // Selective recompute: the attention core runs again (same dropout stream, so the same
        // probabilities); its output lands in the free grad_h buffer (the backward's O).
        a.probs = rt.activation(ops::attention_saved_elements(rt.ctx.device, ap, S));
        context = make_view(grad_h.data(), rt.stored_dtype(), {S, B, width_}, rt.ctx.device);
        ops::attention_forward(rt.ctx, context, saved_view(rt, a.probs), qkv, attention_workspace, ap);
    }
    {
        Buffer grad_qkv = rt.stored_workspace(N * qkv_width_);
        const TensorView dqkv = grad_qkv.view({S, B, qkv_width_});
        ops::attention_backward(rt.ctx, dqkv, reshaped(dctx, {S, B, width_}), qkv, context, saved_view(rt, a.probs),
                                attention_workspace, ap);
        rt.store(dqkv);
        a.probs.reset();
        a.context.reset();
        if (!rope_cos_.empty()) {
            ops::rope_backward(rt.ctx, dqkv, rope_cos_, rope_sin_, ap, static_cast<int>(d_.rotary_dim),
                               d_.rotary_interleaved, 0);
            rt.store(dqkv);
        }
        ops::linear_backward(rt.ctx, dh, g.qkv_w, g.qkv_b, reshaped(dqkv, {N, qkv_width_}), full_rows(a.ln1), w.qkv_w);
    }
    tp.reduce_rows(dh, dhl);
    rt.store(dhl);
    a.qkv.reset();
    norm_backward(rt, d_, d, g.ln1_w, g.ln1_b, dhl, a.input.view({R, H}), a.ln1, w.ln1_w, true);
    a.ln1.reset();
    a.input.reset();
}

}  // namespace mwb
