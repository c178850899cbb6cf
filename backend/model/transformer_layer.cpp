#include "model/transformer_layer.h"

#include <cmath>
#include <string>

namespace mwb {

namespace {
std::string layer_prefix(int64_t index) { return "decoder.layers." + std::to_string(index) + "."; }
}  // namespace

void LayerActivations::drop_intermediates() {
    ln1.reset();
    qkv.reset();
    probs.reset();
    context.reset();
    residual2.reset();
    ln2.reset();
    fc1.reset();
    gelu.reset();
}

void TransformerLayer::add_params(ParamLayout& layout, int64_t index, const GptDims& d) {
    const std::string p = layer_prefix(index);
    const int64_t H = d.hidden, F = d.ffn;
    layout.add(p + "input_layernorm.weight", {H}, false);
    if (!d.rmsnorm) layout.add(p + "input_layernorm.bias", {H}, false);
    layout.add(p + "self_attention.linear_qkv.weight", {3 * H, H}, true);
    layout.add(p + "self_attention.linear_qkv.bias", {3 * H}, false);
    layout.add(p + "self_attention.linear_proj.weight", {H, H}, true);
    layout.add(p + "self_attention.linear_proj.bias", {H}, false);
    layout.add(p + "pre_mlp_layernorm.weight", {H}, false);
    if (!d.rmsnorm) layout.add(p + "pre_mlp_layernorm.bias", {H}, false);
    layout.add(p + "mlp.linear_fc1.weight", {F, H}, true);
    layout.add(p + "mlp.linear_fc1.bias", {F}, false);
    layout.add(p + "mlp.linear_fc2.weight", {H, F}, true);
    layout.add(p + "mlp.linear_fc2.bias", {H}, false);
}

LayerParams TransformerLayer::params(const ParamLayout& layout, const TensorView& arena, int64_t index,
                                     const GptDims& d) {
    const std::string p = layer_prefix(index);
    const auto v = [&](const char* name) { return layout.view(arena, layout.index_of(p + name)); };
    const auto norm_bias = [&](const char* name) { return d.rmsnorm ? TensorView{} : v(name); };
    return LayerParams{v("input_layernorm.weight"),
                       norm_bias("input_layernorm.bias"),
                       v("self_attention.linear_qkv.weight"),
                       v("self_attention.linear_qkv.bias"),
                       v("self_attention.linear_proj.weight"),
                       v("self_attention.linear_proj.bias"),
                       v("pre_mlp_layernorm.weight"),
                       norm_bias("pre_mlp_layernorm.bias"),
                       v("mlp.linear_fc1.weight"),
                       v("mlp.linear_fc1.bias"),
                       v("mlp.linear_fc2.weight"),
                       v("mlp.linear_fc2.bias")};
}

AttentionParams TransformerLayer::attention_params(const ModelRuntime& rt) const {
    AttentionParams p;
    p.num_heads = static_cast<int>(d_.heads);
    p.head_offset = 0;
    p.total_heads = static_cast<int>(d_.heads);
    p.batch = static_cast<int>(d_.micro_batch);
    p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d_.head_dim()));
    p.dropout_p = rt.dropout(d_.attention_dropout);
    p.rng = rt.rng(index_, DropoutSite::Attention);
    return p;
}

void TransformerLayer::forward(ModelRuntime& rt, const LayerParams& w, LayerActivations& a, Buffer& out, bool keep,
                               bool store_probs, const TensorView& attention_workspace) const {
    const int64_t N = d_.rows(), H = d_.hidden, F = d_.ffn, S = d_.seq, B = d_.micro_batch, A = d_.heads;
    const TensorView x = a.input.view({N, H});

    // Attention block.
    norm_forward(rt, d_, a.ln1, x, w.ln1_w, w.ln1_b);
    a.qkv = rt.activation(N * 3 * H);
    const TensorView qkv = a.qkv.view({S, B, 3 * H});
    ops::linear_forward(rt.ctx, qkv, a.ln1.out.view({N, H}), w.qkv_w, w.qkv_b);
    rt.store(qkv);

    Buffer probs = rt.activation(B * A * S * S);
    a.context = rt.activation(N * H);
    const TensorView context = a.context.view({S, B, H});
    ops::attention_forward(rt.ctx, context, probs.view({B, A, S, S}), qkv, attention_workspace, attention_params(rt));
    rt.store(context);
    if (store_probs) a.probs = std::move(probs);
    probs.reset();

    Buffer branch = rt.workspace(N * H);  // proj output, then fc2 output
    const TensorView br = branch.view({N, H});
    ops::linear_forward(rt.ctx, br, context, w.proj_w, w.proj_b);
    rt.store(br);
    a.residual2 = rt.activation(N * H);
    const TensorView x2 = a.residual2.view({N, H});
    ops::dropout_add_forward(rt.ctx, x2, x, br, rt.dropout(d_.hidden_dropout), rt.rng(index_, DropoutSite::AttentionOutput),
                             0);
    rt.store(x2);

    // MLP block.
    norm_forward(rt, d_, a.ln2, x2, w.ln2_w, w.ln2_b);
    a.fc1 = rt.activation(N * F);
    const TensorView fc1 = a.fc1.view({N, F});
    ops::linear_forward(rt.ctx, fc1, a.ln2.out.view({N, H}), w.fc1_w, w.fc1_b);
    rt.store(fc1);
    a.gelu = rt.activation(N * F);
    const TensorView gelu = a.gelu.view({N, F});
    ops::gelu_forward(rt.ctx, gelu, fc1);
    rt.store(gelu);
    ops::linear_forward(rt.ctx, br, gelu, w.fc2_w, w.fc2_b);
    rt.store(br);
    out = rt.activation(N * H);
    const TensorView y = out.view({N, H});
    ops::dropout_add_forward(rt.ctx, y, x2, br, rt.dropout(d_.hidden_dropout), rt.rng(index_, DropoutSite::MlpOutput), 0);
    rt.store(y);

    if (!keep) a.drop_intermediates();
}

