#pragma once
// What happens to gradients between the last backward and the optimizer (Megatron-LM's DDP and
// finalize_model_grads): sequence-parallel parameters' partial gradients summed over the tensor
// group, the tied word embedding's two copies summed over the embedding group (first and last
// pipeline stage), then the data-parallel average — an all-reduce in buckets, or with the distributed
// optimizer a reduce-scatter that leaves each rank the summed gradients of its shard only.
#include "backend/model/param_layout.h"
#include "mwb/kernels/ops.h"
#include "backend/parallel/parallel_context.h"

namespace mwb {

/// The part of the parameter arena whose optimizer state a rank owns.
struct ArenaShard {
    int64_t begin = 0, end = 0;
    int64_t size() const { return end - begin; }
};

/// Rank `rank` of `ranks`' equal share of an arena of `elements` (which must divide evenly).
ArenaShard arena_shard(int64_t elements, int ranks, int rank);

class GradientReducer {
public:
    /// tied: the word embedding is also the output layer (its two pipeline copies are summed).
    GradientReducer(const ParamLayout& layout, TensorView grads, ParallelContext& par, bool tied,
                    bool distributed_optimizer, int64_t bucket_elements, OpContext& ctx);
    /// Reduces the accumulated gradients; afterwards grads() holds the data-parallel mean (of this
    /// rank's shard only, with the distributed optimizer).
    void reduce();
    const ArenaShard& shard() const { return shard_; }

private:
    const ParamLayout& layout_;
    TensorView grads_;
    ParallelContext& par_;
    bool tied_;
    bool distributed_;
    int64_t bucket_;
    OpContext& ctx_;
    ArenaShard shard_;
};

}  // namespace mwb
