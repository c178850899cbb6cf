#pragma once
// The CUDA execution model on the host, for kernels written as plain CUDA C++ without runtime calls
// (kernels/cuda/attention_kernels.cuh, attention_tc_kernels.cuh, rope_swiglu_kernels.cuh, …): blockDim and
// gridDim are the launch's, __shared__ arrays become function statics and dynamic shared memory one buffer
// filled with 0xCD (blocks run one after another, so one block owns them at a time). It executes the
// kernels' own source — index math, tiling, barriers, numerics — on CPUs, where CI runs.
//
// Two ways to run a block's threads, the same results:
// - Fibers (the default): each CUDA thread of a block is a fiber, a stack and a saved register set, on the
//   calling OS thread. A small scheduler resumes them in turn; a fiber runs until it reaches a barrier
//   (__syncthreads, or its warp's for __syncwarp, __shfl_xor_sync and the WMMA *_sync operations), where it
//   yields; when a barrier's last participant arrives, its waiters become runnable for the next pass.
//   threadIdx is a plain global the scheduler sets before each resume. The order is fixed: threads in
//   index order in even blocks (x + y·gridDim.x), in reverse in odd ones (MWB_EMULATION_REVERSE=1 in the
//   environment swaps the two), so a thread that reads what another thread writes in the same phase
//   (a missing barrier) reads the stale value deterministically in one of the two orders, and a barrier
//   that some threads never reach (divergent __syncthreads, an early return) aborts with a message
//   instead of hanging. A fiber yields only at barriers: a thread spinning on a flag another thread
//   sets, with no barrier between, would hang (no kernel here does; CUDA needs atomics and fences for
//   that). Stacks: 256 KiB per fiber, mmap'd once and kept for the process (untouched pages cost
//   nothing), a PROT_NONE guard page below each so an overflow crashes. The switch is a few instructions
//   of x86-64 assembly (callee-saved registers, MXCSR and the x87 control word), annotated for
//   AddressSanitizer: swapcontext's signal-mask syscall per switch made test_kernels_attention_emulated
//   take 13 s of CPU time instead of 2.5. x86-64 Linux only (and not under enforced CET shadow stacks,
//   which glibc leaves off by default).
// - OS threads (-DMWB_EMULATION_OS_THREADS, implied by -fsanitize=thread, which does not follow fibers):
//   blockDim std::jthreads per block meeting at std::barrier (one per block, one per warp), threadIdx
//   thread_local. Slower (a futex round per barrier per thread), but ThreadSanitizer then reports a
//   kernel's missing barrier as a data race on the shared memory.
//
// Tensor cores: __nv_bfloat16 and __half round as the hardware does (nearest even), and the WMMA fragments hold
// their whole 16×16 tile in every lane of the warp, so the emulation never relies on the hardware's
// (unspecified) element-to-lane mapping; a kernel that did would not be portable CUDA either. The
// *_sync operations are warp-collective, as on the hardware: every lane must reach them (divergent calls
// abort with fibers and hang with OS threads, as they are undefined there), loads finish in every lane
// before the warp goes on, and only lane 0 writes a stored fragment — kernels must __syncwarp() before
// reading it element-wise, as CUDA requires.
#include "mwb/kernels/precision.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__SANITIZE_THREAD__) && !defined(MWB_EMULATION_OS_THREADS)
#define MWB_EMULATION_OS_THREADS 1
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(MWB_EMULATION_OS_THREADS)
#define MWB_EMULATION_OS_THREADS 1
#endif
#endif

#ifdef MWB_EMULATION_OS_THREADS
#include <barrier>
#include <memory>
#include <thread>
#else
#if !defined(__x86_64__) || !defined(__linux__)
#error "cuda_emulation.h: the fibers are x86-64 Linux only; build with -DMWB_EMULATION_OS_THREADS elsewhere"
#endif
#include <sys/mman.h>
#if defined(__SANITIZE_ADDRESS__)
#define MWB_EMULATION_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MWB_EMULATION_ASAN 1
#endif
#endif
#ifdef MWB_EMULATION_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#endif

