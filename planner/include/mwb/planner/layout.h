#pragma once
// What a resolved configuration means for one rank: the model's sizes, the parallel layout on a world
// of N ranks, and the bytes per element of each kind of tensor on the device.
#include "backend/config/config.h"
#include "mwb/planner/cluster.h"
#include "backend/telemetry/flops.h"

#include <cstdint>

namespace mwb::planner {

/// s = sequence, b = micro batch, h = hidden, a = heads, f = MLP width (per branch with SwiGLU),
/// L = layers, V = padded vocabulary, P = learned position-table rows (Korthikanti et al. 2022's
/// letters); G = key/value heads (= a without grouped-query attention), d = head dim (kv_channels).
struct ModelShape {
    int64_t L = 0, h = 0, a = 0, f = 0, s = 0, b = 0, V = 0, P = 0;
    int64_t G = 0, d = 0;
    int64_t V_unpadded = 0;      ///< the tokenizer's vocabulary before Megatron-LM's padding
    bool tied = true;            ///< output layer shares the word embedding
    bool rmsnorm = false;        ///< RMSNorm (no bias, no mean kept) instead of LayerNorm
    bool swiglu = false;         ///< gated MLP: fc1 is h -> 2f (gate and up), fc2 f -> h
    bool bias = true;            ///< add_bias_linear: biases on QKV, projection, fc1, fc2
    bool qkv_bias = true;        ///< a QKV bias (add_bias_linear or add_qkv_bias)
    int64_t rotary_dim = 0;      ///< dims of each head RoPE rotates (kv_channels × rotary_percent), 0 without RoPE
    LayerFlops layer_flops;      ///< forward FLOPs per token of one layer (telemetry/flops.h)

    int64_t q_width() const { return a * d; }              ///< query heads × d: the projection's input
    int64_t kv_width() const { return G * d; }             ///< key (or value) heads × d
    int64_t qkv_width() const { return (a + 2 * G) * d; }  ///< QKV output columns
    int64_t fc1_width() const { return swiglu ? 2 * f : f; }
    static ModelShape from(const Config& resolved);
};

enum class Recompute { None, Selective, FullUniform, FullBlock };

struct Layout {
    int world = 1, tp = 1, pp = 1, dp = 1;
    int vp = 1;       ///< model chunks per pipeline rank (interleaved schedule when > 1)
    bool sp = false;  ///< sequence parallel (needs tp > 1)
    bool distributed_optimizer = false;
    int64_t bucket_elements = 0;  ///< ddp_bucket_size (0: the engine's 40M elements)
    int64_t micro_batch = 1, global_batch = 1;
    int64_t micro_batches = 1;  ///< m: micro-batches per iteration per data-parallel rank
    int layers_per_stage = 0;   ///< L / pp
    int layers_per_chunk = 0;   ///< L / (pp · vp)
    Recompute recompute = Recompute::None;
    int recompute_num_layers = 0;
    int64_t logits_chunk_bytes = 0;  ///< the head's logits held at once (GptModel::head's chunks); 0 = all
    /// From a resolved, structurally valid configuration (see plan.h) on `world` ranks.
    static Layout from(const Config& resolved, int world);
};

/// Bytes per element as the device stores them. In a 16-bit run the CPU backend stores activations in
/// 16 bits but keeps its weights, the attention probabilities, the logits and the sums before a rounding
/// in fp32 (docs/memory.md).
struct Precision {
    int weight = 4;       ///< model weights the forward pass uses
    int gradient = 4;     ///< gradient accumulators ("main grads")
    /// The residual stream (embedding output, layer inputs, x2, layer outputs), the norm outputs and their
    /// gradients: 16-bit in a 16-bit run on every device.
    int activation = 4;
    /// A layer's stored intermediates (qkv, attention context, fc1 output, activation output) and their
    /// gradients: 16-bit in a 16-bit run on every device (the CPU's kernels read and write bf16/fp16 there).
    int layer_stored = 4;
    int probs = 4;        ///< attention probabilities kept for backward (the CPU keeps them fp32)
    int logits = 4;       ///< one chunk of logits and their gradient (the CPU's cross-entropy reads fp32)
    /// Sums before their one rounding: a row-parallel output before the reduction and residual add,
    /// tensor-parallel partial sums, the embedding sum, a dropout's input gradient (fp32 on the CPU).
    int partial_sum = 4;
    int statistic = 4;    ///< norm mean/rstd and loss statistics (always fp32)
    bool master = false;  ///< fp32 master weights in the optimizer (bf16/fp16 runs)
    bool half = false;    ///< a bf16/fp16 run (the 16-bit peak FLOP/s applies)
    static Precision from(const TrainingConfig& training, const DeviceSpec& device);
};

/// The token-id vocabulary a tokenizer type implies when the planner has no tokenizer files:
/// ByteTokenizer 257, GPT2BPETokenizer 50257 (GPT-2's), NullTokenizer 0 (vocab_size is the user's).
int64_t tokenizer_vocab_size(const std::string& tokenizer_type);

}  // namespace mwb::planner
