#pragma once
// FLOP counts with one definition used everywhere (trainer, planner, app).
//
// Model FLOPs per iteration follow Narayanan et al. 2021 (eq. 3) without the recompute term: every
// GEMM of forward + backward (backward = 2× forward), attention scores and context counted over the
// full s×s matrix. Per token and layer the forward counts 2 FLOPs per weight of the QKV, projection,
// fc1 and fc2 matrices plus the attention core, as Megatron-LM's num_floating_point_operations
// (megatron/training/training.py) counts grouped-query attention and SwiGLU:
//     layer_fwd = 2h·(a + 2G)·d  +  2·a·d·h  +  2k·h·f  +  4·s·a·d
//                 QKV              proj       fc1+fc2    scores + context
// (a heads, G key/value groups, d = kv_channels, f = ffn_hidden_size per branch, k = 3 with SwiGLU
// (fc1 is h -> 2f), else 2), and
//     F_model = 3 · T · [ L·layer_fwd + 2h·V ]      (T = tokens per iteration, V = padded vocabulary)
// For GPT (G = a, a·d = h, k = 2) layer_fwd = 8h² + 4h·f + 4s·h, which with f = 4h is
// 72·T·L·h²·(1 + s/(6h) + V/(12·L·h)). Megatron-LM halves the attention core for the causal mask;
// this definition keeps Narayanan's full matrix (docs/planner.md). Hardware FLOPs add the
// recomputed forward work: full recompute adds one forward of every recomputed layer (giving
// Narayanan's 96·... variant), selective adds the attention core. Norms, RoPE, the SwiGLU product
// and softmax are not counted (nor are they in either reference).
#include "config/config.h"

#include <cstdint>

namespace mwb {

struct FlopCounts {
    double model = 0;     ///< per iteration, no recomputation counted (the basis of MFU)
    double hardware = 0;  ///< per iteration, including recomputation
};

/// Forward FLOPs per token of one transformer layer, split as recomputation needs it.
struct LayerFlops {
    double gemm = 0;       ///< QKV, projection, fc1 and fc2
    double attention = 0;  ///< scores and context over the full s×s matrix: 4·s·a·d
    double total() const { return gemm + attention; }
};

/// The layer of a resolved model configuration (num_query_groups and kv_channels filled in).
LayerFlops layer_forward_flops(const ModelConfig& resolved);

FlopCounts flops_per_iteration(const Config& resolved);

}  // namespace mwb