namespace mwb::emulation {

struct Dim3 {
    unsigned x = 0, y = 0, z = 0;
};
inline Dim3 block_dim, grid_dim;  // of the running launch
inline std::vector<uint64_t> shuffle_slots;  // one per thread of the block, for __shfl_xor_sync
inline std::vector<unsigned char> dynamic_shared;

/// Sets up a launch's shared state; `run_block(bx, by)` then runs each block.
template <class RunBlock>
void for_each_block(unsigned grid_x, unsigned grid_y, int threads, std::size_t shared_bytes, RunBlock run_block) {
    dynamic_shared.assign(shared_bytes, 0xCD);  // not zero: kernels must not rely on fresh shared memory
    block_dim = {static_cast<unsigned>(threads), 1, 1};
    grid_dim = {grid_x, grid_y, 1};
    for (unsigned by = 0; by < grid_y; ++by)
        for (unsigned bx = 0; bx < grid_x; ++bx) {
            shuffle_slots.assign(static_cast<std::size_t>(threads), 0);
            run_block(bx, by);
        }
}

#ifdef MWB_EMULATION_OS_THREADS

inline thread_local Dim3 thread_index, block_index;
inline std::barrier<>* block_barrier = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;

inline void sync_block() { block_barrier->arrive_and_wait(); }
inline void sync_warp() { warp_barriers[thread_index.x / 32]->arrive_and_wait(); }

/// Runs `kernel()` for every block of grid (x, y) with `threads` threads per block (a multiple of 32
/// when the kernel uses warp operations) and `shared_bytes` of dynamic shared memory.
template <class Kernel>
void launch(unsigned grid_x, unsigned grid_y, int threads, const Kernel& kernel, std::size_t shared_bytes = 0) {
    for_each_block(grid_x, grid_y, threads, shared_bytes, [&](unsigned bx, unsigned by) {
        std::barrier<> barrier(threads);
        block_barrier = &barrier;
        warp_barriers.clear();
        for (int w = 0; w < (threads + 31) / 32; ++w)
            warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32, threads - 32 * w)));
        std::vector<std::jthread> block;
        for (int t = 0; t < threads; ++t)
            block.emplace_back([&, t] {
                thread_index = {static_cast<unsigned>(t), 0, 0};
                block_index = {bx, by, 0};
                kernel();
            });
    });
}

#else  // fibers

inline Dim3 thread_index, block_index;  // the running fiber's, set by the scheduler

namespace fibers {

/// Saves the callee-saved registers, MXCSR and the x87 control word on the current stack, stores the
/// stack pointer in *from, then continues the context whose stack pointer is `to` (saved the same way).
extern "C" void mwb_emulation_switch(void** from, void* to);
// COMDAT: every test that includes this header defines it, the linker keeps one.
asm(R"(
    .pushsection .text.mwb_emulation_switch,"axG",@progbits,mwb_emulation_switch,comdat
    .globl mwb_emulation_switch
    .hidden mwb_emulation_switch
    .type mwb_emulation_switch, @function
mwb_emulation_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mwb_emulation_switch, .-mwb_emulation_switch
    .popsection
)");

constexpr std::size_t kStackBytes = 256 << 10, kGuardBytes = 4096;

struct Barrier {
    int expected = 0, arrived = 0;
    unsigned generation = 0;
};

struct Fiber {
    unsigned char* stack = nullptr;  // lowest usable byte, above the guard page
    void* sp = nullptr;              // saved stack pointer while suspended
    const Barrier* waiting = nullptr;
    unsigned generation = 0;  // of `waiting` when this fiber arrived
    bool done = false;
    void* asan_fake_stack = nullptr;
};

inline std::vector<Fiber> pool;  // stacks kept for the process
inline int current = 0;
inline void* scheduler_sp = nullptr;
inline const void* kernel = nullptr;
inline void (*run_kernel)(const void*) = nullptr;
inline Barrier block_barrier;
inline std::vector<Barrier> warp_barriers;
inline const void* scheduler_stack_bottom = nullptr;  // AddressSanitizer's view of the launching thread
inline std::size_t scheduler_stack_size = 0;

inline void to_scheduler(bool finished) {
    Fiber& f = pool[static_cast<std::size_t>(current)];
#ifdef MWB_EMULATION_ASAN
    __sanitizer_start_switch_fiber(finished ? nullptr : &f.asan_fake_stack, scheduler_stack_bottom, scheduler_stack_size);
#endif
    mwb_emulation_switch(&f.sp, scheduler_sp);
#ifdef MWB_EMULATION_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake_stack, nullptr, nullptr);
#endif
    (void)finished;
}

[[noreturn]] inline void fiber_main() {
#ifdef MWB_EMULATION_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack_bottom, &scheduler_stack_size);
#endif
    run_kernel(kernel);
    pool[static_cast<std::size_t>(current)].done = true;
    to_scheduler(true);
    std::abort();  // a finished fiber is never resumed
}

/// Arrives at `b` and yields; resumed once its last participant has arrived.
inline void arrive_and_wait(Barrier& b) {
    Fiber& f = pool[static_cast<std::size_t>(current)];
    f.waiting = &b;
    f.generation = b.generation;
    if (++b.arrived == b.expected) {
        b.arrived = 0;
        ++b.generation;
    }
    to_scheduler(false);
}

inline bool reverse_from_environment() {
    const char* v = std::getenv("MWB_EMULATION_REVERSE");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
}

/// A fresh context for fiber f: its first resume "returns" into fiber_main with the stack aligned as
/// after a call, MXCSR and the x87 control word as the scheduler's.
inline void prepare(Fiber& f) {
    if (f.stack == nullptr) {
        void* m = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (m == MAP_FAILED || mprotect(m, kGuardBytes, PROT_NONE) != 0) {
            std::perror("cuda_emulation.h: fiber stack");
            std::abort();
        }
        f.stack = static_cast<unsigned char*>(m) + kGuardBytes;
    }
    auto* top = reinterpret_cast<uint64_t*>(f.stack + kStackBytes);
    uint64_t* sp = top - 9;
    uint32_t mxcsr = 0;
    uint16_t fpcw = 0;
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fpcw));
    std::memset(sp, 0, 9 * sizeof(uint64_t));
    std::memcpy(sp, &mxcsr, 4);
    std::memcpy(reinterpret_cast<unsigned char*>(sp) + 4, &fpcw, 2);
    top[-2] = reinterpret_cast<uint64_t>(&fiber_main);  // r15 … rbp in sp[1..6], then the return address
    f.sp = sp;
    f.waiting = nullptr;
    f.done = false;
    f.asan_fake_stack = nullptr;
}

