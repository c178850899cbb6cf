#include "mwb/planner/memory.h"

#include "backend/parallel/schedule.h"

#include <algorithm>

namespace mwb::planner {

namespace {

/// Activations, workspace and token ids allocated during one pass, relative to its start, with the
/// highest value of each and of their sum.
class Tracker {
public:
    void act(int64_t delta) { move(act_, p_.act_peak, delta); }
    void ws(int64_t delta) { move(ws_, p_.ws_peak, delta); }
    void data(int64_t delta) { move(data_, p_.data_peak, delta); }
    PassProfile result() const {
        PassProfile r = p_;
        r.act_end = act_;
        r.ws_end = ws_;
        r.data_end = data_;
        return r;
    }

private:
    void move(int64_t& cur, int64_t& peak, int64_t delta) {
        cur += delta;
        peak = std::max(peak, cur);
        p_.total_peak = std::max(p_.total_peak, act_ + ws_ + data_);
    }
    int64_t act_ = 0, ws_ = 0, data_ = 0;
    PassProfile p_;
};

/// Megatron-LM's recompute policy over the layers of one chunk (RecomputePolicy in backend/model).
struct Policy {
    Recompute r = Recompute::None;
    int n = 0;  ///< recompute_num_layers
    bool stores_all(int l) const {
        if (r == Recompute::FullUniform) return false;
        if (r == Recompute::FullBlock) return l >= n;
        return true;
    }
    int chunk_begin(int l) const { return r == Recompute::FullUniform ? l / n * n : l; }
    int chunk_end(int l, int layers) const {
        return r == Recompute::FullUniform ? std::min(layers, chunk_begin(l) + n) : l + 1;
    }
};

/// Everything one pass needs, in bytes.
struct Shapes {
    LayerBytes b;
    WorkspaceBytes w;
    HeadBytes head;
    int64_t ids = 0, embedding_mask = 0;
    bool sp = false, tp = false, selective = false;
    Policy policy;

