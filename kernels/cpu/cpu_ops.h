#pragma once
// CPU implementations of the ops in mwb/kernels/ops.inc (same signatures; see there for the
// contracts). The dispatcher (src/ops.cpp) has checked every argument's shape, dtype and device
// before these run: they only check what is the CPU's own limit.
#include "mwb/kernels/ops.h"

namespace mwb::cpu {

#define MWB_DEFAULT(value)
#define MWB_OP(ret, name, params, args) ret name params;
#include "mwb/kernels/ops.inc"
#undef MWB_OP
#undef MWB_DEFAULT

int64_t attention_workspace_bytes(const AttentionParams& p, int64_t seq_len, int threads);

}  // namespace mwb::cpu
