#include "backend/model/tensor_parallel.h"

#include "mwb/kernels/error.h"

namespace mwb {

void TensorParallel::copy(const TensorView& dst, const TensorView& src) {
    if (dst.data != src.data) ops::copy(ctx_, make_view(dst.data, DType::F32, {dst.numel()}, dst.device),
                                        make_view(src.data, DType::F32, {src.numel()}, src.device));
}

void TensorParallel::reduce_rows(const TensorView& full, const TensorView& local) {
    if (size() == 1) {
        copy(local, full);
        return;
    }
    if (sequence_parallel_) {
        MWB_CHECK(local.numel() * size() == full.numel() && local.data != full.data,
                  "reduce_rows: local {} is not a 1/{} shard of {}", local.describe(), size(), full.describe());
        sp_.reduce_scatter_sum(full.f32(), local.f32(), local.numel());
        return;
    }
    tp_.all_reduce_sum(full.f32(), full.numel());
    copy(local, full);
}

void TensorParallel::gather_rows(const TensorView& local, const TensorView& full) {
    if (sequence_parallel_) {
        MWB_CHECK(local.numel() * size() == full.numel(), "gather_rows: local {} is not a 1/{} shard of {}",
                  local.describe(), size(), full.describe());
        sp_.all_gather(local.f32(), full.f32(), local.numel());
        return;
    }
    copy(full, local);
}

}  // namespace mwb
