#pragma once
// The gradient norm's kernels of ops_elementwise.cu (contracts: sum_squares, sum_squares_ranges and
// gradient_scale in ops.inc): Σ x² of a list of arena ranges in float64 — a block per 2^14-element
// chunk of a range, then one block that sums each range's chunks in order and the ranges in order, the
// order of the per-tensor sums it replaces — and the clip / skip decision from that sum, all on the
// device. Plain CUDA C++ without runtime calls, so that test_kernels_grad_norm_emulated runs this
// source on CPU threads (tests/kernels/cuda_emulation.h).
#include "kernel_common.cuh"
#include "storage.cuh"

#include "mwb/kernels/ops.h"

#include <cstdint>

namespace mwb::cuda::grad_norm {

/// Elements per partial sum, from each range's start (the CPU op's chunks).
constexpr int64_t kChunk = 1 << 14;

/// One range and the index of its first chunk among all ranges' (rising strictly: no empty ranges).
struct Range {
    int64_t first, count, chunk_begin;
};

// Internal linkage: each includer (ops_elementwise.cu, the emulation test) has its own copy.
namespace {

/// partial[c] = Σ x² of chunk c of all ranges (grid: one block per chunk); the range by binary search.
/// S: x's storage (storage.cuh): f32, or the f16 gradient arena of fp16 runs without
/// accumulate_allreduce_grads_in_fp32, each element widened exactly and squared in float64.
template <class S>
__global__ void squares_partials(const typename S::type* x, const Range* ranges, int n_ranges, double* partial) {
    __shared__ double sh[32];
    const int64_t c = blockIdx.x;
    int lo = 0, hi = n_ranges - 1;  // the last range whose chunk_begin <= c
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (ranges[mid].chunk_begin <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    const Range r = ranges[lo];
    const int64_t i0 = (c - r.chunk_begin) * kChunk, i1 = min(r.count, i0 + kChunk);
    const typename S::type* p = x + r.first;
    double s = 0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        const double v = S::load(p[i]);
        s += v * v;
    }
    s = kernel::block_sum(s, sh);
    if (threadIdx.x == 0) partial[c] = s;
}

/// *out = Σ over ranges in order of (Σ of the range's chunk partials in order). One block: a thread per
/// range (range_total holds n_ranges doubles), then thread 0 over the ranges.
__global__ void squares_total(double* out, double* range_total, const double* partial, const Range* ranges,
                              int n_ranges, int64_t chunks) {
    for (int r = threadIdx.x; r < n_ranges; r += blockDim.x) {
        const int64_t end = r + 1 < n_ranges ? ranges[r + 1].chunk_begin : chunks;
        double s = 0;
        for (int64_t c = ranges[r].chunk_begin; c < end; ++c) s += partial[c];
        range_total[r] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0;
        for (int r = 0; r < n_ranges; ++r) total += range_total[r];
        *out = total;
    }
}

/// scale = [clip coefficient / loss scale, found_inf] from the global Σ x² of the scaled gradients
/// (one thread); the loss scale is *device_loss_scale when given (the step's parameter block).
__global__ void gradient_scale(float* scale, const double* sumsq, double loss_scale, double clip_grad,
                               const double* device_loss_scale = nullptr) {
    if (device_loss_scale) loss_scale = *device_loss_scale;
    const double norm = sqrt(*sumsq) / loss_scale;
    const bool found_inf = !isfinite(norm);
    scale[0] = found_inf ? 0.0f : static_cast<float>(clip_coefficient(norm, clip_grad) / loss_scale);
    scale[1] = found_inf ? 1.0f : 0.0f;
}

}  // namespace
}  // namespace mwb::cuda::grad_norm
