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

namespace {
/// Σ over `group` of n gradient elements at element `first` of the arena, in its dtype: f32, or f16
/// (Communicator::all_reduce_sum_f16: fp32 adds, each combine rounded once; 2 bytes an element).
void all_reduce_elements(Communicator& group, const TensorView& arena, int64_t first, int64_t n) {
    if (arena.dtype == DType::F16)
        group.all_reduce_sum_f16(static_cast<uint16_t*>(arena.data) + first, n);
    else
        group.all_reduce_sum(arena.f32() + first, n);
}
}  // namespace

void GradientReducer::reduce() {
    MWB_CHECK(grads_.dtype == DType::F32 || grads_.dtype == DType::F16,
              "GradientReducer: a gradient arena of dtype {} (f32 or f16)", dtype_name(grads_.dtype));
    // Sequence parallelism: norms and position embeddings saw only this rank's positions.
    if (par_.sequence_parallel())
        for (const ParamInfo& p : layout_)
            if (p.sequence_parallel_grad) all_reduce_elements(par_.sp(), grads_, p.offset, p.numel);
    // Tied word embedding on two pipeline stages: both copies get the sum of their gradients.
    if (tied_ && par_.embedding().size() > 1)
        for (const ParamInfo& p : layout_)
            if (p.role == ParamRole::WordEmbedding) all_reduce_elements(par_.embedding(), grads_, p.offset, p.numel);

    const int dp = par_.dp_size();
    if (dp == 1) return;
    // The mean: an f32 arena is summed, then × 1/DP. An f16 arena is scaled by 1/DP first, as
    // Megatron-LM's DDP does (gradient_scaling_factor): its sum then never exceeds fp16's range where
    // the mean does not (each rank's arena holds about the mean already). For DP a power of two the
    // scaling is exact unless a value falls below fp16's normal range, so the result is the same.
    const float inv = 1.0f / static_cast<float>(dp);
    const bool prescale = grads_.dtype == DType::F16;
    if (prescale) ops::scale(ctx_, grads_, inv);
    if (!distributed_) {
        for (int64_t first = 0; first < grads_.numel(); first += bucket_) {
            const int64_t n = std::min(bucket_, grads_.numel() - first);
            all_reduce_elements(par_.dp(), grads_, first, n);
        }
        if (!prescale) ops::scale(ctx_, grads_, inv);
        return;
    }
    // Each rank receives the sum of its shard, in place at the start of the arena (no temporary),
    // then moves it to where the shard lives; the rest of the arena is stale from here on.
    if (grads_.dtype == DType::F16) {
        auto* g = static_cast<uint16_t*>(grads_.data);
        par_.dp().reduce_scatter_sum_f16(g, g, shard_.size());
    } else {
        par_.dp().reduce_scatter_sum(grads_.f32(), grads_.f32(), shard_.size());
    }
    const TensorView shard = slice_1d(grads_, shard_.begin, shard_.size());
    if (shard_.begin != 0) ops::copy(ctx_, shard, slice_1d(grads_, 0, shard_.size()));  // disjoint: begin >= size
    if (!prescale) ops::scale(ctx_, shard, inv);
}

}  // namespace mwb