    explicit Shapes(const MemoryInputs& in)
        : b(layer_bytes(in.model, in.layout, in.precision, in.accounting)),
          w(workspace_bytes(in.model, in.layout, in.precision, in.device)),
          head(head_bytes(in.model, in.layout, in.precision, in.accounting)),
          ids(token_ids_bytes(in.model)),
          embedding_mask(embedding_mask_bytes(in.model, in.layout, in.accounting)),
          sp(in.layout.sp),
          tp(in.layout.tp > 1),
          selective(in.layout.recompute == Recompute::Selective),
          policy{in.layout.recompute, std::max(1, in.layout.recompute_num_layers)} {}
};

/// TransformerLayer::forward. The layer's input is counted already; its output (the next layer's
/// input) stays allocated. The norm that reads the output next (fused with the output residual) is
/// counted where the next layer or the head allocates it: the peaks are the same (docs/memory.md).
void forward_layer(Tracker& t, const Shapes& x, bool keep, bool store_probs) {
    const LayerBytes& b = x.b;
    const WorkspaceBytes& w = x.w;
    if (x.sp) t.ws(w.full);  // a norm output gathered to all N rows
    t.ws(w.full_sum);        // row-parallel output before the reduction
    t.act(b.ln1_out + b.ln1_stats);
    t.act(b.qkv);
    t.act(b.probs);
    t.act(b.context);
    if (!store_probs) t.act(-b.probs);
    if (x.sp) t.ws(w.local_sum);  // the reduce-scattered rows
    t.act(b.residual2 + b.masks);
    t.act(b.ln2_out + b.ln2_stats);
    t.act(b.fc1);
    t.act(b.gelu);
    t.act(b.input);  // the output
    if (!keep) t.act(-(b.all() - b.input - (store_probs ? 0 : b.probs)));
    t.ws(-(w.full_sum + (x.sp ? w.full + w.local_sum : 0)));
}

/// TransformerLayer::backward: frees everything the layer kept, its input included.
void backward_layer(Tracker& t, const Shapes& x, bool probs_kept) {
    const LayerBytes& b = x.b;
    const WorkspaceBytes& w = x.w;
    const int64_t held = w.local_sum + w.grad_input + (x.sp ? w.full_sum + w.full + w.local_sum : 0);
    t.ws(held);  // dropout gradient (local rows [, full rows]), [gathered norm output,] input gradient [, local]
    t.ws(w.grad_f);
    t.ws(w.grad_fc1);  // SwiGLU: the gradient of gate and up
    t.ws(-(w.grad_f + w.grad_fc1));
    t.act(-(b.gelu + b.fc1));
    t.act(-(b.ln2_out + b.ln2_stats + b.residual2 + b.masks));
    t.ws(w.grad_ctx);
    if (!probs_kept) t.act(b.probs);  // selective recompute: the attention core runs again
    t.ws(w.grad_qkv);
    t.act(-b.probs);
    t.act(-b.context);  // held through attention's backward: cuDNN reads O from it
    t.ws(-w.grad_qkv);
    t.act(-b.qkv);
    t.act(-(b.ln1_out + b.ln1_stats));
    t.act(-b.input);
    t.ws(-(w.grad_ctx + held));
}

/// GptModel::head in training: final norm, then the classifier chunk by chunk (one chunk of logits
/// at a time), the loss and the norm's backward.
void head(Tracker& t, const Shapes& x) {
    const WorkspaceBytes& w = x.w;
    t.act(x.head.norm_out + x.head.norm_stats);
    if (x.sp) t.ws(w.full);  // the final norm's output gathered for the output layer
    t.ws(w.loss_stats);
    if (x.tp) t.ws(w.row_max);
    t.ws(w.grad_norm_out);  // gradient of the final norm's output, filled chunk by chunk
    t.act(x.head.logits);   // one chunk's logits, reused by every chunk
    t.act(-x.head.logits);
    if (x.sp) t.ws(w.local_sum);
    t.ws(-(w.loss_stats + (x.tp ? w.row_max : 0) + w.grad_norm_out + (x.sp ? w.full + w.local_sum : 0)));
    t.act(-(x.head.norm_out + x.head.norm_stats));
}

}  // namespace

PassProfile forward_profile(const MemoryInputs& in, int layers, bool first, bool last) {
    const Shapes x(in);
    Tracker t;
    if (!first) t.act(x.b.input);  // received from the previous stage
    if (first) t.data(x.ids);      // input ids, kept until the backward
    if (last) t.data(x.ids);       // targets
    if (first) {
        t.act(x.b.input + x.embedding_mask);
        // The embedding sum before its rounding (vocabulary-parallel: partial, full rows), under SP
        // reduce-scattered into local rows.
        t.ws(x.w.full_sum + (x.sp ? x.w.local_sum : 0));
        t.ws(-(x.w.full_sum + (x.sp ? x.w.local_sum : 0)));
    }
    for (int l = 0; l < layers; ++l) {
        const bool keep = x.policy.stores_all(l);
        forward_layer(t, x, keep, !x.selective);
        if (!keep && x.policy.chunk_begin(l) != l) t.act(-x.b.input);
    }
    if (last) {
        t.ws(x.w.local);  // dL/d(final norm input), kept until the backward
        head(t, x);
        t.act(-x.b.input);  // the output, consumed by the head
    }
    PassProfile r = t.result();
    if (!last) r.sent_act = x.b.input;  // the output, sent to the next stage
    return r;
}

PassProfile backward_profile(const MemoryInputs& in, int layers, bool first, bool last) {
    const Shapes x(in);
    Tracker t;
    if (!last) t.ws(x.w.local);  // the output gradient received from the next stage
    for (int l = layers - 1; l >= 0; --l) {
        const bool stored = x.policy.stores_all(l);
        if (!stored && l == x.policy.chunk_end(l, layers) - 1) {
            // Recompute the chunk from its kept input, keeping everything, then run its backward.
            for (int j = x.policy.chunk_begin(l); j <= l; ++j) {
                forward_layer(t, x, true, true);
                if (j == l) t.act(-x.b.input);  // the recomputed output is not needed
            }
        }
        backward_layer(t, x, stored ? !x.selective : true);
    }
    if (first) {
        // The dropout's input gradient (partial-sum width), under SP gathered to all rows.
        t.ws(x.w.local_sum + (x.sp ? x.w.full_sum : 0));
        t.ws(-(x.w.local_sum + (x.sp ? x.w.full_sum : 0)));
        t.act(-x.embedding_mask);
    }
    if (first) t.ws(-x.w.local);  // the input gradient of the embedding: dropped
    if (first) t.data(-x.ids);
    if (last) t.data(-x.ids);
    PassProfile r = t.result();
    if (!first) r.sent_ws = x.w.local;  // the input gradient, sent to the previous stage
    return r;
}

std::vector<StageMemory> stage_memory(const MemoryInputs& in) {
    const Layout& l = in.layout;
    const Precision& p = in.precision;
    const int64_t persistent_ws = workspace_bytes(in.model, l, p, in.device).persistent;
    const int chunk_layers = l.layers_per_chunk;
    const int virtual_stages = l.pp * l.vp;
    // Profiles of the four kinds of chunk: with or without the embedding, with or without the head.
    PassProfile fwd[2][2], bwd[2][2];
    for (int f = 0; f < 2; ++f)
        for (int h = 0; h < 2; ++h) {
            fwd[f][h] = forward_profile(in, chunk_layers, f, h);
            bwd[f][h] = backward_profile(in, chunk_layers, f, h);
        }
    // The schedule repeats after its warm-up: 2p micro-batches show the steady state's peak (a
    // multiple of p, as the interleaved schedule needs, and never the all-forward case m = p unless m is).
    const int64_t m = l.pp == 1 ? 1 : std::min<int64_t>(l.micro_batches, 2 * int64_t{l.pp});

    std::vector<StageMemory> out;
    for (int r = 0; r < l.pp; ++r) {
        const StageParameters& sp = in.parameters.stages[static_cast<std::size_t>(r)];
        StageMemory s;
        s.stage = r;
        s.layers = sp.layers;
        const int64_t arena = sp.arena_elements;
        const int64_t shard = l.distributed_optimizer && l.dp > 1 ? arena / l.dp : arena;
        auto& cur = s.current;
        cur[static_cast<int>(MemCategory::Weights)] = arena * p.weight;
        cur[static_cast<int>(MemCategory::Gradients)] = arena * p.gradient;
        cur[static_cast<int>(MemCategory::Optimizer)] = shard * 4 * (p.master ? 3 : 2);
        cur[static_cast<int>(MemCategory::Workspace)] = persistent_ws;
        cur[static_cast<int>(MemCategory::Data)] = token_buffer_bytes(in.model);
        for (int64_t v : cur) s.allocated += v;

        int64_t act = 0, ws = 0, data = 0, act_pk = 0, ws_pk = 0, data_pk = 0, total_pk = 0;
        int flying = 0;
        int64_t sent_act = 0, sent_ws = 0;  // the previous pass's send buffers
        const auto apply = [&](const PassProfile& q) {
            act_pk = std::max(act_pk, act + q.act_peak);
            ws_pk = std::max(ws_pk, ws + q.ws_peak);
            data_pk = std::max(data_pk, data + q.data_peak);
            total_pk = std::max(total_pk, act + ws + data + q.total_peak);
            act += q.act_end - sent_act;
            ws += q.ws_end - sent_ws;
            data += q.data_end;
            sent_act = q.sent_act;
            sent_ws = q.sent_ws;
        };
        for (const PipelineAction& a : pipeline_schedule(l.pp, r, l.vp, m, false)) {
            const int stage = a.chunk * l.pp + r;
            const bool f = stage == 0, h = stage == virtual_stages - 1;
            const bool forward = a.kind == PipelineAction::Kind::Forward;
            apply(forward ? fwd[f][h] : bwd[f][h]);
            flying += forward ? 1 : -1;
            s.in_flight = std::max(s.in_flight, flying);
        }
        act -= sent_act;  // the iteration ends waiting for every send
        ws -= sent_ws;
        const bool f0 = r == 0, h0 = l.vp == 1 && r == l.pp - 1;
        s.kept_per_microbatch = fwd[f0][h0].act_end - fwd[f0][h0].sent_act;
        s.peak = cur;
        s.peak[static_cast<int>(MemCategory::Activations)] += act_pk;
        s.peak[static_cast<int>(MemCategory::Workspace)] += ws_pk;
        s.peak[static_cast<int>(MemCategory::Data)] += data_pk;
        s.peak_total = s.allocated + total_pk;
        out.push_back(s);
    }
    return out;
}

}  // namespace mwb::planner
