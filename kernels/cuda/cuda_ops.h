#pragma once
// CUDA implementations of the ops in mwb/kernels/ops.inc (same signatures; see there for the
// contracts). Tensors live in device memory (TensorView::device == CUDA); ctx.stream is the
// cudaStream_t. The dispatcher (src/ops.cpp) has checked every argument's shape, dtype and device
// before these run: they only check what is CUDA's own limit (GEMM dtypes, head dims, launch sizes).
// Ops take the 16-bit (BF16/F16) stored tensors op_checks.cpp's table lists for CUDA, loaded and
// rounded by storage.cuh's accessor (fp32 arithmetic); GEMMs read and write BF16/F16 directly (fp32
// accumulation); copy converts between F32, BF16 and F16. Every reduction runs in a fixed order with
// no atomics: results are bit-identical run to run.
#include "mwb/kernels/ops.h"

namespace mwb::cuda {

#define MWB_DEFAULT(value)
#define MWB_OP(ret, name, params, args) ret name params;
#include "mwb/kernels/ops.inc"
#undef MWB_OP
#undef MWB_DEFAULT

/// B·A·S floats: the row deltas (dO·O) backward computes.
int64_t attention_workspace_bytes(const AttentionParams& p, int64_t seq_len);

}  // namespace mwb::cuda
