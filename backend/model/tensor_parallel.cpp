#include "backend/model/tensor_parallel.h"

#include "mwb/kernels/error.h"

namespace mwb {

namespace {
/// A tensor's bytes as 4-byte words, for the communicators' float transfers of 16-bit rows (an
/// all-gather moves bytes; only sums need f32).
int64_t words(const TensorView& t) {
    const int64_t bytes = t.numel() * static_cast<int64_t>(dtype_size(t.dtype));
    MWB_CHECK(bytes % 4 == 0, "tensor parallel: {} is not a whole number of 4-byte words", t.describe());
    return bytes / 4;
}
}  // namespace

void TensorParallel::copy(const TensorView& dst, const TensorView& src) {
    // Between f32 and 16-bit rows the copy rounds (a sum's local rows, stored in 16 bits).
    if (dst.data != src.data) ops::copy(ctx_, make_view(dst.data, dst.dtype, {dst.numel()}, dst.device),
                                        make_view(src.data, src.dtype, {src.numel()}, src.device));
}

void TensorParallel::reduce_rows(const TensorView& full, const TensorView& local) {
    if (size() == 1) {
        copy(local, full);
        return;
    }
    MWB_CHECK(full.dtype == DType::F32, "reduce_rows: partial sums must be f32 (summed before any rounding), got {}",
              full.describe());
    if (sequence_parallel_) {
        MWB_CHECK(local.numel() * size() == full.numel() && local.data != full.data && local.dtype == DType::F32,
                  "reduce_rows: local {} is not an f32 1/{} shard of {}", local.describe(), size(), full.describe());
        sp_.reduce_scatter_sum(full.f32(), local.f32(), local.numel());
        return;
    }
    tp_.all_reduce_sum(full.f32(), full.numel());
    copy(local, full);
}

void TensorParallel::gather_rows(const TensorView& local, const TensorView& full) {
    if (sequence_parallel_) {
        MWB_CHECK(local.numel() * size() == full.numel() && local.dtype == full.dtype,
                  "gather_rows: local {} is not a 1/{} shard of {}", local.describe(), size(), full.describe());
        sp_.all_gather(static_cast<const float*>(local.data), static_cast<float*>(full.data), words(local));
        return;
    }
    copy(full, local);
}

}  // namespace mwb
