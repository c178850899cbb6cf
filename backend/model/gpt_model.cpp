#include "backend/model/gpt_model.h"

#include "backend/model/init.h"
#include "backend/model/norm.h"
#include "backend/model/rope.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/error.h"
#include "backend/parallel/self_communicator.h"

#include <algorithm>
#include <cmath>

namespace mwb {

GptModel::GptModel(const GptDims& dims, const RecomputePolicy& recompute, DType storage, OpContext& ctx,
                   Allocator& alloc, bool gradients, DType grad_dtype)
    : d_(dims),
      partition_(ModelPartition::whole(dims)),
      self_tp_(std::make_unique<SelfCommunicator>("tp")),
      self_sp_(std::make_unique<SelfCommunicator>("sp")),
      own_tp_(std::make_unique<TensorParallel>(*self_tp_, *self_sp_, false, ctx)),
      tp_(*own_tp_),
      recompute_(recompute),
      storage_(storage),
      ctx_(ctx),
      alloc_(alloc) {
    build(1, gradients, grad_dtype);
}

GptModel::GptModel(const GptDims& dims, const ModelPartition& partition, TensorParallel& tp,
                   const RecomputePolicy& recompute, DType storage, OpContext& ctx, Allocator& alloc,
                   int64_t arena_shards, bool gradients, DType grad_dtype)
    : d_(dims), partition_(partition), tp_(tp), recompute_(recompute), storage_(storage), ctx_(ctx), alloc_(alloc) {
    build(arena_shards, gradients, grad_dtype);
}

GptModel::~GptModel() = default;

void GptModel::build(int64_t arena_shards, bool gradients, DType grad_dtype) {
    const int t = tp_.size(), r = tp_.rank();
    MWB_CHECK(d_.layers >= 1 && d_.hidden >= 1 && d_.heads >= 1 && d_.head_dim() >= 1 &&
                  d_.heads % d_.kv_groups() == 0 && d_.seq >= 1 && d_.micro_batch >= 1 && d_.vocab >= 2 &&
                  (!d_.learned_positions() || d_.max_positions >= d_.seq) && d_.ffn >= 1 && d_.vocab % t == 0 &&
                  (d_.positions != GptDims::Positions::Rope ||
                   (d_.rotary_dim >= 2 && d_.rotary_dim % 2 == 0 && d_.rotary_dim <= d_.head_dim())) &&
                  !partition_.chunks.empty(),
              "GptModel: inconsistent sizes (L={} H={} A={} F={} S={} B={} V={} P={}, tensor-parallel {})", d_.layers,
              d_.hidden, d_.heads, d_.ffn, d_.seq, d_.micro_batch, d_.vocab, d_.max_positions, t);
    MWB_CHECK(alloc_.device() == ctx_.device,
              "GptModel: the allocator ({}) and the op context ({}) are on different devices",
              device_name(alloc_.device()), device_name(ctx_.device));
    local_rows_ = tp_.local_seq(d_.seq) * d_.micro_batch;
    vocab_local_ = d_.vocab / t;
    vocab_start_ = r * vocab_local_;
    const bool sp = tp_.sequence_parallel();

    if (partition_.embedding) {
        wte_ = layout_.add_split("embedding.word_embeddings.weight", ParamRole::WordEmbedding, {d_.vocab, d_.hidden}, 0,
                                 t, r);
        if (d_.learned_positions()) {
            wpe_ = layout_.add("embedding.position_embeddings.weight", ParamRole::PositionEmbedding,
                               {d_.max_positions, d_.hidden});
            layout_.mark_sequence_parallel(wpe_, sp);
        }
    }
    for (const auto& chunk : partition_.chunks)
        for (int64_t l = chunk.first_layer; l < chunk.end_layer; ++l) {
            TransformerLayer::add_params(layout_, l, d_, t, r, sp);
            layer_ids_.push_back(l);
        }
    if (partition_.head) {
        lnf_w_ = layout_.add("decoder.final_layernorm.weight", ParamRole::NormWeight, {d_.hidden});
        layout_.mark_sequence_parallel(lnf_w_, sp);
        if (!d_.rmsnorm) {
            lnf_b_ = layout_.add("decoder.final_layernorm.bias", ParamRole::NormBias, {d_.hidden});
            layout_.mark_sequence_parallel(lnf_b_, sp);
        }
        if (!d_.tied_output) {
            out_w_ = layout_.add_split("output_layer.weight", ParamRole::OutputWeight, {d_.vocab, d_.hidden}, 0, t, r);
        } else if (partition_.embedding) {
            out_w_ = wte_;
        } else {
            // Pipeline > 1 with tied weights: the last stage keeps its own copy of the word embedding,
            // initialised identically and kept in sync by summing gradients with the first stage's.
            out_w_ = layout_.add_split("embedding.word_embeddings.weight", ParamRole::WordEmbedding,
                                       {d_.vocab, d_.hidden}, 0, t, r);
            layout_.mark_tied_copy(out_w_);
        }
    }

    if (arena_shards > 1) layout_.pad_to_shards(arena_shards);
    // The weights' working copy: of the storage dtype on both devices (16-bit in bf16/fp16 runs, as the
    // planner counts it); the optimizer keeps the fp32 masters.
    params_ = Buffer(alloc_, MemCategory::Weights, layout_.arena_elements(), storage_);
    MWB_CHECK(grad_dtype == DType::F32 || grad_dtype == DType::F16,
              "GptModel: a gradient arena of dtype {} (f32, or f16 for fp16 runs)", dtype_name(grad_dtype));
    if (gradients) grads_ = Buffer(alloc_, MemCategory::Gradients, layout_.arena_elements(), grad_dtype);
    ops::fill(ctx_, params_.view(), 0.0f);
    if (gradients) ops::fill(ctx_, grads_.view(), 0.0f);
    AttentionParams ap;
    ap.num_heads = static_cast<int>(d_.heads / t);
    ap.num_query_groups = static_cast<int>(d_.kv_groups() / t);
    ap.batch = static_cast<int>(d_.micro_batch);
    const int64_t ws_bytes = ops::attention_workspace_bytes(ctx_.device, ap, d_.seq, ops::num_threads());
    attention_workspace_ = Buffer(alloc_, MemCategory::Workspace, (ws_bytes + 3) / 4);
    if (d_.positions == GptDims::Positions::Rope && !layer_ids_.empty()) build_rope_tables();

    const bool rope = !rope_cos_.empty();
    const TensorView cos = rope ? rope_cos_.view({d_.seq, d_.rotary_dim / 2}) : TensorView{};
    const TensorView sin = rope ? rope_sin_.view({d_.seq, d_.rotary_dim / 2}) : TensorView{};
    for (int64_t l : layer_ids_) {
        layers_.emplace_back(d_, tp_, l, cos, sin);
        w_.push_back(TransformerLayer::params(layout_, params_.view(), l, d_));
        if (gradients) g_.push_back(TransformerLayer::params(layout_, grads_.view(), l, d_));
    }
}

std::size_t GptModel::layer_slot(int64_t global_layer) const {
    const auto it = std::find(layer_ids_.begin(), layer_ids_.end(), global_layer);
    MWB_CHECK(it != layer_ids_.end(), "layer {} is not held by this rank", global_layer);
    return static_cast<std::size_t>(it - layer_ids_.begin());
}

void GptModel::build_rope_tables() {
    // Once per run in float64, then rounded to the activation precision like any stored activation.
    const int64_t half = d_.rotary_dim / 2;
    rope_cos_ = Buffer(alloc_, MemCategory::Workspace, d_.seq * half);
    rope_sin_ = Buffer(alloc_, MemCategory::Workspace, d_.seq * half);
    std::vector<float> cos(static_cast<std::size_t>(d_.seq * half)), sin(cos.size());
    rotary_tables(d_, d_.seq, cos.data(), sin.data());
    if (alloc_.device() == Device::CPU) {
        std::copy(cos.begin(), cos.end(), rope_cos_.f32());
        std::copy(sin.begin(), sin.end(), rope_sin_.f32());
    } else {
        device::copy_to_device(rope_cos_.data(), cos.data(), d_.seq * half * 4);
        device::copy_to_device(rope_sin_.data(), sin.data(), d_.seq * half * 4);
    }
    const ModelRuntime rt = runtime(MicroState{}, false);
    rt.store(rope_cos_.view());
    rt.store(rope_sin_.view());
}

void GptModel::init_weights(uint64_t seed) {
    const float out_std = d_.init_std / std::sqrt(2.0f * static_cast<float>(d_.layers));
    std::vector<float> host;
    std::vector<uint16_t> host16;
    for (std::size_t i = 0; i < layout_.size(); ++i) {
        const ParamInfo& p = layout_[i];
        const TensorView v = layout_.view(params_.view(), i);
        if (role_is_bias(p.role)) {
            ops::fill(ctx_, v, 0.0f);
        } else if (p.role == ParamRole::NormWeight) {
            ops::fill(ctx_, v, 1.0f);
        } else {
            // Drawn in fp32 on the host (the same Philox values on every device), then stored: rounded
            // into a 16-bit arena by the CPU's copy (on a GPU into host memory, then uploaded: the
            // same bits on both devices, 2 bytes an element).
            host.resize(static_cast<std::size_t>(v.numel()));
            TensorView hv = v;
            hv.data = host.data();
            hv.dtype = DType::F32;
            hv.device = Device::CPU;
            normal_init_slice(hv, p, seed, role_is_output_projection(p.role) ? out_std : d_.init_std);
            if (v.device == Device::CPU) {
                ops::copy(ctx_, v, hv);
            } else {
                TensorView stored = hv;  // a 16-bit arena: the rounding, in host16
                stored.dtype = v.dtype;
                if (stored.dtype != DType::F32) {
                    host16.resize(host.size());
                    stored.data = host16.data();
                    OpContext cpu;
                    ops::copy(cpu, stored, hv);
                }
                device::copy_to_device(v.data, stored.data, v.numel() * static_cast<int64_t>(dtype_size(v.dtype)));
            }
        }
    }
}

void GptModel::zero_grads() {
    if (!grads_.empty()) ops::fill(ctx_, grads_.view(), 0.0f);
}

ModelRuntime GptModel::runtime(const MicroState& st, bool training) {
    ModelRuntime rt{ctx_, alloc_, storage_, st.seed, st.stream_base, training};
    if (!st.step.empty()) {
        rt.iteration = st.step.f64() + step_params::Iteration;
        rt.micro_batch = st.global_micro_batch;
    }
    return rt;
}

void GptModel::lay_out_inputs(const int32_t* tokens, int32_t* ids, int32_t* targets) const {
    const int64_t S = d_.seq, B = d_.micro_batch;
    for (int64_t s = 0; s < S; ++s) {
        for (int64_t b = 0; b < B; ++b) {
            const int32_t in = tokens[b * (S + 1) + s], out = tokens[b * (S + 1) + s + 1];
            MWB_CHECK(in >= 0 && in < d_.vocab && out >= 0 && out < d_.vocab,
                      "token id {} at position {} of sample {} of the micro-batch is outside the vocabulary [0, {})",
                      (in < 0 || in >= d_.vocab) ? in : out, (in < 0 || in >= d_.vocab) ? s : s + 1, b, d_.vocab);
            if (ids) ids[s * B + b] = in;
            if (targets) targets[s * B + b] = out;
        }
    }
}

void GptModel::prepare_inputs(MicroState& st, const MicroBatch& mb, bool want_ids, bool want_targets) {
    if (!want_ids && !want_targets) return;
    const int64_t S = d_.seq, B = d_.micro_batch;
    if (!mb.inputs.empty()) {
        // Laid out and uploaded by the caller (a CUDA graph's fixed buffer).
        MWB_CHECK(mb.inputs.dtype == DType::I32 && mb.inputs.numel() == 2 * S * B,
                  "GptModel: a micro-batch's inputs are 2 x {} ids, got {}", S * B, mb.inputs.describe());
        if (want_ids) st.ids_view = slice_1d(mb.inputs, 0, S * B);
        if (want_targets) st.targets_view = slice_1d(mb.inputs, S * B, S * B);
        return;
    }
    MWB_CHECK(mb.tokens != nullptr, "GptModel: this chunk needs the micro-batch's tokens");
    if (want_ids) st.ids = Buffer(alloc_, MemCategory::Data, S * B, DType::I32);
    if (want_targets) st.targets = Buffer(alloc_, MemCategory::Data, S * B, DType::I32);
    st.ids_view = st.ids.view();
    st.targets_view = st.targets.view();
    // On a GPU the ids are laid out in pinned host memory first (ids, then targets), then uploaded
    // asynchronously on the op stream.
    const bool on_device = alloc_.device() != Device::CPU;
    if (on_device && !staging_) staging_ = std::make_unique<HostStaging>();
    int32_t* host = on_device ? static_cast<int32_t*>(staging_->next(2 * S * B * 4)) : nullptr;
    int32_t* ids = want_ids ? (on_device ? host : st.ids.i32()) : nullptr;
    int32_t* targets = want_targets ? (on_device ? host + S * B : st.targets.i32()) : nullptr;
    lay_out_inputs(mb.tokens, ids, targets);
    if (!on_device) return;
    if (want_ids) staging_->upload(st.ids.data(), 0, S * B * 4, ctx_.stream);
    if (want_targets) staging_->upload(st.targets.data(), S * B * 4, S * B * 4, ctx_.stream);
    staging_->uploaded(ctx_.stream);
}

void GptModel::embed(ModelRuntime& rt, const MicroState& st, Buffer& x0) {
    const int64_t N = d_.rows(), R = local_rows_, H = d_.hidden;
    const int64_t s_begin = tp_.seq_begin(d_.seq);
    x0 = rt.stored_activation(R * H);
    const TensorView wte = layout_.view(params_.view(), wte_);
    // The sum of word and position embedding is kept in f32 and rounded once, by the dropout's store.
    // Vocabulary-parallel: each rank embeds the ids of its vocabulary shard, zeros elsewhere; the
    // tensor-parallel sum (reduce-scattered along the sequence under SP) is the embedding.
    Buffer partial = rt.workspace(N * H);
    ops::embedding_forward(ctx_, partial.view({N, H}), st.ids_view, wte, vocab_start_);
    Buffer local = tp_.sequence_parallel() ? rt.workspace(R * H) : Buffer{};  // else in place (R = N)
    const TensorView sum = tp_.sequence_parallel() ? local.view({R, H}) : partial.view({R, H});
    tp_.reduce_rows(partial.view({N, H}), sum);
    if (d_.learned_positions())
        ops::position_embedding_forward(ctx_, reshaped(sum, {R / d_.micro_batch, d_.micro_batch, H}),
                                        layout_.view(params_.view(), wpe_), s_begin);
    const TensorView x = x0.view({R, H});
    ops::dropout_forward(ctx_, x, sum, rt.dropout(d_.hidden_dropout), rt.rng(-1, DropoutSite::Embedding),
                         s_begin * d_.micro_batch * H);
    rt.store(x);
}

void GptModel::embed_backward(ModelRuntime& rt, const MicroState& st, const TensorView& d) {
    const int64_t N = d_.rows(), R = local_rows_, H = d_.hidden;
    const int64_t s_begin = tp_.seq_begin(d_.seq);
    // d (the embedding sum's gradient) is stored; the dropout's input gradient is f32 (not rounded).
    Buffer dropped = rt.workspace(R * H);
    const TensorView g = dropped.view({R, H});
    ops::dropout_backward(ctx_, g, d, rt.dropout(d_.hidden_dropout), rt.rng(-1, DropoutSite::Embedding),
                          s_begin * d_.micro_batch * H);
    if (d_.learned_positions())
        ops::position_embedding_backward(ctx_, layout_.view(grads_.view(), wpe_),
                                         reshaped(g, {R / d_.micro_batch, d_.micro_batch, H}), s_begin);
    Buffer full = tp_.sequence_parallel() ? rt.workspace(N * H) : Buffer{};
    const TensorView d_full = tp_.sequence_parallel() ? full.view({N, H}) : g;
    tp_.gather_rows(g, d_full);
    ops::embedding_backward(ctx_, layout_.view(grads_.view(), wte_), d_full, st.ids_view, vocab_start_);
}

TensorView GptModel::final_norm_bias(const TensorView& arena) const {
    return d_.rmsnorm ? TensorView{} : layout_.view(arena, lnf_b_);
}

namespace {
/// Rows [r0, r0 + count) of a row-major (rows, cols) view.
TensorView row_block(const TensorView& m, int64_t r0, int64_t count) {
    return reshaped(slice_1d(m, r0 * m.cols(), count * m.cols()), {count, m.cols()});
}
}  // namespace

void GptModel::head(ModelRuntime& rt, const MicroState& st, const Buffer& final_input, NormActivations& lnf,
                    float grad_scale, const TensorView& d, const TensorView& loss, bool accumulate) {
    const int64_t N = d_.rows(), R = local_rows_, H = d_.hidden, V = vocab_local_;
    const bool sp = tp_.sequence_parallel(), vocab_parallel = tp_.size() > 1, training = !d.empty();
    const TensorView params = params_.view();
    const TensorView x = final_input.view({R, H});
    if (lnf.out.empty()) norm_forward(rt, d_, lnf, x, layout_.view(params, lnf_w_), final_norm_bias(params));
    Buffer lnf_gathered = sp ? rt.stored_workspace(N * H) : Buffer{};
    const TensorView lnf_full = sp ? lnf_gathered.view({N, H}) : lnf.out.view({N, H});
    tp_.gather_rows(lnf.out.view({R, H}), lnf_full);
    const TensorView out_w = layout_.view(params, out_w_);

    // Softmax cross-entropy over the vocabulary shards, per row: max and Σexp combine by log-sum-exp,
    // the target's logit comes from the shard that holds it; logits are never gathered. Statistics:
    // [lse (the shard's max until combined) | Σexp | target logit | gradient scale], and with
    // tensor parallelism the all-reduced max; all stay on the device, reduced over the tensor group.
    Buffer stats = rt.workspace(4 * N);
    const TensorView sv = stats.view();
    const TensorView lse = slice_1d(sv, 0, N), sumexp = slice_1d(sv, N, N), target = slice_1d(sv, 2 * N, N),
                     row_scale = slice_1d(sv, 3 * N, N);
    Buffer global_max = vocab_parallel ? rt.workspace(N) : Buffer{};
    // The final norm output's gradient, stored like it; f32 partial sums under tensor parallelism.
    Buffer grad_ln = !training ? Buffer{} : vocab_parallel ? rt.workspace(N * H) : rt.stored_workspace(N * H);
    if (training && !st.step.empty())
        ops::fill_from(ctx_, row_scale, slice_1d(st.step, step_params::GradScale, 1), static_cast<float>(N));
    else if (training)
        ops::fill(ctx_, row_scale, grad_scale / static_cast<float>(N));

    // The classifier over chunks of rows (tokens), Liger-kernel style: per chunk the logits, their loss
    // statistics and gradient (in place), then the chunk's dx = g·W and dW += gᵀ·x, so only one chunk
    // of logits exists at a time. Without tensor parallelism one fused pass per row writes loss and
    // gradient (the row stays in cache between its reads).
    const int64_t chunk = logits_chunk_rows(N, V, static_cast<int64_t>(sizeof(float)), d_.logits_chunk_bytes);
    Buffer logits = rt.activation(chunk * V);
    const TensorView dw = training ? layout_.view(grads_.view(), out_w_) : TensorView{};
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
        const int64_t c = std::min(chunk, N - r0);
        const auto rows = [&](const TensorView& v) { return slice_1d(v, r0, c); };
        const TensorView lg = logits.view({c, V}), xin = row_block(lnf_full, r0, c);
        const TensorView targets = rows(st.targets_view);
        ops::linear_forward(ctx_, lg, xin, out_w, {});
        rt.store(lg);
        if (training && !vocab_parallel) {
            ops::cross_entropy_fused(ctx_, rows(lse), rows(target), lg, targets, rows(row_scale));
        } else {
            ops::cross_entropy_partials(ctx_, rows(lse), rows(sumexp), rows(target), lg, targets, vocab_start_);
            if (vocab_parallel) {
                const TensorView gmax = rows(global_max.view());
                ops::copy(ctx_, gmax, rows(lse));
                tp_.all_reduce_max(gmax);
                ops::cross_entropy_rescale(ctx_, rows(sumexp), rows(lse), gmax);
                tp_.all_reduce_sum(rows(sumexp));
                tp_.all_reduce_sum(rows(target));
                ops::cross_entropy_lse(ctx_, rows(lse), gmax, rows(sumexp));
            } else {
                ops::cross_entropy_lse(ctx_, rows(lse), rows(lse), rows(sumexp));
            }
            if (training) ops::cross_entropy_backward(ctx_, lg, targets, rows(lse), rows(row_scale), vocab_start_);
        }
        if (!training) continue;
        rt.store(lg);
        ops::linear_backward(ctx_, row_block(grad_ln.view({N, H}), r0, c), dw, {}, lg, xin, out_w);
    }
    logits.reset();
    ops::cross_entropy_loss_sum(ctx_, loss, lse, target, static_cast<double>(N), accumulate);
    if (!training) return;
    const TensorView dln = grad_ln.view({N, H});
    Buffer grad_local = sp ? rt.workspace(R * H) : Buffer{};
    const TensorView dln_local = sp ? grad_local.view({R, H}) : dln;
    tp_.reduce_rows(dln, dln_local);
    rt.store(dln_local);
    norm_backward(rt, d_, d, layout_.view(grads_.view(), lnf_w_), final_norm_bias(grads_.view()), dln_local, x, lnf,
                  layout_.view(params, lnf_w_), false);
}

