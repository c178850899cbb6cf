// Elementwise ops, storage rounding and the deterministic sum of squares.
#include "cpu_ops.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/precision.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace mwb::cpu {

void fill(OpContext&, TensorView x, float value) {
    float* p = x.f32();
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void copy(OpContext&, TensorView dst, TensorView src) {
    // 16-bit storage is emulated in f32 on the CPU: there is nothing else to copy or convert.
    MWB_CHECK(dst.dtype == DType::F32 && src.dtype == DType::F32, "copy: the CPU copies f32 tensors, got {} from {}",
              dst.describe(), src.describe());
    float* d = dst.f32();
    const float* s = src.f32();
    const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = s[i];
}

void scale(OpContext&, TensorView x, float alpha) {
    float* p = x.f32();
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] *= alpha;
}

void add(OpContext&, TensorView out, TensorView a, TensorView b) {
    float* o = out.f32();
    const float* pa = a.f32();
    const float* pb = b.f32();
    const int64_t n = out.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = pa[i] + pb[i];
}

void round_to(OpContext&, TensorView x, DType dtype) {
    float* p = x.f32();
    const int64_t n = x.numel();
    switch (dtype) {
    case DType::F32: return;
    case DType::BF16:
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; ++i) p[i] = round_to_bf16(p[i]);
        return;
    case DType::F16:
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; ++i) p[i] = round_to_fp16(p[i]);
        return;
    case DType::I32:
    case DType::F64: break;
    }
    MWB_FAIL("round_to: cannot round to {}", dtype_name(dtype));
}

namespace {

/// Σ over `ranges` of x, in their order, of each range's Σ x²: every range in fixed chunks from its
/// start, all ranges' chunks in one parallel pass, then summed in a fixed order (chunks of a range,
/// then ranges), so the result does not depend on the thread count.
double sum_squares_of(const float* x, const std::vector<IndexRange>& ranges) {
    constexpr int64_t kChunk = 1 << 14;
    std::vector<int64_t> chunk_begin(ranges.size() + 1, 0);  // the first chunk of each range
    for (std::size_t r = 0; r < ranges.size(); ++r)
        chunk_begin[r + 1] = chunk_begin[r] + (ranges[r].count + kChunk - 1) / kChunk;
    const int64_t chunks = chunk_begin.back();
    std::vector<double> partial(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
        const auto r = static_cast<std::size_t>(std::upper_bound(chunk_begin.begin(), chunk_begin.end(), c) -
                                                chunk_begin.begin() - 1);
        const int64_t begin = (c - chunk_begin[r]) * kChunk, end = std::min(ranges[r].count, begin + kChunk);
        const float* p = x + ranges[r].first;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = begin; i < end; ++i) s += static_cast<double>(p[i]) * p[i];
        partial[static_cast<std::size_t>(c)] = s;
    }
    double total = 0;
    for (std::size_t r = 0; r < ranges.size(); ++r) {
        double range_total = 0;
        for (int64_t c = chunk_begin[r]; c < chunk_begin[r + 1]; ++c)
            range_total += partial[static_cast<std::size_t>(c)];
        total += range_total;
    }
    return total;
}

}  // namespace

double sum_squares(OpContext&, TensorView x) {
    return sum_squares_of(x.f32(), {IndexRange{0, x.numel()}});
}

void sum_squares_ranges(OpContext&, TensorView out, TensorView x, const std::vector<IndexRange>& ranges) {
    *out.f64() = sum_squares_of(x.f32(), ranges);
}

void gradient_scale(OpContext&, TensorView scale, TensorView sumsq, double loss_scale, double clip_grad,
                    TensorView step) {
    if (!step.empty()) loss_scale = step.f64()[step_params::LossScale];
    const double norm = std::sqrt(*sumsq.f64()) / loss_scale;
    const bool found_inf = !std::isfinite(norm);
    float* s = scale.f32();
    s[0] = found_inf ? 0.0f : static_cast<float>(clip_coefficient(norm, clip_grad) / loss_scale);
    s[1] = found_inf ? 1.0f : 0.0f;
}

std::vector<double> read_f64(OpContext&, TensorView x) {
    return {x.f64(), x.f64() + x.numel()};
}

}  // namespace mwb::cpu
