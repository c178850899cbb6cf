#include "model/tensor_parallel.h"

#include "mwb/kernels/error.h"

#include <cstring>

namespace mwb {

void TensorParallel::reduce_rows(const TensorView& full, const TensorView& local) {
    if (size() == 1) {
        if (local.data != full.data) std::memcpy(local.data, full.data, static_cast<std::size_t>(full.numel()) * 4);
        return;
    }
    if (sequence_parallel_) {
        MWB_CHECK(local.numel() * size() == full.numel() && local.data != full.data,
                  "reduce_rows: local {} is not a 1/{} shard of {}", local.describe(), size(), full.describe());
        sp_.reduce_scatter_sum(full.f32(), local.f32(), local.numel());
        return;
    }
    tp_.all_reduce_sum(full.f32(), full.numel());
    if (local.data != full.data) std::memcpy(local.data, full.data, static_cast<std::size_t>(full.numel()) * 4);
}

void TensorParallel::gather_rows(const TensorView& local, const TensorView& full) {
    if (sequence_parallel_) {
        MWB_CHECK(local.numel() * size() == full.numel(), "gather_rows: local {} is not a 1/{} shard of {}",
                  local.describe(), size(), full.describe());
        sp_.all_gather(local.f32(), full.f32(), local.numel());
        return;
    }
    if (local.data != full.data) std::memcpy(full.data, local.data, static_cast<std::size_t>(local.numel()) * 4);
}

}  // namespace mwb