void GptModel::forward_layer(ModelRuntime& rt, int64_t global_layer, LayerActivations& a, Buffer& out, bool keep,
                             const NextNorm& next) {
    const std::size_t slot = layer_slot(global_layer);
    const bool store_probs = recompute_.granularity != RecomputeGranularity::Selective;
    layers_[slot].forward(rt, tp_, w_[slot], a, out, keep, store_probs, attention_workspace_.view(), next);
}

NextNorm GptModel::input_norm(int64_t global_layer, LayerActivations& a) {
    const LayerParams& w = w_[layer_slot(global_layer)];
    return NextNorm{&a.ln1, w.ln1_w, w.ln1_b};
}

NextNorm GptModel::final_norm(NormActivations& lnf) {
    return NextNorm{&lnf, layout_.view(params_.view(), lnf_w_), final_norm_bias(params_.view())};
}

ForwardResult GptModel::forward(int chunk, const MicroBatch& mb, Buffer input) {
    MWB_CHECK(chunk >= 0 && chunk < num_chunks(), "forward: chunk {} of {}", chunk, num_chunks());
    const auto key = std::make_pair(chunk, mb.id);
    MWB_CHECK(!states_.contains(key), "forward: micro-batch {} of chunk {} is already in flight", mb.id, chunk);
    const auto& range = partition_.chunks[chunk];
    const bool has_embedding = partition_.embedding && chunk == 0;
    const bool has_head = partition_.head && chunk == num_chunks() - 1;
    const int64_t layers = range.end_layer - range.first_layer;
    MicroState st;
    st.seed = mb.seed;
    st.stream_base = mb.stream_base;
    st.step = mb.step;
    st.global_micro_batch = mb.global_micro_batch;
    st.acts.resize(static_cast<std::size_t>(layers));
    ModelRuntime rt = runtime(st, mb.training);
    prepare_inputs(st, mb, has_embedding, has_head);

    if (has_embedding) {
        embed(rt, st, st.acts[0].input);
    } else {
        MWB_CHECK(input.numel() == local_rows_ * d_.hidden && input.dtype() == stored_dtype(),
                  "forward: chunk {} needs an input of {} x {} {}, got {} elements of {}", chunk, local_rows_,
                  d_.hidden, dtype_name(stored_dtype()), input.numel(), dtype_name(input.dtype()));
        st.acts[0].input = std::move(input);
    }
    // A fully recomputed layer keeps its input only at the start of its recompute chunk; evaluation
    // keeps nothing. Each layer's output residual runs fused with the norm that reads it next: the
    // next layer's input norm, or the final norm after the head chunk's last layer; a chunk's output
    // that goes to a pipeline send stays unfused.
    Buffer out;
    NormActivations lnf;  // the final norm's output and statistics (head chunk), until the head returns
    for (int64_t l = 0; l < layers; ++l) {
        const bool last = l + 1 == layers;
        Buffer& next = last ? out : st.acts[l + 1].input;
        const NextNorm next_norm = !last      ? input_norm(range.first_layer + l + 1, st.acts[l + 1])
                                   : has_head ? final_norm(lnf)
                                              : NextNorm{};
        const bool keep = mb.training && recompute_.stores_all(l);
        forward_layer(rt, range.first_layer + l, st.acts[l], next, keep, next_norm);
        if (!keep && (!mb.training || recompute_.chunk_begin(l) != l)) st.acts[l].input.reset();
    }
    // What is kept for backward: the final norm belongs to the head, which runs now.
    stored_activation_bytes_ = alloc_.stats().of(MemCategory::Activations) - lnf.bytes();

    ForwardResult result;
    if (has_head) {
        if (mb.training) st.grad = rt.stored_workspace(local_rows_ * d_.hidden);
        // Without the caller's accumulator the loss comes back at once (evaluation, single-stage use).
        Buffer own = mb.loss_sum.empty() ? Buffer(alloc_, MemCategory::Workspace, 1, DType::F64) : Buffer{};
        head(rt, st, out, lnf, mb.grad_scale, mb.training ? st.grad.view({local_rows_, d_.hidden}) : TensorView{},
             own.empty() ? mb.loss_sum : own.view(), mb.accumulate_loss && own.empty());
        lnf.reset();
        if (!own.empty()) result.loss = ops::read_f64(ctx_, own.view())[0];
        out.reset();
    } else {
        result.output = std::move(out);
    }
    if (mb.training) states_.emplace(key, std::move(st));
    return result;
}

