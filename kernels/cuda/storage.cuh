#pragma once
// How CUDA kernels read and write tensors stored in f32, bf16 or f16: the device twin of
// kernels/cpu/storage.h. A kernel is templated on a Storage per tensor argument, chosen once per
// launch on the host (with_storage), so its loops load-convert and store-round with no branch on the
// dtype. 16-bit elements are raw bits (uint16_t) converted by the branch-free bit twins of
// precision.h (round to nearest even, NaN quiet with its top payload, fp16 subnormals kept): a store
// here gives exactly the CPU's bits. Accesses move 16 bytes where they can (4 floats or 8 16-bit
// values, load_n/store_n); the launcher runs the aligned bulk so and a tail one element at a time.
// Plain CUDA C++ without runtime calls, so the kernels also run on CPU threads in tests
// (tests/kernels/cuda_emulation.h). C++17 (nvcc's dialect here): no std::bit_cast.
#include "kernel_common.cuh"

#include "mwb/kernels/tensor.h"

#include <cstdint>
#include <type_traits>

namespace mwb::cuda::storage {

// ---- bit twins of precision.h (same operations in the same order) ------------------------------------

__device__ __forceinline__ float round_to_bf16(float x) {
    const uint32_t b = __float_as_uint(x);
    const bool is_nan = (b & 0x7FFFFFFFu) > 0x7F800000u;
    const uint32_t lsb = (b >> 16) & 1u;
    const uint32_t rounded = (b + 0x7FFFu + lsb) & 0xFFFF0000u;
    return __uint_as_float(is_nan ? ((b | 0x00400000u) & 0xFFFF0000u) : rounded);
}

__device__ __forceinline__ float round_to_fp16(float x) {
    const uint32_t b = __float_as_uint(x);
    const uint32_t sign = b & 0x80000000u;
    const uint32_t mag = b & 0x7FFFFFFFu;
    const uint32_t lsb = (mag >> 13) & 1u;
    const uint32_t normal = (mag + 0xFFFu + lsb) & ~0x1FFFu;
    // _rn intrinsics: never contracted or flushed, whatever the compile flags.
    const float sub = __fsub_rn(__fadd_rn(__uint_as_float(mag), 0.5f), 0.5f);
    uint32_t out = mag < 0x38800000u ? __float_as_uint(sub) : normal;
    out = mag >= 0x477FF000u ? 0x7F800000u : out;
    out = mag > 0x7F800000u ? ((mag | 0x00400000u) & ~0x1FFFu) : out;
    return __uint_as_float(out | sign);
}

__device__ __forceinline__ uint16_t bf16_bits(float x) {
    return static_cast<uint16_t>(__float_as_uint(round_to_bf16(x)) >> 16);
}
__device__ __forceinline__ float from_bf16_bits(uint16_t h) {
    return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

__device__ __forceinline__ uint16_t fp16_bits(float x) {
    const uint32_t r = __float_as_uint(round_to_fp16(x));
    const uint32_t sign = (r >> 16) & 0x8000u, mag = r & 0x7FFFFFFFu;
    const uint32_t normal = (mag - 0x38000000u) >> 13;
    const uint32_t sub = __float_as_uint(__fadd_rn(__uint_as_float(mag), 0.5f)) - 0x3F000000u;
    const uint32_t special = 0x7C00u | ((mag >> 13) & 0x3FFu);
    uint32_t out = mag < 0x38800000u ? sub : normal;
    out = mag >= 0x7F800000u ? special : out;
    return static_cast<uint16_t>(out | sign);
}
__device__ __forceinline__ float from_fp16_bits(uint16_t h) {
    const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
    const uint32_t em = static_cast<uint32_t>(h) & 0x7FFFu;
    const uint32_t shifted = em << 13;
    const uint32_t exponent = shifted & 0x0F800000u;
    const uint32_t normal = shifted + 0x38000000u;
    const uint32_t special = shifted + 0x70000000u;
    const float sub = __fsub_rn(__uint_as_float(shifted + 0x38800000u), __uint_as_float(0x38800000u));
    uint32_t out = exponent == 0x0F800000u ? special : normal;
    out = exponent == 0 ? __float_as_uint(sub) : out;
    return __uint_as_float(out | sign);
}

// ---- the accessor ----------------------------------------------------------------------------------------

template <DType T>
struct Storage;

template <>
struct Storage<DType::F32> {
    using type = float;
    static constexpr DType dtype = DType::F32;
    __device__ static float load(float v) { return v; }
    __device__ static float store(float x) { return x; }
};
template <>
struct Storage<DType::BF16> {
    using type = uint16_t;
    static constexpr DType dtype = DType::BF16;
    __device__ static float load(uint16_t h) { return from_bf16_bits(h); }
    __device__ static uint16_t store(float x) { return bf16_bits(x); }
};
template <>
struct Storage<DType::F16> {
    using type = uint16_t;
    static constexpr DType dtype = DType::F16;
    __device__ static float load(uint16_t h) { return from_fp16_bits(h); }
    __device__ static uint16_t store(float x) { return fp16_bits(x); }
};

using F32 = Storage<DType::F32>;
using BF16 = Storage<DType::BF16>;
using F16 = Storage<DType::F16>;

/// Elements of S per 16-byte access: 4 floats or 8 16-bit values.
template <class S>
constexpr int kPerAccess = static_cast<int>(16 / sizeof(typename S::type));

/// N elements of type T that move as one access (N·sizeof(T) bytes, at most 16).
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
    T v[N];
};

/// V consecutive elements of storage S at p, widened: in 16-byte accesses when V spans them (p then
/// 16-byte aligned), else in one access of V elements (V = 1: scalar).
template <class S, int V>
__device__ __forceinline__ kernel::Floats<V> load_n(const typename S::type* p) {
    using T = typename S::type;
    constexpr int C = V < kPerAccess<S> ? V : kPerAccess<S>;
    kernel::Floats<V> out;
#pragma unroll
    for (int j = 0; j < V; j += C) {
        const Pack<T, C> x = *reinterpret_cast<const Pack<T, C>*>(p + j);
#pragma unroll
        for (int k = 0; k < C; ++k) out.v[j + k] = S::load(x.v[k]);
    }
    return out;
}

/// Stores V floats rounded to storage S at p, in the accesses load_n uses.
template <class S, int V>
__device__ __forceinline__ void store_n(typename S::type* p, const kernel::Floats<V>& x) {
    using T = typename S::type;
    constexpr int C = V < kPerAccess<S> ? V : kPerAccess<S>;
#pragma unroll
    for (int j = 0; j < V; j += C) {
        Pack<T, C> o;
#pragma unroll
        for (int k = 0; k < C; ++k) o.v[k] = S::store(x.v[j + k]);
        *reinterpret_cast<Pack<T, C>*>(p + j) = o;
    }
}

/// One element of storage S.
template <class S>
__device__ __forceinline__ float load1(const typename S::type* p, int64_t i) {
    return S::load(p[i]);
}
template <class S>
__device__ __forceinline__ void store1(typename S::type* p, int64_t i, float x) {
    p[i] = S::store(x);
}

// ---- host side: the launcher's choice --------------------------------------------------------------------

/// Calls f(Storage<T>{}) for T = `dtype` (f32, bf16 or f16), as kernels/cpu/storage.h's with_storage
/// (which nvcc's C++17 cannot include). The dispatcher has checked the dtype; others fail in
/// mwb::cuda's callers before reaching here.
template <class F>
decltype(auto) with_storage(DType dtype, F&& f) {
    if (dtype == DType::BF16) return f(BF16{});
    if (dtype == DType::F16) return f(F16{});
    return f(F32{});
}

/// The same for two dtypes: f(storage of a, storage of b).
template <class F>
decltype(auto) with_storages(DType a, DType b, F&& f) {
    return with_storage(a, [&](auto sa) { return with_storage(b, [&](auto sb) { return f(sa, sb); }); });
}

/// True when one of the storages holds 16-bit elements (its kernels then move 8 elements per thread).
template <class... S>
constexpr bool any_16bit = ((sizeof(typename S::type) == 2) || ...);

/// True when every pointer is aligned to `bytes` (a null pointer is).
template <class... P>
bool aligned_to(int64_t bytes, const P*... p) {
    return ((reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0) && ...);
}

/// The element pointer of a view of storage S.
template <class S>
typename S::type* elements(const TensorView& v) {
    return static_cast<typename S::type*>(v.data);
}

}  // namespace mwb::cuda::storage
