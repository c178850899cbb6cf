#pragma once
// Hugging Face's Llama-family causal LMs (LlamaForCausalLM, MistralForCausalLM without a sliding window,
// Qwen2ForCausalLM without one: Llama 2/3, TinyLlama, Mistral, Qwen2) <-> Megatron-core parameter names,
// as whole (unsharded) float32 tensors. The conventions bridged:
//   - q_proj (A·D, H), k_proj and v_proj (G·D, H) become one linear_qkv (G·(A/G + 2)·D, H) whose rows are,
//     per key/value group g, its A/G query heads, then its key head, then its value head (Megatron's
//     layout: a tensor-parallel rank takes whole groups, so no per-rank interleaving is left to do).
//   - gate_proj and up_proj (F, H) become linear_fc1 (2F, H) = [gate | up]; each tensor-parallel rank
//     holds its part of both blocks (the layout's split_blocks), so the global tensor is the plain stack.
//   - RoPE: Hugging Face's checkpoints are in rotate-half order (transformers' conversion script already
//     permuted Meta's interleaved q/k rows), which is our default pairing (i, i + R/2): rows are kept as
//     they are. The proof is the logits test (tests/backend/interop/test_hf_llama.cpp).
//   - embed_tokens and (untied) lm_head rows are padded with zeros to the padded vocabulary on import
//     and cut back on export.
//   model.embed_tokens / layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
//   mlp.{gate,up,down}_proj} / model.norm / lm_head
//   -> embedding.word_embeddings / decoder.layers.N.{input_layernorm, self_attention.linear_qkv,
//   self_attention.linear_proj, pre_mlp_layernorm, mlp.linear_fc1, mlp.linear_fc2} /
//   decoder.final_layernorm / output_layer
#include "backend/config/config.h"
#include "backend/interop/hf_common.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mwb::interop {

/// What config.json says about the architecture.
struct HfLlamaConfig {
    std::string architecture = "LlamaForCausalLM";  ///< or MistralForCausalLM, Qwen2ForCausalLM
    int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0, positions = 0;
    int64_t rope_theta = 10000;
    bool rope_scaling = false;  ///< rope_type llama3 (low/high frequency factors 1 and 4, original context 8192)
    double rope_factor = 8;
    double norm_eps = 1e-6;
    bool tied = false;
    bool qkv_bias = false;     ///< q/k/v_proj biases (Qwen2)
    bool linear_bias = false;  ///< every projection has a bias (Llama's attention_bias with mlp_bias)
    double init_std = 0.02, attention_dropout = 0;

    /// Reads and checks config.json. What the model cannot compute (a sliding window, another RoPE
    /// type, experts, another activation...) is an error naming the file and the key.
    static HfLlamaConfig from_json(const nlohmann::json& config, const std::string& origin);
    /// The architecture of an mwb model configuration (RMSNorm, SwiGLU, RoPE rotate-half on every dim);
    /// an error names the field that Hugging Face's Llama family does not have.
    static HfLlamaConfig from_model(const ModelConfig& model, const std::string& origin);
    /// The mwb model fields of this architecture (sizes, norms, RoPE, biases, tying, dropout off).
    void apply_to(ModelConfig& model) const;
    /// config.json for save_pretrained-style output (without token ids and dtype: the caller's).
    nlohmann::json to_json() const;
};

/// True when config.json names one of the architectures above (else the GPT-2 path or an error).
bool is_llama_family(const nlohmann::json& config);

/// The Megatron tensor `name` (global shape `shape`; vocabulary rows may exceed the HF vocabulary:
/// padding rows are zero) from the HF checkpoint. Errors name the HF tensor and its shape.
NamedTensor llama_from_hf(const SafetensorsModel& hf, const HfLlamaConfig& c, const std::string& name,
                          const std::vector<int64_t>& shape);

/// The HF tensors (names, shapes, float32 values) of the Megatron tensors `params` (whole tensors, any
/// order; vocabulary tensors cut to c.vocab rows), in Hugging Face's order: the embedding, each layer's
/// tensors, the final norm, lm_head.
std::vector<NamedTensor> llama_to_hf(const std::vector<NamedTensor>& params, const HfLlamaConfig& c);

}  // namespace mwb::interop
