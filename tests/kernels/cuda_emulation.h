#pragma once
// The CUDA execution model on host threads, for kernels written as plain CUDA C++ without runtime
// calls (kernels/cuda/attention_kernels.cuh, attention_tc_kernels.cuh, rope_swiglu_kernels.cuh, …): each
// block runs as blockDim std::threads that meet at a std::barrier for __syncthreads (and a per-warp one
// for __syncwarp and __shfl_xor_sync), blockDim and gridDim are the launch's,
// __shared__ arrays become function statics and dynamic shared memory one buffer (blocks run one after
// another, so one block owns them at a time). Slow, but it executes the kernels' own source — index
// math, tiling, barriers, numerics — on CPUs, where CI runs.
//
// Tensor cores: __nv_bfloat16 and __half round as the hardware does (nearest even), and the WMMA fragments hold
// their whole 16×16 tile in every lane of the warp, so the emulation never relies on the hardware's
// (unspecified) element-to-lane mapping; a kernel that did would not be portable CUDA either. The
// *_sync operations are warp-collective, as on the hardware: every lane must reach them (divergent calls
// hang here, as they are undefined there), loads finish in every lane before the warp goes on, and only
// lane 0 writes a stored fragment — kernels must __syncwarp() before reading it element-wise, as CUDA
// requires.
#include "mwb/kernels/precision.h"

#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

