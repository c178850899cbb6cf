#pragma once
// How CPU kernels read and write tensors stored in 16 bits (bf16/fp16 runs): a small accessor per
// storage dtype, chosen once per op (with_storage), so the loops load-convert and store-round with
// no branch on the dtype inside. GEMMs instead widen their 16-bit operands into fp32 scratch right
// before the BLAS call (widened / f32_target / narrow): the conversion is exact, so sgemm sees the
// same values as in an emulated (fp32-array) run and returns the same bits.
#include "mwb/kernels/error.h"
#include "mwb/kernels/precision.h"
#include "mwb/kernels/tensor.h"

#include <cstdint>
#include <type_traits>

namespace mwb::cpu {

template <DType T>
struct Storage;

template <>
struct Storage<DType::F32> {
    using type = float;
    static float load(float v) { return v; }
    static float store(float x) { return x; }
};
template <>
struct Storage<DType::BF16> {
    using type = uint16_t;
    static float load(uint16_t h) { return from_bf16_bits(h); }
    static uint16_t store(float x) { return bf16_bits(x); }
};
template <>
struct Storage<DType::F16> {
    using type = uint16_t;
    static float load(uint16_t h) { return from_fp16_bits(h); }
    static uint16_t store(float x) { return fp16_bits(x); }
};

/// The element pointer of a view of storage dtype T (the dispatcher has checked the dtype).
template <DType T>
typename Storage<T>::type* elements(const TensorView& v) {
    return static_cast<typename Storage<T>::type*>(v.data);
}

/// Row helpers for ops that reduce along a row (norms): the f32 row itself, or the row widened into
/// `buf`, so the arithmetic after it is the f32 code unchanged (the same sums in the same order).
template <DType T>
const float* widened_row(const typename Storage<T>::type* p, int64_t n, float* buf) {
    if constexpr (T == DType::F32) {
        return p;
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) buf[i] = Storage<T>::load(p[i]);
        return buf;
    }
}
/// Where to compute a row of t in: the f32 row itself, else `buf` (then stored with stored_row).
template <DType T>
float* computed_row(typename Storage<T>::type* p, float* buf) {
    if constexpr (T == DType::F32) return p;
    else return buf;
}
/// Rounds a row computed in `buf` into t's storage (nothing for f32, computed in place).
template <DType T>
void stored_row(typename Storage<T>::type* p, const float* buf, int64_t n) {
    if constexpr (T != DType::F32) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) p[i] = Storage<T>::store(buf[i]);
    }
}

/// Calls f(std::integral_constant<DType, T>{}) for the view dtype T = `dtype` (f32, bf16 or f16).
template <class F>
decltype(auto) with_storage(DType dtype, F&& f) {
    switch (dtype) {
        case DType::BF16:
            return f(std::integral_constant<DType, DType::BF16>{});
        case DType::F16:
            return f(std::integral_constant<DType, DType::F16>{});
        case DType::F32:
            break;
        case DType::I32:
        case DType::F64:
            MWB_FAIL("a stored tensor must be f32, bf16 or f16, got {}", dtype_name(dtype));
    }
    return f(std::integral_constant<DType, DType::F32>{});
}

/// The same for two dtypes: f(tag of a, tag of b).
template <class F>
decltype(auto) with_storages(DType a, DType b, F&& f) {
    return with_storage(a, [&](auto ta) { return with_storage(b, [&](auto tb) { return f(ta, tb); }); });
}

/// Scratch slots of the widened GEMM operands (an op uses several at once), of an op's 16-bit
/// weight vectors (norm gamma/beta, biases: one row each, widened once per call), and of the f16
/// parameter gradients an op accumulates into (Grad, GradBias: widened, accumulated in fp32, narrowed:
/// each element rounded once per call, as cuBLAS does with an f16 C and beta = 1).
enum class Scratch : int { A = 0, B = 1, C = 2, Out = 3, Weight = 4, Bias = 5, Grad = 6, GradBias = 7 };
constexpr int kScratchSlots = 8;
/// `elements` floats of this thread's scratch `slot`, grown as needed and kept (a step's shapes repeat).
/// Not counted by the tracking allocator (docs/memory.md: at most one fp32 copy per operand of the
/// largest 16-bit GEMM of a step).
float* f32_scratch(Scratch slot, int64_t elements);
/// t as an f32 view: t itself when f32, else its values widened (exactly) into scratch `slot`.
TensorView widened(const TensorView& t, Scratch slot);
/// An f32 view to compute t in: t itself when f32, else scratch `slot`, holding t's values when `load`.
TensorView f32_target(const TensorView& t, Scratch slot, bool load);
/// Stores computed f32 values into t, rounded to t's dtype; nothing when `computed` is t itself.
void narrow(const TensorView& t, const TensorView& computed);

}  // namespace mwb::cpu
