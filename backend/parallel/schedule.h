#pragma once
// Pipeline schedules: the order in which one pipeline rank runs the forward and backward passes of
// its micro-batches. Megatron-LM's 1F1B (warm-up forwards, one-forward-one-backward steady state,
// cool-down backwards) and its interleaved variant over several model chunks (virtual stages).
#include <cstdint>
#include <vector>

namespace mwb {

struct PipelineAction {
    enum class Kind { Forward, Backward } kind;
    int chunk;      ///< model chunk of this rank (virtual stage chunk·P + rank)
    int64_t micro;  ///< micro-batch
    /// Consecutive actions with the same step exchange their messages at one point, before the first
    /// of them: every action is a step of its own, except the forward + backward pairs of the
    /// interleaved schedule's steady state (Megatron-LM's send_forward_backward_recv_forward_backward,
    /// without which the virtual stages' ring of rendezvous sends deadlocks on NCCL).
    int64_t step = 0;
};

/// Actions of pipeline rank `rank` of `stages` holding `chunks` model chunks, for `micro_batches`
/// micro-batches. forward_only: every forward in order (evaluation). With chunks > 1, micro_batches
/// must be a multiple of stages (as Megatron-LM's interleaved schedule requires).
std::vector<PipelineAction> pipeline_schedule(int stages, int rank, int chunks, int64_t micro_batches,
                                              bool forward_only);

}  // namespace mwb
