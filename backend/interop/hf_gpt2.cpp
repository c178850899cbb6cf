#include "backend/interop/hf_gpt2.h"

#include "mwb/kernels/error.h"

#include <algorithm>

namespace mwb::interop {

namespace {

// HF's name, with or without the "transformer." prefix (GPT2LMHeadModel saves it, GPT2Model not).
const StTensor& gpt2_tensor(const SafetensorsModel& hf, const std::string& name, const std::vector<int64_t>& shape) {
    const std::string full = "transformer." + name;
    return hf_tensor(hf, hf.contains(full) ? full : name, shape, "GPT2LMHeadModel");
}

// Megatron's qkv row (or bias entry) for HF's c_attn output column: a·3D + j·D + d <- j·H + a·D + d.
int64_t qkv_row(int64_t hf_col, int64_t H, int64_t D) {
    const int64_t j = hf_col / H, a = (hf_col % H) / D, d = hf_col % D;
    return a * 3 * D + j * D + d;
}

}  // namespace

HfGpt2Config HfGpt2Config::from_json(const nlohmann::json& j, const std::string& origin) {
    MWB_CHECK(j.is_object(), "{}: expected a JSON object", origin);
    const auto archs = j.value("architectures", nlohmann::json::array());
    MWB_CHECK(std::find(archs.begin(), archs.end(), "GPT2LMHeadModel") != archs.end() ||
                  j.value("model_type", "") == "gpt2",
              "{}: architectures {} is not GPT2LMHeadModel (model_type gpt2)", origin, archs.dump());
    HfGpt2Config c;
    const auto need = [&](const char* key) { return positive_integer(j, key, origin); };
    c.layers = need("n_layer");
    c.hidden = need("n_embd");
    c.heads = need("n_head");
    c.vocab = need("vocab_size");
    c.positions = need("n_positions");
    c.ffn = j.contains("n_inner") && !j["n_inner"].is_null() ? j["n_inner"].get<int64_t>() : 4 * c.hidden;
    c.norm_eps = j.value("layer_norm_epsilon", 1e-5);
    MWB_CHECK(c.hidden % c.heads == 0, "{}: n_embd {} does not divide by n_head {}", origin, c.hidden, c.heads);
    const std::string act = j.value("activation_function", "gelu_new");
    MWB_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
              "{}: activation_function '{}' is not the tanh GELU (gelu_new) the model computes", origin, act);
    MWB_CHECK(j.value("tie_word_embeddings", true), "{}: tie_word_embeddings false is not supported for GPT-2",
              origin);
    MWB_CHECK(!j.value("scale_attn_by_inverse_layer_idx", false) && !j.value("reorder_and_upcast_attn", false),
              "{}: scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not supported", origin);
    return c;
}

NamedTensor gpt2_from_hf(const SafetensorsModel& hf, const HfGpt2Config& c, const std::string& name,
                         const std::vector<int64_t>& shape) {
    const int64_t H = c.hidden, F = c.ffn, D = c.hidden / c.heads;
    NamedTensor out{name, shape, {}};
    const auto direct = [&](const std::string& hf_name) { out.values = hf_values(hf, gpt2_tensor(hf, hf_name, shape)); };
    const auto conv1d = [&](const std::string& hf_name, int64_t in, int64_t outs) {
        out.values = transposed(hf_values(hf, gpt2_tensor(hf, hf_name, {in, outs})), in, outs);
    };
    if (name == "embedding.word_embeddings.weight") {
        MWB_CHECK(shape.size() == 2 && shape[0] >= c.vocab && shape[1] == H,
                  "word embedding [{}] cannot hold GPT-2's [{}, {}]", fmt::join(shape, ", "), c.vocab, H);
        out.values = hf_values(hf, gpt2_tensor(hf, "wte.weight", {c.vocab, H}));
        out.values.resize(static_cast<std::size_t>(shape[0] * H), 0.0f);  // padding rows
        return out;
    }
    if (name == "embedding.position_embeddings.weight") return direct("wpe.weight"), out;
    if (name == "decoder.final_layernorm.weight") return direct("ln_f.weight"), out;
    if (name == "decoder.final_layernorm.bias") return direct("ln_f.bias"), out;
    const LayerName l = split_layer(name);
    MWB_CHECK(l.layer >= 0 && l.layer < c.layers, "GPT-2 has no counterpart of parameter {}", name);
    const std::string h = fmt::format("h.{}.", l.layer);
    if (l.rest == "input_layernorm.weight") return direct(h + "ln_1.weight"), out;
    if (l.rest == "input_layernorm.bias") return direct(h + "ln_1.bias"), out;
    if (l.rest == "pre_mlp_layernorm.weight") return direct(h + "ln_2.weight"), out;
    if (l.rest == "pre_mlp_layernorm.bias") return direct(h + "ln_2.bias"), out;
    if (l.rest == "self_attention.linear_proj.weight") return conv1d(h + "attn.c_proj.weight", H, H), out;
    if (l.rest == "self_attention.linear_proj.bias") return direct(h + "attn.c_proj.bias"), out;
    if (l.rest == "mlp.linear_fc1.weight") return conv1d(h + "mlp.c_fc.weight", H, F), out;
    if (l.rest == "mlp.linear_fc1.bias") return direct(h + "mlp.c_fc.bias"), out;
    if (l.rest == "mlp.linear_fc2.weight") return conv1d(h + "mlp.c_proj.weight", F, H), out;
    if (l.rest == "mlp.linear_fc2.bias") return direct(h + "mlp.c_proj.bias"), out;
    if (l.rest == "self_attention.linear_qkv.weight") {
        const auto w = hf_values(hf, gpt2_tensor(hf, h + "attn.c_attn.weight", {H, 3 * H}));  // (in, out)
        out.values.assign(static_cast<std::size_t>(3 * H * H), 0.0f);
        for (int64_t i = 0; i < H; ++i)
            for (int64_t col = 0; col < 3 * H; ++col) out.values[qkv_row(col, H, D) * H + i] = w[i * 3 * H + col];
        return out;
    }
    if (l.rest == "self_attention.linear_qkv.bias") {
        const auto b = hf_values(hf, gpt2_tensor(hf, h + "attn.c_attn.bias", {3 * H}));
        out.values.assign(static_cast<std::size_t>(3 * H), 0.0f);
        for (int64_t col = 0; col < 3 * H; ++col) out.values[qkv_row(col, H, D)] = b[col];
        return out;
    }
    MWB_FAIL("GPT-2 has no counterpart of parameter {}", name);
}