namespace mwb::emulation {

struct Dim3 {
    unsigned x = 0, y = 0, z = 0;
};
inline thread_local Dim3 thread_index, block_index;
inline Dim3 block_dim, grid_dim;  // of the running launch
inline std::barrier<>* block_barrier = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
inline std::vector<uint64_t> shuffle_slots;  // one per thread of the block, for __shfl_xor_sync
inline std::vector<unsigned char> dynamic_shared;

/// Runs `kernel()` for every block of grid (x, y) with `threads` threads per block (a multiple of 32
/// when the kernel uses warp operations) and `shared_bytes` of dynamic shared memory.
template <class Kernel>
void launch(unsigned grid_x, unsigned grid_y, int threads, const Kernel& kernel, std::size_t shared_bytes = 0) {
    dynamic_shared.assign(shared_bytes, 0xCD);  // not zero: kernels must not rely on fresh shared memory
    block_dim = {static_cast<unsigned>(threads), 1, 1};
    grid_dim = {grid_x, grid_y, 1};
    for (unsigned by = 0; by < grid_y; ++by)
        for (unsigned bx = 0; bx < grid_x; ++bx) {
            std::barrier<> barrier(threads);
            block_barrier = &barrier;
            warp_barriers.clear();
            shuffle_slots.assign(static_cast<std::size_t>(threads), 0);
            for (int w = 0; w < (threads + 31) / 32; ++w)
                warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32, threads - 32 * w)));
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
#define blockDim ::mwb::emulation::block_dim
#define gridDim ::mwb::emulation::grid_dim
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __shared__ static
// The kernels' dynamic shared memory: the launch's buffer.
#define MWB_DYNAMIC_SHARED(name) unsigned char* name = ::mwb::emulation::dynamic_shared.data()
inline void __syncthreads() { ::mwb::emulation::block_barrier->arrive_and_wait(); }
inline void __syncwarp() { ::mwb::emulation::warp_barriers[threadIdx.x / 32]->arrive_and_wait(); }
/// The value of lane (this lane ^ lane_mask); every lane of the warp must call it (full mask only).
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
    static_assert(sizeof(T) <= sizeof(uint64_t));
    if (mask != 0xffffffffu) std::abort();  // partial masks are not emulated
    const unsigned me = threadIdx.x, partner = (me & ~31u) | ((me & 31u) ^ static_cast<unsigned>(lane_mask));
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    ::mwb::emulation::shuffle_slots[me] = bits;
    __syncwarp();
    T r;
    std::memcpy(&r, &::mwb::emulation::shuffle_slots[partner], sizeof(T));
    __syncwarp();
    return r;
}
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
// Bit reinterpretation and IEEE single operations rounded to nearest (the host's float arithmetic).
inline uint32_t __float_as_uint(float x) { return std::bit_cast<uint32_t>(x); }
inline float __uint_as_float(uint32_t x) { return std::bit_cast<float>(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
using std::fmaxf;
using std::isfinite;

struct __nv_bfloat16 {  // two bytes, as the kernels' shared-memory layouts assume
    uint16_t bits = 0;
};
inline __nv_bfloat16 __float2bfloat16(float x) {
    return {static_cast<uint16_t>(std::bit_cast<uint32_t>(::mwb::round_to_bf16(x)) >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 x) { return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16); }
struct __half {  // IEEE binary16, rounded as the hardware does (nearest even)
    uint16_t bits = 0;
};
inline __half __float2half(float x) { return {::mwb::fp16_bits(x)}; }
inline float __half2float(__half x) { return ::mwb::from_fp16_bits(x.bits); }
struct alignas(16) uint4 {  // a 128-bit load or store
    uint32_t x, y, z, w;
};

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

inline float as_float(float x) { return x; }

/// CUDA's requirements on a WMMA load/store operand (the hardware faults or misreads otherwise): a
/// 256-bit aligned pointer and a row stride (ldm) of a multiple of 16 bytes. Shared-memory pointers
/// are checked against the dynamic buffer's start (the device aligns it to 128 bytes).
inline void check_operand(const void* p, unsigned ldm, std::size_t element_bytes) {
    const auto* byte = static_cast<const unsigned char*>(p);
    const unsigned char* base = ::mwb::emulation::dynamic_shared.data();
    const bool shared = byte >= base && byte < base + ::mwb::emulation::dynamic_shared.size();
    const auto offset = static_cast<std::size_t>(shared ? byte - base : reinterpret_cast<std::uintptr_t>(byte));
    if (offset % 32 != 0 || (ldm * element_bytes) % 16 != 0) {
        std::fprintf(stderr, "wmma operand: offset %zu (needs a multiple of 32 bytes), ldm %u x %zu bytes (needs a multiple of 16)\n",
                     offset, ldm, element_bytes);
        std::abort();
    }
}
inline float as_float(__nv_bfloat16 x) { return __bfloat162float(x); }
inline float as_float(__half x) { return __half2float(x); }

/// The whole tile in every lane: rows × cols, row-major.
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
    static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
    float x[rows * cols];
};

template <class Use, int M, int N, int K, class T, class Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float v) {
    for (float& e : f.x) e = v;
}

template <class Use, int M, int N, int K, class T, class Layout, class P>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const P* p, unsigned ldm) {
    using F = fragment<Use, M, N, K, T, Layout>;
    static_assert(std::is_same_v<std::remove_const_t<P>, T>, "fragment and memory element types differ");
    check_operand(p, ldm, sizeof(P));
    for (int r = 0; r < F::rows; ++r)
        for (int c = 0; c < F::cols; ++c)
            f.x[r * F::cols + c] = as_float(std::is_same_v<Layout, col_major> ? p[c * ldm + r] : p[r * ldm + c]);
    __syncwarp();
}

template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm, layout_t layout) {
    check_operand(p, ldm, sizeof(float));
    for (int r = 0; r < M; ++r)
        for (int c = 0; c < N; ++c) f.x[r * N + c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
    __syncwarp();
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t layout) {
    check_operand(p, ldm, sizeof(float));
    __syncwarp();
    if (threadIdx.x % 32 == 0)
        for (int r = 0; r < M; ++r)
            for (int c = 0; c < N; ++c) (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * N + c];
}

/// d = a·b + c in fp32 (tensor cores accumulate bf16 or fp16 products in fp32).
template <int M, int N, int K, class T, class LA, class LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
              const fragment<matrix_b, M, N, K, T, LB>& b, const fragment<accumulator, M, N, K, float>& c) {
    float out[M * N];
    for (int r = 0; r < M; ++r)
        for (int n = 0; n < N; ++n) {
            float acc = c.x[r * N + n];
            for (int k = 0; k < K; ++k) acc += a.x[r * K + k] * b.x[k * N + n];
            out[r * N + n] = acc;
        }
    for (int e = 0; e < M * N; ++e) d.x[e] = out[e];
}

}  // namespace nvcuda::wmma
