#pragma once
// Internal helpers of the CUDA ops: error checks, the context's stream, cuBLAS/cuBLASLt handles and
// a growing scratch area (device memory that is allocated once and reused, so ops never call
// cudaMalloc in the step loop).
#include "cublas_loader.h"
#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"

#include <cuda_runtime_api.h>

#define MWB_CUDA_CHECK(call)                                                                         \
    do {                                                                                             \
        const cudaError_t mwb_err_ = (call);                                                         \
        if (mwb_err_ != cudaSuccess) [[unlikely]]                                                    \
            MWB_FAIL("CUDA error in {}: {} ({})", #call, cudaGetErrorString(mwb_err_), static_cast<int>(mwb_err_)); \
    } while (0)

#define MWB_CUBLAS_CHECK(call)                                                                       \
    do {                                                                                             \
        const cublasStatus_t mwb_st_ = (call);                                                       \
        if (mwb_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                           \
            MWB_FAIL("cuBLAS error in {}: {} ({})", #call, ::mwb::cuda::cublas().cublasGetStatusString(mwb_st_), static_cast<int>(mwb_st_)); \
    } while (0)

namespace mwb::cuda {

inline cudaStream_t stream_of(const OpContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

/// Threads per block of the elementwise kernels, and the blocks of a grid-stride loop over n items
/// (at least 1; capped where grid-stride loops take over).
constexpr int kElementwiseThreads = 256;
inline int blocks_for(int64_t n, int threads = kElementwiseThreads) {
    const int64_t b = (n + threads - 1) / threads;
    return static_cast<int>(b < 1 ? 1 : (b > 65535LL * 32 ? 65535LL * 32 : b));
}

/// Raises launch errors of the kernel just queued (asynchronous faults surface at synchronize()).
void check_launch(const char* op);

/// Scratch of at least `bytes` on the current device for work queued on `stream`, valid until the
/// next call with the same slot (ops are stream-ordered, so reuse by the next op on the stream is
/// safe). Slot 0: reductions' partials (and the f32 staging of a 16-bit GEMM result before its one
/// rounding); slot 1: cuBLASLt workspace; slots 2 and 3: converted GEMM operands (and the cuDNN
/// attention's bf16 inputs); slot 4: cuDNN's workspace; slot 5: the cuDNN
/// attention backward's; slot 6: the range table of sum_squares_ranges (kept between calls). Grows
/// by reallocation, which happens only while shapes grow: stream-ordered (cudaFreeAsync of the old
/// area and cudaMallocAsync of the new one on `stream`, no host wait) when the slot's last user was
/// the same stream and the device has memory pools, else after a device-wide synchronize. Growing
/// while `stream` is being captured into a CUDA graph fails (warm up first).
void* scratch(int slot, int64_t bytes, cudaStream_t stream);

/// Handles of this thread for the current device, bound to `stream`.
cublasHandle_t cublas_handle(cudaStream_t stream);
cublasLtHandle_t cublaslt_handle();

bool allow_tf32();

/// Fails unless `t` is a device tensor of `dtype` (empty tensors pass when `optional`).
void require(const char* op, const char* name, const TensorView& t, DType dtype, bool optional = false);

}  // namespace mwb::cuda

namespace mwb::cuda {
/// out[c] += Σ_r x[r, c], summed over fixed 256-row chunks and then the chunks in order (no atomics);
/// x f32, or of `x_dtype` (f32, bf16, f16: widened); out (cols elements) f32, or an f16 gradient
/// (the f16 arena: its value widened, the fp32 sum added, rounded once).
void column_sums_add(cudaStream_t stream, const TensorView& out, const float* x, int64_t rows, int64_t cols);
void column_sums_add(cudaStream_t stream, const TensorView& out, DType x_dtype, const void* x, int64_t rows,
                     int64_t cols);
/// y[r, c] = in[r, c] + bias[c] for row-major y (rows, cols) of f32, bf16 or f16 (rounded once): `in`
/// holds the f32 GEMM result (y itself when y is f32); the bias f32 or of y's dtype.
void add_bias_rows(cudaStream_t stream, const TensorView& y, const float* in, const TensorView& bias);
/// dst[i] = bf16(src[i]) (round to nearest even).
void convert_to_bf16(cudaStream_t stream, void* dst, const float* src, int64_t n);
/// dst[i] = src[i] converted between f32, bf16 and f16 (widening exact, narrowing to nearest even).
void convert(cudaStream_t stream, DType dst_dtype, void* dst, DType src_dtype, const void* src, int64_t n);
}  // namespace mwb::cuda
