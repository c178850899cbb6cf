// Elementwise ops, storage rounding and the deterministic sum of squares.
#include "cpu_ops.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/precision.h"
#include "storage.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace mwb::cpu {

// fill, copy, scale, add and round_to on f32 or 16-bit views (the residual stream of a 16-bit run is
// 16-bit): one dispatch on the storage, loads widen, every store rounds once.
namespace {
template <DType T>
void fill_as(const TensorView& x, float value) {
    auto* p = elements<T>(x);
    const auto v = Storage<T>::store(value);
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] = v;
}

template <DType D, DType S>
void copy_as(const TensorView& dst, const TensorView& src) {
    auto* d = elements<D>(dst);
    const auto* s = elements<S>(src);
    const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = Storage<D>::store(Storage<S>::load(s[i]));
}

template <DType T>
void scale_as(const TensorView& x, float alpha) {
    auto* p = elements<T>(x);
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] = Storage<T>::store(Storage<T>::load(p[i]) * alpha);
}

template <DType T>
void add_as(const TensorView& out, const TensorView& a, const TensorView& b) {
    auto* o = elements<T>(out);
    const auto* pa = elements<T>(a);
    const auto* pb = elements<T>(b);
    const int64_t n = out.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = Storage<T>::store(Storage<T>::load(pa[i]) + Storage<T>::load(pb[i]));
}

/// x's values rounded to R's precision, kept in x's storage T.
template <DType T, class Round>
void round_as(const TensorView& x, Round round) {
    auto* p = elements<T>(x);
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] = Storage<T>::store(round(Storage<T>::load(p[i])));
}
}  // namespace

void fill(OpContext&, TensorView x, float value) {
    with_storage(x.dtype, [&](auto t) { fill_as<decltype(t)::value>(x, value); });
}

void fill_from(OpContext&, TensorView x, TensorView value, float divisor) {
    fill_as<DType::F32>(x, static_cast<float>(value.f64()[0]) / divisor);
}

void copy(OpContext&, TensorView dst, TensorView src) {
    // Between f32 and 16-bit views the copy converts: widening is exact, narrowing rounds once.
    with_storages(dst.dtype, src.dtype,
                  [&](auto dt, auto st) { copy_as<decltype(dt)::value, decltype(st)::value>(dst, src); });
}

void scale(OpContext&, TensorView x, float alpha) {
    with_storage(x.dtype, [&](auto t) { scale_as<decltype(t)::value>(x, alpha); });
}

void add(OpContext&, TensorView out, TensorView a, TensorView b) {
    with_storage(out.dtype, [&](auto t) { add_as<decltype(t)::value>(out, a, b); });
}

void round_to(OpContext&, TensorView x, DType dtype) {
    // A 16-bit view already holds values of its own precision: rounding to it (or to f32) keeps them.
    if (dtype == DType::F32 || dtype == x.dtype) return;
    with_storage(x.dtype, [&](auto t) {
        constexpr DType T = decltype(t)::value;
        if (dtype == DType::BF16)
            round_as<T>(x, [](float v) { return round_to_bf16(v); });
        else
            round_as<T>(x, [](float v) { return round_to_fp16(v); });
    });
}

namespace {

/// Σ over `ranges` of x, in their order, of each range's Σ x²: every range in fixed chunks from its
/// start, all ranges' chunks in one parallel pass, then summed in a fixed order (chunks of a range,
/// then ranges), so the result does not depend on the thread count.
/// X: the storage of x (f32, or the f16 gradient arena; each element widened exactly, squared in float64).
template <DType X>
double sum_squares_of(const typename Storage<X>::type* x, const std::vector<IndexRange>& ranges) {
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
        const auto* p = x + ranges[r].first;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = begin; i < end; ++i) {
            const double v = Storage<X>::load(p[i]);
            s += v * v;
        }
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
    return sum_squares_of<DType::F32>(x.f32(), {IndexRange{0, x.numel()}});
}

void sum_squares_ranges(OpContext&, TensorView out, TensorView x, const std::vector<IndexRange>& ranges) {
    *out.f64() = with_storage(x.dtype, [&](auto t) {
        return sum_squares_of<decltype(t)::value>(elements<decltype(t)::value>(x), ranges);
    });
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
