// Widening 16-bit GEMM operands into fp32 scratch, and rounding computed results back (storage.h).
#include "storage.h"

#include <array>
#include <vector>

namespace mwb::cpu {

namespace {

template <DType T>
void widen(float* dst, const TensorView& src) {
    const auto* s = elements<T>(src);
    const int64_t n = src.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = Storage<T>::load(s[i]);
}

template <DType T>
void store_rounded(const TensorView& dst, const float* src) {
    auto* d = elements<T>(dst);
    const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = Storage<T>::store(src[i]);
}

TensorView as_f32(const TensorView& t, float* data) {
    TensorView v = t;
    v.data = data;
    v.dtype = DType::F32;
    return v;
}

}  // namespace

float* f32_scratch(Scratch slot, int64_t elements) {
    thread_local std::array<std::vector<float>, kScratchSlots> scratch;
    auto& s = scratch[static_cast<std::size_t>(slot)];
    if (static_cast<int64_t>(s.size()) < elements) s.resize(static_cast<std::size_t>(elements));
    return s.data();
}

TensorView f32_target(const TensorView& t, Scratch slot, bool load) {
    if (t.dtype == DType::F32) return t;
    float* data = f32_scratch(slot, t.numel());
    if (load) with_storage(t.dtype, [&](auto tag) { widen<decltype(tag)::value>(data, t); });
    return as_f32(t, data);
}

TensorView widened(const TensorView& t, Scratch slot) {
    return f32_target(t, slot, true);
}

void narrow(const TensorView& t, const TensorView& computed) {
    if (computed.data == t.data) return;
    with_storage(t.dtype, [&](auto tag) { store_rounded<decltype(tag)::value>(t, computed.f32()); });
}

}  // namespace mwb::cpu
