// Dispatch of every op: its argument checks (op_checks.cpp), then the implementation for the
// context's device. Generated from the op list (mwb/kernels/ops.inc); the backends trust the checks.
#include "mwb/kernels/ops.h"

#include "../cpu/cpu_ops.h"
#include "mwb/kernels/error.h"
#include "op_checks.h"

#if defined(MWB_WITH_CUDA)
#include "../cuda/cuda_ops.h"
#endif

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <utility>

namespace mwb::ops {

#if defined(MWB_WITH_CUDA)
// The CPU implementation on CPU contexts, the CUDA one on CUDA contexts.
#define MWB_RUN_ON_DEVICE(name, args)                         \
    do {                                                      \
        if (ctx.device == Device::CPU) return cpu::name args; \
        return cuda::name args;                               \
    } while (0)
#else
namespace {
[[noreturn]] void no_cuda_kernel(const char* op) {
    MWB_FAIL("{}: no CUDA implementation in this build (use --device cpu)", op);
}
}  // namespace

#define MWB_RUN_ON_DEVICE(name, args)                         \
    do {                                                      \
        if (ctx.device == Device::CPU) return cpu::name args; \
        no_cuda_kernel(#name);                                \
    } while (0)
#endif

// An op that returns a value hands a device result to the host: OpContext::host_reads counts it.
// OpContext::calls counts every call, per op.
#define MWB_DEFAULT(value)
#define MWB_OP(ret, name, params, args)                       \
    ret name params {                                         \
        check::name args;                                     \
        ++ctx.calls[static_cast<std::size_t>(OpId::name)];    \
        if constexpr (!std::is_void_v<ret>) ++ctx.host_reads; \
        MWB_RUN_ON_DEVICE(name, args);                        \
    }
#include "mwb/kernels/ops.inc"
#undef MWB_OP
#undef MWB_DEFAULT
#undef MWB_RUN_ON_DEVICE

void set_num_threads(int n) {
    MWB_CHECK(n >= 1, "thread count must be >= 1, got {}", n);
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int num_threads() {
    return omp_get_max_threads();
}

int64_t attention_workspace_bytes(const AttentionParams& p, int64_t seq_len, int threads) {
    return cpu::attention_workspace_bytes(p, seq_len, threads);
}
int64_t attention_workspace_bytes(Device device, const AttentionParams& p, int64_t seq_len, int threads) {
#if defined(MWB_WITH_CUDA)
    if (device == Device::CUDA) return cuda::attention_workspace_bytes(p, seq_len);
#endif
    (void)device;
    return cpu::attention_workspace_bytes(p, seq_len, threads);
}
int64_t attention_saved_elements(Device device, const AttentionParams& p, int64_t seq_len) {
    const int64_t rows = static_cast<int64_t>(p.batch) * p.num_heads * seq_len;
    // CUDA, both backends: one log-sum-exp per score row (cuDNN's backward reads O from the stored
    // output). The CPU: the probabilities, S per row. A formula of the shapes, so that every build
    // (and the planner's tests) can state it.
    return device == Device::CUDA ? rows : rows * seq_len;
}

}  // namespace mwb::ops

namespace mwb {
const char* attention_backend_name(AttentionBackend b) { return b == AttentionBackend::Cudnn ? "cudnn" : "own"; }
}  // namespace mwb
