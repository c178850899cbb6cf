#include "model/gpt_model.h"

#include "model/init.h"
#include "model/norm.h"
#include "mwb/kernels/error.h"

#include <cmath>

namespace mwb {

GptModel::GptModel(const GptDims& dims, const RecomputePolicy& recompute, DType storage, OpContext& ctx,
                   Allocator& alloc)
    : d_(dims), recompute_(recompute), storage_(storage), ctx_(ctx), alloc_(alloc) {
    MWB_CHECK(d_.layers >= 1 && d_.hidden >= 1 && d_.heads >= 1 && d_.hidden % d_.heads == 0 && d_.seq >= 1 &&
                  d_.micro_batch >= 1 && d_.vocab >= 2 && d_.max_positions >= d_.seq && d_.ffn >= 1,
              "GptModel: inconsistent sizes (L={} H={} A={} F={} S={} B={} V={} P={})", d_.layers, d_.hidden,
              d_.heads, d_.ffn, d_.seq, d_.micro_batch, d_.vocab, d_.max_positions);
    wte_ = layout_.add("embedding.word_embeddings.weight", {d_.vocab, d_.hidden}, true);
    wpe_ = layout_.add("embedding.position_embeddings.weight", {d_.max_positions, d_.hidden}, true);
    for (int64_t l = 0; l < d_.layers; ++l) TransformerLayer::add_params(layout_, l, d_);
    lnf_w_ = layout_.add("decoder.final_layernorm.weight", {d_.hidden}, false);
    if (!d_.rmsnorm) lnf_b_ = layout_.add("decoder.final_layernorm.bias", {d_.hidden}, false);
    out_w_ = d_.tied_output ? wte_ : layout_.add("output_layer.weight", {d_.vocab, d_.hidden}, true);

    params_ = Buffer(alloc_, MemCategory::Weights, layout_.arena_elements());
    grads_ = Buffer(alloc_, MemCategory::Gradients, layout_.arena_elements());
    ops::fill(ctx_, params_.view(), 0.0f);
    ops::fill(ctx_, grads_.view(), 0.0f);
    ids_ = Buffer(alloc_, MemCategory::Data, d_.rows(), DType::I32);
    targets_ = Buffer(alloc_, MemCategory::Data, d_.rows(), DType::I32);
    AttentionParams ap;
    ap.num_heads = static_cast<int>(d_.heads);
    const int64_t ws_bytes = ops::attention_workspace_bytes(ap, d_.seq, ops::num_threads());
    attention_workspace_ = Buffer(alloc_, MemCategory::Workspace, (ws_bytes + 3) / 4);

    for (int64_t l = 0; l < d_.layers; ++l) {
        layers_.emplace_back(d_, l);
        w_.push_back(TransformerLayer::params(layout_, params_.view(), l, d_));
        g_.push_back(TransformerLayer::params(layout_, grads_.view(), l, d_));
    }
}

void GptModel::init_weights(uint64_t seed) {
    const float out_std = d_.init_std / std::sqrt(2.0f * static_cast<float>(d_.layers));
    for (std::size_t i = 0; i < layout_.size(); ++i) {
        const ParamInfo& p = layout_[i];
        const TensorView v = layout_.view(params_.view(), i);
        const bool is_norm = p.name.find("layernorm") != std::string::npos;
        if (p.name.ends_with(".bias")) {
            ops::fill(ctx_, v, 0.0f);
        } else if (is_norm) {
            ops::fill(ctx_, v, 1.0f);
        } else {
            const bool output_proj = p.name.ends_with("linear_proj.weight") || p.name.ends_with("linear_fc2.weight");
            normal_init(v, seed, tensor_stream(p.name), output_proj ? out_std : d_.init_std);
        }
    }
    ops::round_to(ctx_, params_.view(), storage_);
}

void GptModel::zero_grads() { ops::fill(ctx_, grads_.view(), 0.0f); }

void GptModel::prepare_inputs(const int32_t* tokens) {
    const int64_t S = d_.seq, B = d_.micro_batch;
    int32_t* ids = ids_.i32();
    int32_t* targets = targets_.i32();
    for (int64_t s = 0; s < S; ++s) {
        for (int64_t b = 0; b < B; ++b) {
            const int32_t in = tokens[b * (S + 1) + s], out = tokens[b * (S + 1) + s + 1];
            MWB_CHECK(in >= 0 && in < d_.vocab && out >= 0 && out < d_.vocab,
                      "token id {} at position {} of sample {} of the micro-batch is outside the vocabulary [0, {})",
                      (in < 0 || in >= d_.vocab) ? in : out, (in < 0 || in >= d_.vocab) ? s : s + 1, b, d_.vocab);
            ids[s * B + b] = in;
            targets[s * B + b] = out;
        }
    }
}

void GptModel::embed(ModelRuntime& rt, Buffer& x0) const {
    const int64_t N = d_.rows(), H = d_.hidden;
    x0 = rt.activation(N * H);
    const TensorView x = x0.view({N, H});
    ops::embedding_forward(ctx_, x, ids_.view(), layout_.view(params_.view(), wte_), 0);
    ops::position_embedding_forward(ctx_, x0.view({d_.seq, d_.micro_batch, H}), layout_.view(params_.view(), wpe_), 0);
    ops::dropout_forward(ctx_, x, x, rt.dropout(d_.hidden_dropout), rt.rng(-1, DropoutSite::Embedding), 0);
    rt.store(x);
}

double GptModel::head(ModelRuntime& rt, const Buffer& final_input, float grad_scale, const TensorView& d) const {
    const int64_t N = d_.rows(), H = d_.hidden, V = d_.vocab;
    const TensorView params = params_.view();
    const TensorView x = final_input.view({N, H});
    NormActivations lnf;
    norm_forward(rt, d_, lnf, x, layout_.view(params, lnf_w_), final_norm_bias(params));
    Buffer logits = rt.activation(N * V);
    const TensorView lg = logits.view({N, V});
    const TensorView out_w = layout_.view(params, out_w_);
    ops::linear_forward(ctx_, lg, lnf.out.view({N, H}), out_w, {});
    rt.store(lg);

    Buffer stats = rt.workspace(4 * N);  // row max, Σexp, target logit, then lse and row scale
    const TensorView row_max = make_view(stats.f32(), DType::F32, {N});
    const TensorView row_sum = make_view(stats.f32() + N, DType::F32, {N});
    const TensorView target_logit = make_view(stats.f32() + 2 * N, DType::F32, {N});
    const TensorView row_scale = make_view(stats.f32() + 3 * N, DType::F32, {N});
    ops::cross_entropy_partials(ctx_, row_max, row_sum, target_logit, lg, targets_.view(), 0);
    double loss_sum = 0;  // summed in row order: the same for any thread count
    float* lse = row_max.f32();
    for (int64_t n = 0; n < N; ++n) {
        lse[n] = lse[n] + std::log(row_sum.f32()[n]);
        loss_sum += static_cast<double>(lse[n]) - static_cast<double>(target_logit.f32()[n]);
    }
    const double loss = loss_sum / static_cast<double>(N);
    if (d.empty()) return loss;

    ops::fill(ctx_, row_scale, grad_scale / static_cast<float>(N));
    ops::cross_entropy_backward(ctx_, lg, targets_.view(), row_max, row_scale, 0);
    rt.store(lg);
    Buffer grad_ln = rt.workspace(N * H);
    const TensorView dln = grad_ln.view({N, H});
    ops::linear_backward(ctx_, dln, layout_.view(grads_.view(), out_w_), {}, lg, lnf.out.view({N, H}), out_w);
    rt.store(dln);
    logits.reset();
    norm_backward(rt, d_, d, layout_.view(grads_.view(), lnf_w_), final_norm_bias(grads_.view()), dln, x, lnf,
                  layout_.view(params, lnf_w_), false);
    return loss;
}

TensorView GptModel::final_norm_bias(const TensorView& arena) const {
    return d_.rmsnorm ? TensorView{} : layout_.view(arena, lnf_b_);
}

void GptModel::forward_layer(ModelRuntime& rt, int64_t l, std::vector<LayerActivations>& acts, Buffer& out,
                             bool keep) const {
    const bool store_probs = recompute_.granularity != RecomputeGranularity::Selective;
    layers_[l].forward(rt, w_[l], acts[l], out, keep, store_probs, attention_workspace_.view());
}

double GptModel::forward_backward(const int32_t* tokens, float grad_scale, uint64_t seed, uint64_t stream_base) {
    ModelRuntime rt{ctx_, alloc_, storage_, seed, stream_base, true};
    prepare_inputs(tokens);
    const int64_t L = d_.layers, N = d_.rows(), H = d_.hidden;

    // Forward. acts[l].input is layer l's input; a fully recomputed layer keeps its input only at the
    // start of its chunk.
    std::vector<LayerActivations> acts(static_cast<std::size_t>(L));
    embed(rt, acts[0].input);
    Buffer final_input;
    for (int64_t l = 0; l < L; ++l) {
        Buffer& out = l + 1 < L ? acts[l + 1].input : final_input;
        const bool keep = recompute_.stores_all(l);
        forward_layer(rt, l, acts, out, keep);
        if (!keep && recompute_.chunk_begin(l) != l) acts[l].input.reset();
    }
    stored_activation_bytes_ = alloc_.stats().of(MemCategory::Activations);

    // Loss and backward.
    Buffer grad = rt.workspace(N * H);
    const TensorView d = grad.view({N, H});
    const double loss = head(rt, final_input, grad_scale, d);
    final_input.reset();
    for (int64_t l = L - 1; l >= 0; --l) {
        if (!recompute_.stores_all(l) && l == recompute_.chunk_end(l, L) - 1) {
            // Recompute the whole chunk from its stored input, keeping everything, then run backward.
            for (int64_t j = recompute_.chunk_begin(l); j <= l; ++j) {
                Buffer out;
                forward_layer(rt, j, acts, out, true);
                if (j < l) acts[j + 1].input = std::move(out);
            }
        }
        layers_[l].backward(rt, w_[l], g_[l], acts[l], d, attention_workspace_.view());
    }

    // Embedding backward: x0 = dropout(wte[ids] + wpe).
    ops::dropout_backward(ctx_, d, d, rt.dropout(d_.hidden_dropout), rt.rng(-1, DropoutSite::Embedding), 0);
    ops::embedding_backward(ctx_, layout_.view(grads_.view(), wte_), d, ids_.view(), 0);
    ops::position_embedding_backward(ctx_, layout_.view(grads_.view(), wpe_), grad.view({d_.seq, d_.micro_batch, H}), 0);
    return loss;
}

double GptModel::evaluate(const int32_t* tokens) {
    ModelRuntime rt{ctx_, alloc_, storage_, 0, 0, false};
    prepare_inputs(tokens);
    std::vector<LayerActivations> acts(static_cast<std::size_t>(d_.layers));
    embed(rt, acts[0].input);
    Buffer x;
    for (int64_t l = 0; l < d_.layers; ++l) {
        Buffer out;
        forward_layer(rt, l, acts, out, false);
        acts[l].input.reset();
        if (l + 1 < d_.layers) acts[l + 1].input = std::move(out);
        else x = std::move(out);
    }
    return head(rt, x, 0.0f, {});
}

}  // namespace mwb
