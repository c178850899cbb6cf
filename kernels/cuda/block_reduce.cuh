#pragma once
// Sums over a warp and a block in a fixed shuffle tree (no atomics: the same bits run to run), shared
// by the kernels of ops_elementwise.cu and the ones the CPU-thread emulation runs
// (tests/kernels/cuda_emulation.h). Plain CUDA C++ without runtime calls.

namespace mwb::cuda {

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
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

}  // namespace mwb::cuda
