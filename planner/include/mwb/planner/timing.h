#pragma once
// Predicted iteration time, throughput, MFU and days to train.
//
//   slot       = max over stages of one micro-batch's (compute + tensor/sequence-parallel communication
//                + pipeline sends), all on the critical path (Megatron-LM overlaps none of them by default)
//   compute    = hardware FLOPs of the stage's micro-batch per rank / (peak × compute_efficiency)
//   pipeline   = (m + (p − 1)/v) · slot             (1F1B; bubble fraction (p − 1)/(v·m))
//   iteration  = pipeline + data-parallel + tied-embedding reductions (not overlapped: Megatron-LM's
//                default) + optimizer step (memory-bound: bytes touched / HBM bandwidth)
// Collectives take bytes_sent / (link bandwidth × comm_efficiency) + ring steps × latency; a group uses
// the intra-node link when all its ranks share a node (rank order tp-dp-pp), else the network.
#include "mwb/planner/cluster.h"
#include "mwb/planner/communication.h"
#include "mwb/planner/layout.h"
#include "mwb/planner/parameters.h"
#include "backend/telemetry/flops.h"

#include <vector>

namespace mwb::planner {

struct Timing {
    double peak_flops = 0;  ///< per device, for this precision
    double compute_efficiency = 0;
    int slowest_stage = 0;
    double slot_s = 0;           ///< one micro-batch on the slowest stage
    double compute_s = 0;        ///< m slots' compute
    double tp_s = 0;             ///< m slots' tensor/sequence-parallel communication
    double pp_s = 0;             ///< m slots' pipeline sends
    double bubble_s = 0;         ///< (p − 1)/v slots
    double bubble_fraction = 0;  ///< (p − 1)/(v·m)
    double dp_s = 0;             ///< DP gradient reduction and the norm/position-embedding gradient all-reduces
    double embedding_s = 0;      ///< tied-embedding gradients and scalar reductions (loss, gradient norm)
    double optimizer_s = 0;
    double iteration_s = 0;
    double tokens_per_s = 0;
    double model_flops_per_s_per_device = 0;
    double mfu = 0, hfu = 0;  ///< model / hardware FLOP/s over the peak
    double train_tokens = 0, days = 0;
};

/// Hardware FLOPs of one micro-batch on one rank of pipeline stage `stage` (the project's definition,
/// telemetry/flops.h, split by stage: layers, recomputation, and the head on the last stage).
double stage_microbatch_flops(const ModelShape& m, const Layout& l, int stage);

Timing predict_time(const ModelShape& m, const Layout& l, const Precision& p, const Cluster& c,
                    const std::vector<StageCommunication>& comm, const ParameterCounts& params, const FlopCounts& flops,
                    double compute_efficiency, double train_tokens);

}  // namespace mwb::planner
