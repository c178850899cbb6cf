#include "mwb/planner/timing.h"

#include <algorithm>

namespace mwb::planner {

double stage_microbatch_flops(const ModelShape& m, const Layout& l, int stage) {
    const double tokens = static_cast<double>(m.s * m.b);
    const double h = m.h;
    const double layer_fwd = m.layer_flops.total();  // per token
    const double layers = l.layers_per_stage;
    double flops = 3 * tokens * layers * layer_fwd;
    if (l.recompute == Recompute::FullUniform) flops += tokens * layers * layer_fwd;
    if (l.recompute == Recompute::FullBlock)
        flops += tokens * std::min(l.recompute_num_layers, l.layers_per_chunk) * l.vp * layer_fwd;
    if (l.recompute == Recompute::Selective) flops += tokens * layers * m.layer_flops.attention;
    if (stage == l.pp - 1) flops += 3 * tokens * 2 * h * static_cast<double>(m.V);
    return flops / l.tp;
}

namespace {

double link_time(const Collective& c, double bandwidth, double latency) {
    return static_cast<double>(c.bytes_sent) / bandwidth +
           static_cast<double>(c.calls) * ring_steps(c.op, c.group_size) * latency;
}

}  // namespace

Timing predict_time(const ModelShape& m, const Layout& l, const Precision& p, const Cluster& c,
                    const std::vector<StageCommunication>& comm, const ParameterCounts& params, const FlopCounts& flops,
                    double compute_efficiency, double train_tokens) {
    const DeviceSpec& d = c.device;
    Timing t;
    t.peak_flops = p.half ? d.peak_flops_16bit : d.peak_flops_fp32;
    t.compute_efficiency = compute_efficiency > 0 ? compute_efficiency : d.compute_efficiency;
    const int gpn = c.gpus_per_node;
    const double intra = d.intra_node_bandwidth * d.comm_efficiency, inter = d.inter_node_bandwidth * d.comm_efficiency;
    const auto bw = [&](bool same_node) { return same_node ? intra : inter; };
    const auto lat = [&](bool same_node) { return same_node ? d.intra_node_latency_s : d.inter_node_latency_s; };
    const bool tp_local = l.tp <= gpn, dp_local = l.tp * l.dp <= gpn && gpn % (l.tp * l.dp) == 0,
               pp_local = l.world <= gpn;

    const double mb = static_cast<double>(l.micro_batches);
    double slot = 0, slot_compute = 0, slot_tp = 0, slot_pp = 0;
    for (int r = 0; r < l.pp; ++r) {
        const double compute = stage_microbatch_flops(m, l, r) / (t.peak_flops * t.compute_efficiency);
        double tp = 0, pp = 0;
        for (const Collective& col : comm[static_cast<std::size_t>(r)].collectives) {
            if (!col.per_microbatch) continue;
            if (col.group == Group::TP || col.group == Group::SP) tp += link_time(col, bw(tp_local), lat(tp_local));
            if (col.group == Group::PP) pp += link_time(col, bw(pp_local), lat(pp_local));
        }
        // A stage waits for one receive per send it makes (activations before each chunk's forward,
        // gradients before its backward); its own sends overlap them on the full-duplex link.
        pp /= mb;
        tp /= mb;
        if (compute + tp + pp > slot) {
            slot = compute + tp + pp;
            slot_compute = compute;
            slot_tp = tp;
            slot_pp = pp;
            t.slowest_stage = r;
        }
    }
    // Once per iteration, after the pipeline: gradient reductions and scalars, the slowest rank's.
    double dp = 0, emb = 0;
    for (const StageCommunication& s : comm) {
        double stage_dp = 0, stage_emb = 0;
        for (const Collective& col : s.collectives) {
            if (col.per_microbatch) continue;
            if (col.group == Group::DP)
                stage_dp += link_time(col, bw(dp_local), lat(dp_local));
            else if (col.group == Group::TP || col.group == Group::SP)
                stage_dp += link_time(col, bw(tp_local), lat(tp_local));
            else
                stage_emb += link_time(col, bw(pp_local), lat(pp_local));
        }
        dp = std::max(dp, stage_dp);
        emb = std::max(emb, stage_emb);
    }
    const int64_t arena = params.max_arena_elements();
    const int64_t opt_arena = l.distributed_optimizer && l.dp > 1 ? (arena + l.dp - 1) / l.dp : arena;
    // AdamW reads the gradient and reads/writes master weights (or weights) and both moments; the
    // gradient-norm pass reads every gradient once more.
    const double opt_bytes = static_cast<double>(opt_arena) * (4 + 3 * 8 + (p.master ? p.weight : 0)) +
                             static_cast<double>(arena) * p.gradient;

    t.slot_s = slot;
    t.compute_s = mb * slot_compute;
    t.tp_s = mb * slot_tp;
    t.pp_s = mb * slot_pp;
    t.bubble_fraction = static_cast<double>(l.pp - 1) / (l.vp * mb);
    t.bubble_s = static_cast<double>(l.pp - 1) / l.vp * slot;
    t.dp_s = dp;
    t.embedding_s = emb;
    t.optimizer_s = opt_bytes / d.memory_bandwidth;
    t.iteration_s = t.compute_s + t.tp_s + t.pp_s + t.bubble_s + t.dp_s + t.embedding_s + t.optimizer_s;
    const double tokens = static_cast<double>(l.global_batch) * static_cast<double>(m.s);
    t.tokens_per_s = tokens / t.iteration_s;
    t.model_flops_per_s_per_device = flops.model / t.iteration_s / l.world;
    t.mfu = t.model_flops_per_s_per_device / t.peak_flops;
    t.hfu = flops.hardware / t.iteration_s / l.world / t.peak_flops;
    t.train_tokens = train_tokens;
    t.days = train_tokens / t.tokens_per_s / 86400.0;
    return t;
}

}  // namespace mwb::planner
