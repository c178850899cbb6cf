#pragma once
// Bytes each rank communicates per iteration, per process group, collective by collective — the
// numbers the engine's communicators count (backend/parallel/communicator.h), call by call.
//
// Algorithm assumed: ring. Per rank and call, an all-reduce of n bytes over g ranks sends
// 2(g−1)·n/g (integer division, as counted), an all-gather (n = gathered size) or reduce-scatter
// (n = input size) sends (g−1)·n/g, a point-to-point send sends n. `payload` is the tensor bytes
// handed to the collective.
//
// What is communicated (Megatron-LM's scheme, as backend/model and backend/parallel implement it):
//  tp  tensor parallel without SP: per layer and micro-batch 2 all-reduces of s·b·h in forward
//      (attention and MLP outputs) and 2 in backward (their inputs' gradients), 2 more per recomputed
//      layer; the embedding output (first stage); the output layer's input gradient and 3 fp32
//      all-reduces of s·b for the vocabulary-parallel cross-entropy (last stage).
//  sp  sequence parallel replaces each all-reduce by an all-gather + reduce-scatter pair and gathers
//      the two norm outputs again in backward (they are kept sharded): per layer 6 all-gathers and 4
//      reduce-scatters of s·b·h, plus 2 + 2 per recomputed layer; once per iteration the gradients of
//      the norms and position embeddings (computed from local positions) are all-reduced.
//  pp  activations forward and gradients backward, s·b·h (s/t·b·h with SP), one per chunk boundary
//      a micro-batch crosses; the iteration's loss (one fp64) from the last stage.
//  dp  the loss (fp64); the rank's gradient arena all-reduced in buckets of ddp_bucket_size elements
//      (default 40M), or with the distributed optimizer reduce-scattered, the updated weights
//      all-gathered, and the squared gradient norm (fp64) all-reduced.
//  embedding  tied embeddings with pp > 1: the two copies' gradients, first and last stage.
//  model  the squared gradient norm (fp64) over the TP × PP ranks of a replica.
#include "mwb/planner/layout.h"
#include "mwb/planner/parameters.h"

#include <array>
#include <string_view>
#include <vector>

namespace mwb::planner {

enum class Group { TP, SP, PP, DP, Embedding, Model };
inline constexpr int kGroups = 6;
std::string_view group_name(Group g);  ///< "tp", "sp", "pp", "dp", "embedding", "model"

enum class CollectiveOp { AllReduce, AllGather, ReduceScatter, Send };
std::string_view op_name(CollectiveOp op);  ///< "all_reduce", "all_gather", "reduce_scatter", "send"
/// Bytes one rank sends for one call with a payload of n bytes over g ranks, under the ring algorithm.
int64_t ring_bytes_sent(CollectiveOp op, int group_size, int64_t payload);
/// Sequential steps of the ring (2(g−1) for all-reduce, g−1 for the others, 1 for a send).
int ring_steps(CollectiveOp op, int group_size);

struct Collective {
    std::string_view what;  ///< e.g. "layer outputs (forward)"
    Group group = Group::TP;
    CollectiveOp op = CollectiveOp::AllReduce;
    int group_size = 1;
    int64_t calls = 0;           ///< per iteration
    int64_t payload = 0;         ///< bytes per call
    int64_t bytes_sent = 0;      ///< per iteration (all calls), ring
    bool per_microbatch = true;  ///< part of every micro-batch's passes (else once per iteration)
};

struct StageCommunication {
    int stage = 0;
    std::vector<Collective> collectives;
    std::array<int64_t, kGroups> bytes_sent{};  ///< per group, per iteration
    std::array<int64_t, kGroups> payload{};     ///< per group, per iteration (Σ calls × payload)
};

std::vector<StageCommunication> communication(const ModelShape& m, const Layout& l, const Precision& p,
                                              const ParameterCounts& params);

}  // namespace mwb::planner
