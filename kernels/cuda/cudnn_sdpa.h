#pragma once
// cuDNN 9's fused attention through its backend API, with the library loaded at run time (dlopen of
// libcudnn.so.9, or MWB_CUDNN_LIBRARY): cuDNN is hundreds of MB, never linked, and absent on most
// machines. The graphs are the plans of kernels/src/cudnn_sdpa_plan.h; each shape's execution plan
// and workspace size are built once and cached.
#include "../src/cudnn_sdpa_plan.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mwb::cuda::cudnn {

/// Loads cuDNN once (thread-safe); empty when it is usable here (library, symbols, version >= 9.0, a
/// handle on the current GPU), else why not.
const std::string& unavailable();
/// The loaded library's version (e.g. 91900), 0 when unavailable.
int64_t version();

/// Builds every tensor and operation descriptor of `plan` and finalizes each (no handle, no GPU
/// needed): empty when the library accepts them all, else the first refusal (the node and cuDNN's
/// status). For tests and for the reason a graph is refused.
std::string finalize_nodes(const cudnn_sdpa::Plan& plan);
/// Loads the library without asking for a GPU: empty when its symbols resolved.
const std::string& load_error();

/// Builds (once per key) and caches `plan`'s execution plan: false, with `why`, when cuDNN refuses it.
bool prepare(const std::string& key, const cudnn_sdpa::Plan& plan, std::string& why);
/// Runs the plan prepared under `key` with a pointer per bound uid on `stream`. False, with `why`, when
/// none was prepared or cuDNN has no engine for it; every other failure throws mwb::Error.
bool execute(const std::string& key, const std::vector<std::pair<int64_t, void*>>& pointers, cudaStream_t stream,
             std::string& why);

}  // namespace mwb::cuda::cudnn
