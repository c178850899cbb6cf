#pragma once
// Building blocks of the CUDA kernels kept in *.cuh files: 128-bit vector accesses, grid-stride
// indices and fixed-order warp and block reductions. Plain CUDA C++ without runtime calls, so the
// kernels built from them also run on CPU threads in tests (tests/kernels/cuda_emulation.h).
#include <cmath>
#include <cstdint>

namespace mwb::cuda::kernel {

/// V consecutive floats that move as one access (16 bytes for V = 4: ld/st.global.v4.f32).
template <int V>
struct alignas(4 * V) Floats {
    float v[V];
};
template <int V>
__device__ __forceinline__ Floats<V> load(const float* p) {
    return *reinterpret_cast<const Floats<V>*>(p);
}
template <int V>
__device__ __forceinline__ void store(float* p, const Floats<V>& x) {
    *reinterpret_cast<Floats<V>*>(p) = x;
}

// Grid-stride loops over n items with index type I: uint32_t when n < 2^31 (the launcher's choice; a
// stride of at most 2^29 then never wraps), whose divisions cost a fraction of 64-bit ones, else int64_t.
template <class I>
__device__ __forceinline__ I first_index() {
    return static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
}
template <class I>
__device__ __forceinline__ I grid_stride() {
    return static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
}

/// Launcher helpers: 128-bit accesses need 16-byte aligned pointers; 32-bit indices need fewer than
/// 2^31 items (see first_index).
inline bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}
inline bool narrow(int64_t items) {
    return items < (int64_t{1} << 31);
}

// ---- reductions in a fixed order: butterfly shuffles within a warp, then warp 0 over the warps' results.

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024), the same value in every thread.
template <typename T>
__device__ T block_sum(T v, T* shared /* 32 */) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    T r = lane < warps ? shared[lane] : T(0);
    return warp_sum(r);
}

__device__ __forceinline__ float block_max(float v, float* shared /* 32 */) {
    v = warp_max(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    const float r = lane < warps ? shared[lane] : -INFINITY;
    return warp_max(r);
}

}  // namespace mwb::cuda::kernel