[[noreturn]] inline void deadlock(int threads) {
    int at_block = 0, at_warp = 0, finished = 0;
    for (int t = 0; t < threads; ++t) {
        const Fiber& f = pool[static_cast<std::size_t>(t)];
        if (f.done) ++finished;
        else if (f.waiting == &block_barrier) ++at_block;
        else ++at_warp;
    }
    std::fprintf(stderr, "cuda_emulation.h: block (%u, %u) of %d threads cannot go on: %d wait at __syncthreads, %d at "
                 "a warp barrier, %d have returned (a barrier not every thread reaches)\n",
                 block_index.x, block_index.y, threads, at_block, at_warp, finished);
    std::abort();
}

/// Runs one block: every fiber in turn until it yields, pass after pass, until all have returned.
inline void run_block(int threads, bool reverse) {
    block_barrier = {threads, 0, 0};
    warp_barriers.assign(static_cast<std::size_t>((threads + 31) / 32), {});
    for (std::size_t w = 0; w < warp_barriers.size(); ++w) warp_barriers[w].expected = std::min(32, threads - 32 * static_cast<int>(w));
    if (pool.size() < static_cast<std::size_t>(threads)) pool.resize(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) prepare(pool[static_cast<std::size_t>(t)]);
    for (int running = threads; running > 0;) {
        bool progressed = false;
        for (int k = 0; k < threads; ++k) {
            const int t = reverse ? threads - 1 - k : k;
            Fiber& f = pool[static_cast<std::size_t>(t)];
            if (f.done || (f.waiting != nullptr && f.waiting->generation == f.generation)) continue;
            f.waiting = nullptr;
            current = t;
            thread_index = {static_cast<unsigned>(t), 0, 0};
#ifdef MWB_EMULATION_ASAN
            void* fake_stack = nullptr;
            __sanitizer_start_switch_fiber(&fake_stack, f.stack, kStackBytes);
#endif
            mwb_emulation_switch(&scheduler_sp, f.sp);
#ifdef MWB_EMULATION_ASAN
            __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
            progressed = true;
            if (f.done) --running;
        }
        if (!progressed) deadlock(threads);
    }
}

}  // namespace fibers

inline void sync_block() { fibers::arrive_and_wait(fibers::block_barrier); }
inline void sync_warp() { fibers::arrive_and_wait(fibers::warp_barriers[thread_index.x / 32]); }

/// Runs `kernel()` for every block of grid (x, y) with `threads` threads per block (a multiple of 32
/// when the kernel uses warp operations) and `shared_bytes` of dynamic shared memory.
template <class Kernel>
void launch(unsigned grid_x, unsigned grid_y, int threads, const Kernel& kernel, std::size_t shared_bytes = 0) {
    static const bool reverse = fibers::reverse_from_environment();
    fibers::kernel = &kernel;
    fibers::run_kernel = [](const void* k) { (*static_cast<const Kernel*>(k))(); };
    for_each_block(grid_x, grid_y, threads, shared_bytes, [&](unsigned bx, unsigned by) {
        block_index = {bx, by, 0};
        const bool odd = ((bx + by * grid_x) & 1u) != 0;
        fibers::run_block(threads, odd != reverse);
    });
}

#endif

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
inline void __syncthreads() { ::mwb::emulation::sync_block(); }
inline void __syncwarp() { ::mwb::emulation::sync_warp(); }
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