void TransformerLayer::backward(ModelRuntime& rt, const LayerParams& w, const LayerParams& g, LayerActivations& a,
                                const TensorView& d, const TensorView& attention_workspace) const {
    const int64_t N = d_.rows(), H = d_.hidden, F = d_.ffn, S = d_.seq, B = d_.micro_batch, A = d_.heads;
    const float p_hidden = rt.dropout(d_.hidden_dropout);
    Buffer branch = rt.workspace(N * H);  // gradient of the fc2 / proj output
    Buffer grad_h = rt.workspace(N * H);  // gradient of ln2 / context / ln1 output
    const TensorView dbr = branch.view({N, H}), dh = grad_h.view({N, H});

    // MLP block: out = x2 + dropout(fc2(gelu(fc1(ln2(x2))))).
    ops::dropout_backward(rt.ctx, dbr, d, p_hidden, rt.rng(index_, DropoutSite::MlpOutput), 0);
    {
        Buffer grad_f = rt.workspace(N * F);
        const TensorView df = grad_f.view({N, F});
        ops::linear_backward(rt.ctx, df, g.fc2_w, g.fc2_b, dbr, a.gelu.view({N, F}), w.fc2_w);
        rt.store(df);
        ops::gelu_backward(rt.ctx, df, df, a.fc1.view({N, F}));
        rt.store(df);
        ops::linear_backward(rt.ctx, dh, g.fc1_w, g.fc1_b, df, a.ln2.out.view({N, H}), w.fc1_w);
        rt.store(dh);
    }
    a.gelu.reset();
    a.fc1.reset();
    norm_backward(rt, d_, d, g.ln2_w, g.ln2_b, dh, a.residual2.view({N, H}), a.ln2, w.ln2_w, true);
    a.ln2.reset();
    a.residual2.reset();

    // Attention block: x2 = x + dropout(proj(attention(ln1(x)))).
    ops::dropout_backward(rt.ctx, dbr, d, p_hidden, rt.rng(index_, DropoutSite::AttentionOutput), 0);
    ops::linear_backward(rt.ctx, dh, g.proj_w, g.proj_b, dbr, a.context.view({N, H}), w.proj_w);
    rt.store(dh);
    a.context.reset();

    const TensorView qkv = a.qkv.view({S, B, 3 * H});
    const AttentionParams ap = attention_params(rt);
    if (a.probs.empty()) {
        // Selective recompute: the attention core runs again (same dropout stream, so the same
        // probabilities); its output lands in the free `branch` buffer and is not used.
        a.probs = rt.activation(B * A * S * S);
        ops::attention_forward(rt.ctx, branch.view({S, B, H}), a.probs.view({B, A, S, S}), qkv, attention_workspace, ap);
    }
    branch.reset();
    {
        Buffer grad_qkv = rt.workspace(N * 3 * H);
        const TensorView dqkv = grad_qkv.view({S, B, 3 * H});
        ops::attention_backward(rt.ctx, dqkv, reshaped(dh, {S, B, H}), qkv, a.probs.view({B, A, S, S}), attention_workspace,
                                ap);
        rt.store(dqkv);
        a.probs.reset();
        ops::linear_backward(rt.ctx, dh, g.qkv_w, g.qkv_b, dqkv, a.ln1.out.view({N, H}), w.qkv_w);
        rt.store(dh);
    }
    a.qkv.reset();
    norm_backward(rt, d_, d, g.ln1_w, g.ln1_b, dh, a.input.view({N, H}), a.ln1, w.ln1_w, true);
    a.ln1.reset();
    a.input.reset();
}

}  // namespace mwb
