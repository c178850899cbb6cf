#pragma once
// The CUDA execution model on host threads, for kernels written as plain CUDA C++ without runtime
// calls (kernels/cuda/attention_kernels.cuh): each block runs as blockDim std::threads that meet at a
// std::barrier for __syncthreads, __shared__ arrays become function statics (blocks run one after
// another, so one block owns them at a time). Slow, but it executes the kernels' own source — index
// math, tiling, barriers, numerics — on CPUs, where CI runs. Include before the kernels.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace mwb::emulation {

struct Dim3 {
    unsigned x = 0, y = 0, z = 0;
};
inline thread_local Dim3 thread_index, block_index;
inline std::barrier<>* block_barrier = nullptr;

/// Runs `kernel()` for every block of grid (x, y) with `threads` threads per block.
template <class Kernel>
void launch(unsigned grid_x, unsigned grid_y, int threads, const Kernel& kernel) {
    for (unsigned by = 0; by < grid_y; ++by)
        for (unsigned bx = 0; bx < grid_x; ++bx) {
            std::barrier<> barrier(threads);
            block_barrier = &barrier;
            std::vector<std::jthread> block;
            for (int t = 0; t < threads; ++t)
                block.emplace_back([&, t] {
                    thread_index = {static_cast<unsigned>(t), 0, 0};
                    block_index = {bx, by, 0};
                    kernel();
                });
        }
}

}  // namespace mwb::emulation

#define threadIdx ::mwb::emulation::thread_index
#define blockIdx ::mwb::emulation::block_index
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __shared__ static
inline void __syncthreads() { ::mwb::emulation::block_barrier->arrive_and_wait(); }
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
using std::fmaxf;