Buffer GptModel::backward(int chunk, int64_t id, Buffer grad_output) {
    const auto it = states_.find({chunk, id});
    MWB_CHECK(it != states_.end(), "backward: micro-batch {} of chunk {} has no forward in flight", id, chunk);
    MicroState& st = it->second;
    const auto& range = partition_.chunks[chunk];
    const bool has_embedding = partition_.embedding && chunk == 0;
    const bool has_head = partition_.head && chunk == num_chunks() - 1;
    const int64_t layers = range.end_layer - range.first_layer;
    ModelRuntime rt = runtime(st, true);
    Buffer grad = has_head ? std::move(st.grad) : std::move(grad_output);
    MWB_CHECK(grad.numel() == local_rows_ * d_.hidden && grad.dtype() == stored_dtype(),
              "backward: chunk {} needs an output gradient of {} x {} {}", chunk, local_rows_, d_.hidden,
              dtype_name(stored_dtype()));
    const TensorView d = grad.view({local_rows_, d_.hidden});

    for (int64_t l = layers - 1; l >= 0; --l) {
        if (!recompute_.stores_all(l) && l == recompute_.chunk_end(l, layers) - 1) {
            // Recompute the whole recompute chunk from its stored input, keeping everything.
            // Each output residual fused with the next layer's input norm as in forward (the same
            // bits); the chunk's last output is not needed.
            for (int64_t j = recompute_.chunk_begin(l); j <= l; ++j) {
                Buffer out;
                forward_layer(rt, range.first_layer + j, st.acts[j], out, true,
                              j < l ? input_norm(range.first_layer + j + 1, st.acts[j + 1]) : NextNorm{});
                if (j < l) st.acts[j + 1].input = std::move(out);
            }
        }
        const std::size_t slot = layer_slot(range.first_layer + l);
        layers_[slot].backward(rt, tp_, w_[slot], g_[slot], st.acts[l], d, attention_workspace_.view());
    }
    if (has_embedding) {
        embed_backward(rt, st, d);
        grad.reset();
    }
    states_.erase(it);
    return grad;
}

