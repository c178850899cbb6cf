#pragma once
// Hugging Face's GPT2LMHeadModel weights <-> Megatron-core parameter names (ParamLayout's), as whole
// (unsharded) float32 tensors. The conventions bridged:
//   - GPT-2's Conv1D stores (in, out) and computes x @ W: Megatron's linear weights are (out, in).
//   - c_attn's output columns are [q of every head | k | v]; Megatron's linear_qkv rows are per head
//     [q_h | k_h | v_h] (row a·3D + j·D + d <- column j·H + a·D + d, D = H / heads).
//   - wte is the word embedding and the tied output layer; its rows are padded with zeros to the
//     padded vocabulary on import and cut back on export.
//   transformer.wte/wpe, h.N.ln_1/attn.c_attn/attn.c_proj/ln_2/mlp.c_fc/mlp.c_proj, ln_f
//   -> embedding.word_embeddings / position_embeddings, decoder.layers.N.input_layernorm /
//      self_attention.linear_qkv / linear_proj / pre_mlp_layernorm / mlp.linear_fc1 / linear_fc2,
//      decoder.final_layernorm
#include "backend/interop/hf_common.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mwb::interop {

/// What config.json says about the architecture (GPT2LMHeadModel only).
struct HfGpt2Config {
    int64_t layers = 0, hidden = 0, heads = 0, ffn = 0, vocab = 0, positions = 0;
    double norm_eps = 1e-5;
    /// Reads and checks config.json: architectures GPT2LMHeadModel, gelu_new activation, tied
    /// embeddings; errors name the file and the field.
    static HfGpt2Config from_json(const nlohmann::json& config, const std::string& origin);
};

/// The Megatron tensor `name` (global shape `shape`: the word embedding's rows may exceed the HF
/// vocabulary: padding rows are zero) from the HF checkpoint. Errors name the HF tensor and its shape.
NamedTensor gpt2_from_hf(const SafetensorsModel& hf, const HfGpt2Config& c, const std::string& name,
                         const std::vector<int64_t>& shape);

/// The HF tensors (names, shapes, float32 values) of the Megatron tensors `params` (whole tensors,
/// any order; the word embedding cut to c.vocab rows).
std::vector<NamedTensor> gpt2_to_hf(const std::vector<NamedTensor>& params, const HfGpt2Config& c);

}  // namespace mwb::interop
