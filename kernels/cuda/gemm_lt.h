#pragma once
// cuBLASLt GEMMs with epilogues, their descriptors and chosen algorithms made once per key
// (gemm_lt_key.h) and kept in a per-thread cache beside the thread's cuBLASLt handle: a call in the
// step loop only looks its plan up and sets the pointers.
#include "gemm_lt_key.h"
#include "runtime.h"

namespace mwb::cuda {

/// Bytes of workspace every cuBLASLt GEMM may use (scratch slot 1).
constexpr int64_t kLtWorkspace = int64_t{32} << 20;

/// Device pointers of one call. `bias`: read by the Bias epilogues, written by the bias-gradient ones;
/// `aux`: the (m, n) matrix of the GELU epilogues (leading dimension m).
struct LtOperands {
    const void* a = nullptr;
    const void* b = nullptr;
    void* d = nullptr;
    void* bias = nullptr;
    void* aux = nullptr;
};

/// Queues D = alpha·op(A)·op(B) + beta·D with the key's epilogue on `stream`. False, with nothing
/// queued, when cuBLASLt has no algorithm for the key (remembered too: the caller's unfused path then
/// runs without asking again).
bool lt_matmul(cudaStream_t stream, const LtKey& key, const LtOperands& p, float alpha, float beta);

/// Scratch for an epilogue's bias gradient of `n` floats: slot 1 behind the cuBLASLt workspace
/// (256-byte aligned, valid until the next GEMM on the stream has read it).
float* lt_bias_gradient_scratch(int64_t n);

/// Counts one epilogue GEMM that was asked for, fused or not (device::fused_gemm_counts).
void lt_count(bool fused);

}  // namespace mwb::cuda
