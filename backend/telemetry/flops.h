#pragma once
// FLOP counts with one definition used everywhere (trainer, planner, app).
//
// Model FLOPs per iteration follow Narayanan et al. 2021 (eq. 3) without the recompute term: every
// GEMM of forward + backward (backward = 2× forward). Per token and layer the forward counts 2 FLOPs
// per weight of the QKV, projection, fc1 and fc2 matrices plus the attention core, as Megatron-LM's
// num_floating_point_operations (megatron/training/training.py) counts grouped-query attention and
// SwiGLU:
//     layer_fwd = 2h·(a + 2G)·d  +  2·a·d·h  +  2k·h·f  +  c·4·s·a·d
//                 QKV              proj       fc1+fc2    scores + context
// (a heads, G key/value groups, d = kv_channels, f = ffn_hidden_size per branch, k = 3 with SwiGLU
// (fc1 is h -> 2f), else 2), and
//     F_model = 3 · T · [ L·layer_fwd + 2h·V ]      (T = tokens per iteration, V = padded vocabulary)
// c is the reading of the attention core (mfu_attention_flops): "causal" (c = 1/2, Megatron-LM since
// core_v0.12.0: only the unmasked half of the causal s×s matrix is multiplied) or "full" (c = 1,
// Megatron-LM up to core_v0.11 and the papers: Narayanan et al. 2021, Korthikanti et al. 2022).
// For GPT (G = a, a·d = h, k = 2) and the full reading layer_fwd = 8h² + 4h·f + 4s·h, which with
// f = 4h is 72·T·L·h²·(1 + s/(6h) + V/(12·L·h)). Hardware FLOPs add the recomputed forward work:
// full recompute adds one forward of every recomputed layer (giving Narayanan's 96·... variant),
// selective adds the attention core. Norms, RoPE, the SwiGLU product and softmax are not counted
// (nor are they in either reference).
#include "backend/config/config.h"

#include <cstdint>
#include <string_view>

namespace mwb {

struct FlopCounts {
    double model = 0;     ///< per iteration, no recomputation counted (the basis of MFU)
    double hardware = 0;  ///< per iteration, including recomputation
};

/// Forward FLOPs per token of one transformer layer, split as recomputation needs it.
struct LayerFlops {
    double gemm = 0;       ///< QKV, projection, fc1 and fc2
    double attention = 0;  ///< scores and context: c·4·s·a·d (c from the attention reading)
    double total() const { return gemm + attention; }
};

/// The share of the s×s attention matrix counted: 0.5 for "causal", 1 for "full" (docs/config.md).
double attention_flops_share(std::string_view mfu_attention_flops);

/// The layer of a resolved model configuration (num_query_groups and kv_channels filled in), with
/// the attention core counted by the reading `mfu_attention_flops` ("causal" or "full").
LayerFlops layer_forward_flops(const ModelConfig& resolved, std::string_view mfu_attention_flops);

/// Per iteration, with the configuration's reading (telemetry.mfu_attention_flops).
FlopCounts flops_per_iteration(const Config& resolved);

}  // namespace mwb
