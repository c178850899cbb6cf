#include "mwb/planner/communication.h"

#include "backend/model/gpt_dims.h"

#include <algorithm>

namespace mwb::planner {

std::string_view group_name(Group g) {
    switch (g) {
        case Group::TP:
            return "tp";
        case Group::SP:
            return "sp";
        case Group::PP:
            return "pp";
        case Group::DP:
            return "dp";
        case Group::Embedding:
            return "embedding";
        case Group::Model:
            return "model";
    }
    return "?";
}

std::string_view op_name(CollectiveOp op) {
    switch (op) {
        case CollectiveOp::AllReduce:
            return "all_reduce";
        case CollectiveOp::AllGather:
            return "all_gather";
        case CollectiveOp::ReduceScatter:
            return "reduce_scatter";
        case CollectiveOp::Send:
            return "send";
    }
    return "?";
}

int64_t ring_bytes_sent(CollectiveOp op, int g, int64_t n) {
    if (op == CollectiveOp::Send) return n;
    if (g <= 1) return 0;
    return op == CollectiveOp::AllReduce ? 2 * (g - 1) * n / g : (g - 1) * (n / g);
}

int ring_steps(CollectiveOp op, int g) {
    if (op == CollectiveOp::Send) return 1;
    return op == CollectiveOp::AllReduce ? 2 * (g - 1) : g - 1;
}

namespace {

class Builder {
public:
    explicit Builder(StageCommunication& s) : s_(s) {}
    void add(std::string_view what, Group g, CollectiveOp op, int size, int64_t calls, int64_t payload,
             bool per_microbatch = true) {
        if (calls <= 0 || payload <= 0 || (op != CollectiveOp::Send && size <= 1)) return;
        const Collective c{what,          g, op, size, calls, payload, ring_bytes_sent(op, size, payload) * calls,
                           per_microbatch};
        s_.bytes_sent[static_cast<int>(g)] += c.bytes_sent;
        s_.payload[static_cast<int>(g)] += calls * payload;
        s_.collectives.push_back(c);
    }

private:
    StageCommunication& s_;
};

/// Layers of one model chunk that full recomputation runs forward a second time (per micro-batch).
int64_t recomputed_layers(const Layout& l) {
    if (l.recompute == Recompute::FullUniform) return l.layers_per_chunk;
    if (l.recompute == Recompute::FullBlock) return std::min(l.recompute_num_layers, l.layers_per_chunk);
    return 0;
}

}  // namespace

std::vector<StageCommunication> communication(const ModelShape& m, const Layout& l, const Precision& p,
                                              const ParameterCounts& params) {
    const int t = l.tp, vs = l.pp * l.vp;
    const int64_t mb = l.micro_batches, rows = m.s * m.b, local_rows = l.sp ? rows / t : rows;
    const int64_t X = rows * m.h * p.activation;   // one (s, b, h) stored activation (gathered norm outputs)
    const int64_t Xs = rows * m.h * p.partial_sum;  // ... as partial sums (reductions, dropout gradients)
    const int64_t norms = m.rmsnorm ? 2 : 4;      // norm parameter vectors per layer
    const int64_t layers = int64_t{l.layers_per_chunk} * l.vp, rec = recomputed_layers(l) * l.vp;
    std::vector<StageCommunication> out;
    for (int r = 0; r < l.pp; ++r) {
        StageCommunication s;
        s.stage = r;
        Builder b(s);
        bool first = false, last = false;
        int64_t sends_forward = 0, sends_backward = 0;
        for (int c = 0; c < l.vp; ++c) {
            const int stage = c * l.pp + r;
            first |= stage == 0;
            last |= stage == vs - 1;
            sends_forward += stage < vs - 1;
            sends_backward += stage > 0;
        }
        if (!l.sp) {
            b.add("layer outputs (forward)", Group::TP, CollectiveOp::AllReduce, t, mb * 2 * (layers + rec), Xs);
            b.add("layer input gradients (backward)", Group::TP, CollectiveOp::AllReduce, t, mb * 2 * layers, Xs);
            if (first) b.add("embedding output (forward)", Group::TP, CollectiveOp::AllReduce, t, mb, Xs);
            if (last) b.add("output-layer input gradient (backward)", Group::TP, CollectiveOp::AllReduce, t, mb, Xs);
        } else {
            b.add("norm outputs gathered (forward)", Group::SP, CollectiveOp::AllGather, t, mb * 2 * (layers + rec), X);
            b.add("layer outputs reduce-scattered (forward)", Group::SP, CollectiveOp::ReduceScatter, t,
                  mb * 2 * (layers + rec), Xs);
            b.add("output gradients gathered (backward)", Group::SP, CollectiveOp::AllGather, t, mb * 2 * layers, Xs);
            b.add("norm outputs gathered again (backward)", Group::SP, CollectiveOp::AllGather, t, mb * 2 * layers, X);
            b.add("input gradients reduce-scattered (backward)", Group::SP, CollectiveOp::ReduceScatter, t,
                  mb * 2 * layers, Xs);
            b.add("norm weight gradients", Group::SP, CollectiveOp::AllReduce, t, layers * norms, m.h * p.gradient,
                  false);
            if (first) {
                b.add("embedding output reduce-scattered (forward)", Group::SP, CollectiveOp::ReduceScatter, t, mb, Xs);
                b.add("embedding gradient gathered (backward)", Group::SP, CollectiveOp::AllGather, t, mb, Xs);
                b.add("position embedding gradient", Group::SP, CollectiveOp::AllReduce, t, 1, m.P * m.h * p.gradient,
                      false);
            }
            if (last) {
                b.add("final norm output gathered (forward)", Group::SP, CollectiveOp::AllGather, t, mb, X);
                b.add("final norm gradient reduce-scattered (backward)", Group::SP, CollectiveOp::ReduceScatter, t, mb,
                      Xs);
                b.add("final norm weight gradients", Group::SP, CollectiveOp::AllReduce, t, norms / 2, m.h * p.gradient,
                      false);
            }
        }
        if (last) {
            // Per chunk of the classifier (GptModel::head, chunks sized by logits_chunk_rows): the
            // max, then Σexp and the target logit, fp32 per row.
            const int64_t chunk = logits_chunk_rows(rows, m.V / t, p.logits, l.logits_chunk_bytes);
            const char* what = "cross-entropy max, sum-exp, target logit";
            b.add(what, Group::TP, CollectiveOp::AllReduce, t, 3 * mb * (rows / chunk), chunk * 4);
            b.add(what, Group::TP, CollectiveOp::AllReduce, t, rows % chunk > 0 ? 3 * mb : 0, rows % chunk * 4);
        }
        if (l.pp > 1) {
            const int64_t msg = local_rows * m.h * p.activation;
            b.add("activations to the next stage", Group::PP, CollectiveOp::Send, 2, mb * sends_forward, msg);
            b.add("gradients to the previous stage", Group::PP, CollectiveOp::Send, 2, mb * sends_backward, msg);
            b.add("loss (fp64)", Group::PP, CollectiveOp::AllReduce, l.pp, 1, 8, false);
        }
        if (l.pp > 1 && m.tied && (first || last))
            b.add("tied word-embedding gradients", Group::Embedding, CollectiveOp::AllReduce, 2, 1,
                  m.V / t * m.h * p.gradient, false);
        const int64_t arena = params.stages[static_cast<std::size_t>(r)].arena_elements;
        b.add("loss (fp64)", Group::DP, CollectiveOp::AllReduce, l.dp, 1, 8, false);
        if (l.distributed_optimizer) {
            b.add("gradients reduce-scattered", Group::DP, CollectiveOp::ReduceScatter, l.dp, 1, arena * p.gradient,
                  false);
            b.add("updated weights all-gathered", Group::DP, CollectiveOp::AllGather, l.dp, 1, arena * p.weight, false);
            b.add("squared gradient norm (fp64)", Group::DP, CollectiveOp::AllReduce, l.dp, 1, 8, false);
        } else if (l.dp > 1) {
            const int64_t bucket = l.bucket_elements > 0 ? l.bucket_elements : 40'000'000;
            if (arena / bucket > 0)
                b.add("gradients all-reduced (full buckets)", Group::DP, CollectiveOp::AllReduce, l.dp, arena / bucket,
                      bucket * p.gradient, false);
            b.add("gradients all-reduced (last bucket)", Group::DP, CollectiveOp::AllReduce, l.dp, arena % bucket > 0,
                  arena % bucket * p.gradient, false);
        }
        b.add("squared gradient norm (fp64)", Group::Model, CollectiveOp::AllReduce, t * l.pp, 1, 8, false);
        out.push_back(std::move(s));
    }
    return out;
}

}  // namespace mwb::planner