std::vector<NamedTensor> gpt2_to_hf(const std::vector<NamedTensor>& params, const HfGpt2Config& c) {
    const int64_t H = c.hidden, F = c.ffn, D = c.hidden / c.heads;
    std::vector<NamedTensor> out;
    for (const NamedTensor& p : params) {
        const auto put = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
            out.push_back({"transformer." + name, std::move(shape), std::move(v)});
        };
        if (p.name == "embedding.word_embeddings.weight") {
            MWB_CHECK(p.shape.size() == 2 && p.shape[0] >= c.vocab, "word embedding [{}] has fewer than {} rows",
                      fmt::join(p.shape, ", "), c.vocab);
            put("wte.weight", {c.vocab, H}, {p.values.begin(), p.values.begin() + c.vocab * H});
            continue;
        }
        if (p.name == "embedding.position_embeddings.weight") {
            put("wpe.weight", p.shape, p.values);
            continue;
        }
        if (p.name.starts_with("decoder.final_layernorm.")) {
            put("ln_f." + p.name.substr(std::string("decoder.final_layernorm.").size()), p.shape, p.values);
            continue;
        }
        const LayerName l = split_layer(p.name);
        MWB_CHECK(l.layer >= 0, "parameter {} has no GPT-2 counterpart", p.name);
        const std::string h = fmt::format("h.{}.", l.layer);
        if (l.rest == "input_layernorm.weight") put(h + "ln_1.weight", p.shape, p.values);
        else if (l.rest == "input_layernorm.bias") put(h + "ln_1.bias", p.shape, p.values);
        else if (l.rest == "pre_mlp_layernorm.weight") put(h + "ln_2.weight", p.shape, p.values);
        else if (l.rest == "pre_mlp_layernorm.bias") put(h + "ln_2.bias", p.shape, p.values);
        else if (l.rest == "self_attention.linear_proj.weight") put(h + "attn.c_proj.weight", {H, H}, transposed(p.values, H, H));
        else if (l.rest == "self_attention.linear_proj.bias") put(h + "attn.c_proj.bias", p.shape, p.values);
        else if (l.rest == "mlp.linear_fc1.weight") put(h + "mlp.c_fc.weight", {H, F}, transposed(p.values, F, H));
        else if (l.rest == "mlp.linear_fc1.bias") put(h + "mlp.c_fc.bias", p.shape, p.values);
        else if (l.rest == "mlp.linear_fc2.weight") put(h + "mlp.c_proj.weight", {F, H}, transposed(p.values, H, F));
        else if (l.rest == "mlp.linear_fc2.bias") put(h + "mlp.c_proj.bias", p.shape, p.values);
        else if (l.rest == "self_attention.linear_qkv.weight") {
            std::vector<float> w(static_cast<std::size_t>(3 * H * H));
            for (int64_t i = 0; i < H; ++i)
                for (int64_t col = 0; col < 3 * H; ++col) w[i * 3 * H + col] = p.values[qkv_row(col, H, D) * H + i];
            put(h + "attn.c_attn.weight", {H, 3 * H}, std::move(w));
        } else if (l.rest == "self_attention.linear_qkv.bias") {
            std::vector<float> b(static_cast<std::size_t>(3 * H));
            for (int64_t col = 0; col < 3 * H; ++col) b[col] = p.values[qkv_row(col, H, D)];
            put(h + "attn.c_attn.bias", {3 * H}, std::move(b));
        } else {
            MWB_FAIL("parameter {} has no GPT-2 counterpart", p.name);
        }
    }
    return out;
}

}  // namespace mwb::interop
