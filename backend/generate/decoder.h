#pragma once
// The model's forward pass for generation on the CPU: tokens go through the same weights and ops as
// training (norms, GELU/SwiGLU, RoPE kernels), with a key/value cache so that each new token costs one
// pass over the weights instead of a pass over the whole sequence.
//   K, V cache per layer: (batch, G, max_len, D) contiguous; row b's token at position p sits at [b][g][p].
// Rows are independent sequences with their own lengths (no padding): a prompt is prefilled into its
// row alone, decode steps advance any set of rows by one token each at their own position. Learned
// positions add wpe[p]; RoPE rotates q and k with the angles of position p before k enters the cache.
// Linear layers split their output rows over the threads, each thread one single-threaded sgemv
// (one token) or sgemm (several) over its contiguous slice of the weight: decode at batch 1 reads every
// weight once per token, which is the memory-bandwidth bound docs/performance.md measures against.
#include "model/gpt_dims.h"
#include "model/param_layout.h"
#include "model/transformer_layer.h"

#include <cstdint>
#include <span>
#include <vector>

namespace mwb::generate {

class Decoder {
public:
    /// d: the whole model (tensor-parallel size 1); layout/params: its parameters (GptModel's arena);
    /// max_batch rows of at most max_len tokens each (max_len <= max_positions with learned positions).
    Decoder(const GptDims& d, const ParamLayout& layout, const TensorView& params, int64_t max_batch, int64_t max_len);

    const GptDims& dims() const { return d_; }
    int64_t max_len() const { return max_len_; }
    /// Tokens row b holds in the cache.
    int64_t length(int64_t row) const { return lengths_[static_cast<std::size_t>(row)]; }
    /// Empties row b.
    void reset(int64_t row) { lengths_[static_cast<std::size_t>(row)] = 0; }

    /// Appends `tokens` to row b and writes the logits (V) after its last token to `logits`.
    void prefill(int64_t row, std::span<const int32_t> tokens, float* logits);
    /// Appends tokens[i] to rows[i] (distinct rows) and writes their logits to logits (n, V).
    void decode(std::span<const int64_t> rows, std::span<const int32_t> tokens, float* logits);

    /// Bytes of weights one forward step reads (every matrix and vector once, the embedding rows not).
    int64_t weight_bytes_per_step() const;

private:
    struct Entry {
        int64_t row, pos;
    };
    /// The forward of n tokens (entries[i] of token ids[i]); logits for the entries in logit_rows.
    void forward(std::span<const Entry> entries, std::span<const int32_t> ids, std::span<const int64_t> logit_rows,
                 float* logits);
    void attention(std::span<const Entry> entries, int64_t layer, const float* qkv, float* context);
    float* cache_k(int64_t layer, int64_t row, int64_t group) const;
    float* cache_v(int64_t layer, int64_t row, int64_t group) const;
    void ensure_scratch(int64_t n);

    GptDims d_;
    mutable OpContext op_;  // the CPU
    int64_t max_batch_, max_len_;
    std::vector<LayerParams> w_;
    TensorView wte_, wpe_, lnf_w_, lnf_b_, out_w_;
    std::vector<float> rope_cos_, rope_sin_;  // (max_len, R/2)
    std::vector<float> k_cache_, v_cache_;    // per layer (batch, G, max_len, D)
    std::vector<int64_t> lengths_;
    // Scratch for n tokens, grown on demand.
    int64_t scratch_rows_ = 0;
    std::vector<float> x_, x2_, ln_, mean_, rstd_, qkv_, ctx_, branch_, fc1_, act_, scores_;
};

}  // namespace mwb::generate