double GptModel::forward_backward(const int32_t* tokens, float grad_scale, uint64_t seed, uint64_t stream_base) {
    MWB_CHECK(num_chunks() == 1 && partition_.embedding && partition_.head,
              "forward_backward needs the whole model on this rank");
    MicroBatch mb;
    mb.tokens = tokens;
    mb.seed = seed;
    mb.stream_base = stream_base;
    mb.grad_scale = grad_scale;
    const ForwardResult r = forward(0, mb, {});
    backward(0, 0, {});
    return r.loss;
}

double GptModel::evaluate(const int32_t* tokens) {
    MWB_CHECK(num_chunks() == 1 && partition_.embedding && partition_.head,
              "evaluate needs the whole model on this rank");
    MicroBatch mb;
    mb.tokens = tokens;
    mb.training = false;
    return forward(0, mb, {}).loss;
}

std::vector<float> GptModel::forward_logits(const int32_t* tokens) {
    MWB_CHECK(num_chunks() == 1 && partition_.embedding && partition_.head && tp_.size() == 1,
              "forward_logits needs the whole model on one process");
    const int64_t S = d_.seq, B = d_.micro_batch, N = d_.rows(), H = d_.hidden, V = d_.vocab;
    ModelRuntime rt = runtime(MicroState{}, false);
    MicroState st;
    st.acts.resize(static_cast<std::size_t>(d_.layers));
    MicroBatch mb;
    mb.tokens = tokens;
    prepare_inputs(st, mb, true, false);
    embed(rt, st, st.acts[0].input);
    Buffer out;
    NormActivations lnf;
    for (int64_t l = 0; l < d_.layers; ++l) {  // as forward: each output residual fused with the next norm
        const bool last = l + 1 == d_.layers;
        Buffer& next = last ? out : st.acts[l + 1].input;
        forward_layer(rt, l, st.acts[l], next, false, last ? final_norm(lnf) : input_norm(l + 1, st.acts[l + 1]));
        st.acts[l].input.reset();
    }
    Buffer logits = rt.workspace(N * V);
    ops::linear_forward(ctx_, logits.view({N, V}), lnf.out.view({N, H}), layout_.view(params_.view(), out_w_), {});
    std::vector<float> rows(static_cast<std::size_t>(N * V)), result(rows.size());  // rows in (s, b) order
    if (alloc_.device() == Device::CPU)
        std::copy(logits.f32(), logits.f32() + N * V, rows.begin());
    else
        device::copy_to_host(rows.data(), logits.data(), N * V * 4);
    for (int64_t s = 0; s < S; ++s)
        for (int64_t b = 0; b < B; ++b)
            std::copy_n(rows.begin() + (s * B + b) * V, V, result.begin() + (b * S + s) * V);
    return result;
}

}  // namespace mwb
