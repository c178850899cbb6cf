// Elementwise ops, storage rounding and the deterministic sum of squares.
#include "cpu_ops.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/precision.h"

#include <omp.h>

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
    case DType::I32: break;
    }
    MWB_FAIL("round_to: cannot round to {}", dtype_name(dtype));
}

double sum_squares(OpContext&, TensorView x) {
    // Fixed chunks summed in a fixed order: the result does not depend on the thread count.
    constexpr int64_t kChunk = 1 << 14;
    const float* p = x.f32();
    const int64_t n = x.numel();
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> partial(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t end = std::min(n, (c + 1) * kChunk);
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = c * kChunk; i < end; ++i) s += static_cast<double>(p[i]) * p[i];
        partial[static_cast<std::size_t>(c)] = s;
    }
    double total = 0;
    for (double s : partial) total += s;
    return total;
}

}  // namespace mwb::cpu
