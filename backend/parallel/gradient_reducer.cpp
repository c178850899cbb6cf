#include "backend/parallel/gradient_reducer.h"

#include "mwb/kernels/error.h"

#include <algorithm>

namespace mwb {

ArenaShard arena_shard(int64_t elements, int ranks, int rank) {
    MWB_CHECK(elements % ranks == 0, "an arena of {} elements does not split over {} data-parallel ranks", elements,
              ranks);
    const int64_t per = elements / ranks;
    return {rank * per, (rank + 1) * per};
}

GradientReducer::GradientReducer(const ParamLayout& layout, TensorView grads, ParallelContext& par, bool tied,
                                 bool distributed_optimizer, int64_t bucket_elements, OpContext& ctx)
    : layout_(layout), grads_(grads), par_(par), tied_(tied), distributed_(distributed_optimizer && par.dp_size() > 1),
      bucket_(bucket_elements > 0 ? bucket_elements : int64_t{40'000'000}), ctx_(ctx),
      shard_(distributed_optimizer ? arena_shard(grads.numel(), par.dp_size(), par.coord().dp)
                                   : ArenaShard{0, grads.numel()}) {}

void GradientReducer::reduce() {
    float* g = grads_.f32();
    // Sequence parallelism: norms and position embeddings saw only this rank's positions.
    if (par_.sequence_parallel())
        for (const ParamInfo& p : layout_)
            if (p.sequence_parallel_grad) par_.sp().all_reduce_sum(g + p.offset, p.numel);
    // Tied word embedding on two pipeline stages: both copies get the sum of their gradients.
    if (tied_ && par_.embedding().size() > 1)
        for (const ParamInfo& p : layout_)
            if (p.role == ParamRole::WordEmbedding) par_.embedding().all_reduce_sum(g + p.offset, p.numel);

    const int dp = par_.dp_size();
    if (dp == 1) return;
    const float inv = 1.0f / static_cast<float>(dp);
    if (!distributed_) {
        for (int64_t first = 0; first < grads_.numel(); first += bucket_) {
            const int64_t n = std::min(bucket_, grads_.numel() - first);
            par_.dp().all_reduce_sum(g + first, n);
        }
        ops::scale(ctx_, grads_, inv);
        return;
    }
    // Each rank receives the sum of its shard, in place at the start of the arena (no temporary),
    // then moves it to where the shard lives; the rest of the arena is stale from here on.
    par_.dp().reduce_scatter_sum(g, g, shard_.size());
    const TensorView shard = slice_1d(grads_, shard_.begin, shard_.size());
    if (shard_.begin != 0) ops::copy(ctx_, shard, slice_1d(grads_, 0, shard_.size()));  // disjoint: begin >= size
    ops::scale(ctx_, shard, inv);
}

}  // namespace mwb
