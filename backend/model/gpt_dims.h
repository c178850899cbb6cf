#pragma once
// The sizes of the GPT model held by this rank, and how it recomputes activations.
#include "backend/config/config.h"

#include <cstdint>
#include <vector>

namespace mwb {

/// B = micro batch, S = sequence, H = hidden, A = heads, G = key/value groups, D = head dim,
/// F = MLP width (per branch with SwiGLU), V = padded vocabulary, L = layers, N = S·B rows of every
/// activation, R = rotary dims of each head.
struct GptDims {
    enum class Positions { Learned, Rope, None };

    int64_t layers = 0;       // L
    int64_t hidden = 0;       // H
    int64_t heads = 0;        // A
    int64_t groups = 0;       // G; 0 = A (multi-head)
    int64_t kv_channels = 0;  // D; 0 = H / A
    int64_t ffn = 0;          // F
    bool swiglu = false;      // fc1 is (2F, H) = [gate | up], silu(gate)·up feeds fc2
    bool linear_bias = true;  // biases of qkv, proj, fc1, fc2
    bool qkv_bias = false;    // bias of qkv even without linear_bias
    Positions positions = Positions::Learned;
    int64_t rotary_dim = 0;  // R (RoPE)
    double rotary_base = 10000;
    bool rotary_interleaved = false;
    bool rope_scaling = false;  // Llama 3.1's frequency scaling
    double rope_scaling_factor = 8;
    int64_t seq = 0;          // S
    int64_t micro_batch = 0;  // B
    int64_t vocab = 0;        // V (padded)
    int64_t max_positions = 0;
    bool tied_output = true;
    bool rmsnorm = false;
    float norm_eps = 1e-5f;
    float hidden_dropout = 0;
    float attention_dropout = 0;
    float init_std = 0.02f;
    int64_t logits_chunk_bytes = 0;  // the head's logits held at once; 0 = all rows at once

    int64_t head_dim() const { return kv_channels > 0 ? kv_channels : hidden / heads; }
    int64_t kv_groups() const { return groups > 0 ? groups : heads; }
    /// Rows of the qkv weight: G·(A/G + 2)·D.
    int64_t qkv_rows() const { return (heads + 2 * kv_groups()) * head_dim(); }
    /// Rows of fc1: 2F with SwiGLU, else F.
    int64_t fc1_rows() const { return swiglu ? 2 * ffn : ffn; }
    bool has_qkv_bias() const { return linear_bias || qkv_bias; }
    bool learned_positions() const { return positions == Positions::Learned; }
    int64_t rows() const { return seq * micro_batch; }
    /// From a resolved configuration (single rank: the whole model).
    static GptDims from_config(const Config& config);
};

/// Rows (tokens) of one chunk of the head's classifier: as many as fit `budget_bytes` of logits of
/// `vocab_local` columns at `element_bytes` each (at least one; all `rows` when the budget is 0 or
/// holds them). GptModel::head and the planner's head bytes both size the chunk with this.
inline int64_t logits_chunk_rows(int64_t rows, int64_t vocab_local, int64_t element_bytes, int64_t budget_bytes) {
    if (budget_bytes <= 0) return rows;
    const int64_t fit = budget_bytes / (vocab_local * element_bytes);
    return fit < 1 ? 1 : fit < rows ? fit : rows;
}

/// The layers this rank holds: one or more model chunks (virtual pipeline stages), each a contiguous
/// range of global layers. Virtual stage k = chunk·P + pipeline_rank holds layers [k·Lv, (k+1)·Lv)
/// (Megatron-LM's interleaved assignment; without interleaving one chunk of L/P layers).
struct ModelPartition {
    struct Chunk {
        int64_t first_layer = 0, end_layer = 0;
    };
    std::vector<Chunk> chunks;
    bool embedding = true;   ///< chunks[0] starts at layer 0: word and position embeddings here
    bool head = true;        ///< chunks.back() ends at the last layer: final norm, output layer, loss here
    bool tied_copy = false;  ///< the head is here, the embedding on another stage, and they are tied

    /// The whole model on one pipeline stage.
    static ModelPartition whole(const GptDims& dims);
    /// Pipeline rank `pp_rank` of `pp_size` with `layers_per_virtual_stage` (0: no interleaving).
    static ModelPartition for_stage(const GptDims& dims, int pp_size, int pp_rank, int layers_per_virtual_stage);
};

enum class RecomputeGranularity { None, Selective, Full };

/// Which layers keep their activations, and how fully recomputed layers are grouped into chunks
/// (Megatron-LM's --recompute-granularity/--recompute-method/--recompute-num-layers).
struct RecomputePolicy {
    RecomputeGranularity granularity = RecomputeGranularity::None;
    bool uniform = true;  ///< full: uniform chunks (true) or block (false)
    int num_layers = 0;

    static RecomputePolicy from_config(const TrainingConfig& training);
    /// Layer indices below are local to a model chunk (as Megatron-LM applies the policy per stage).
    /// True when layer l keeps every activation in forward (it is not fully recomputed).
    bool stores_all(int64_t l) const;
    /// [first, last) layers of the recompute chunk holding layer l (only for layers that don't store all).
    int64_t chunk_begin(int64_t l) const;
    int64_t chunk_end(int64_t l, int64_t layers) const;
};

}  // namespace mwb
