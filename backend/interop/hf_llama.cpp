#include "backend/interop/hf_llama.h"

#include "mwb/kernels/error.h"

#include <algorithm>
#include <cmath>

namespace mwb::interop {

namespace {

struct Family {
    const char* architecture;
    const char* model_type;
};
constexpr Family kFamilies[] = {
    {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "mistral"}, {"Qwen2ForCausalLM", "qwen2"}};

// Llama 3.1's fixed constants besides the factor (model/rope.cpp computes with these).
constexpr double kLowFreqFactor = 1, kHighFreqFactor = 4, kOriginalContext = 8192;

bool present(const nlohmann::json& j, const char* key) {
    return j.contains(key) && !j[key].is_null();
}

// Megatron's qkv row of query head h, or of group g's key (j = A/G) or value (j = A/G + 1) head, dim d.
struct QkvRows {
    int64_t per_group, D;  // query heads per group, head dim
    int64_t q(int64_t h, int64_t d) const { return (h / per_group) * (per_group + 2) * D + (h % per_group) * D + d; }
    int64_t k(int64_t g, int64_t d) const { return g * (per_group + 2) * D + per_group * D + d; }
    int64_t v(int64_t g, int64_t d) const { return g * (per_group + 2) * D + (per_group + 1) * D + d; }
};

}  // namespace

bool is_llama_family(const nlohmann::json& j) {
    if (!j.is_object()) return false;
    const auto archs = j.value("architectures", nlohmann::json::array());
    for (const Family& f : kFamilies)
        if (std::find(archs.begin(), archs.end(), f.architecture) != archs.end() ||
            (archs.empty() && j.value("model_type", "") == f.model_type))
            return true;
    return false;
}

HfLlamaConfig HfLlamaConfig::from_json(const nlohmann::json& j, const std::string& origin) {
    MWB_CHECK(j.is_object(), "{}: expected a JSON object", origin);
    HfLlamaConfig c;
    const auto archs = j.value("architectures", nlohmann::json::array());
    const std::string model_type = j.value("model_type", "");
    const Family* family = nullptr;
    for (const Family& f : kFamilies)
        if (std::find(archs.begin(), archs.end(), f.architecture) != archs.end() ||
            (archs.empty() && model_type == f.model_type))
            family = &f;
    MWB_CHECK(family,
              "{}: architectures {} (model_type '{}') is not LlamaForCausalLM, MistralForCausalLM or "
              "Qwen2ForCausalLM",
              origin, archs.dump(), model_type);
    c.architecture = family->architecture;
    const bool qwen2 = c.architecture == "Qwen2ForCausalLM";

    const auto need = [&](const char* key) { return positive_integer(j, key, origin); };
    const auto optional = [&](const char* key, int64_t fallback) { return present(j, key) ? need(key) : fallback; };
    const auto number = [&](const char* key, double fallback) {
        if (!present(j, key)) return fallback;
        MWB_CHECK(j[key].is_number(), "{}: \"{}\" must be a number", origin, key);
        return j[key].get<double>();
    };
    const auto flag = [&](const char* key) {
        if (!present(j, key)) return false;
        MWB_CHECK(j[key].is_boolean(), "{}: \"{}\" must be true or false", origin, key);
        return j[key].get<bool>();
    };
    c.layers = need("num_hidden_layers");
    c.hidden = need("hidden_size");
    c.heads = need("num_attention_heads");
    c.ffn = need("intermediate_size");
    c.vocab = need("vocab_size");
    c.positions = need("max_position_embeddings");
    c.kv_heads = optional("num_key_value_heads", c.heads);
    MWB_CHECK(c.heads % c.kv_heads == 0, "{}: num_attention_heads {} does not divide by num_key_value_heads {}", origin,
              c.heads, c.kv_heads);
    if (present(j, "head_dim")) {
        c.head_dim = need("head_dim");
    } else {
        MWB_CHECK(c.hidden % c.heads == 0,
                  "{}: hidden_size {} does not divide by num_attention_heads {} (and no "
                  "head_dim)",
                  origin, c.hidden, c.heads);
        c.head_dim = c.hidden / c.heads;
    }
    c.norm_eps = number("rms_norm_eps", 1e-6);
    c.init_std = number("initializer_range", 0.02);
    c.attention_dropout = number("attention_dropout", 0);
    c.tied = flag("tie_word_embeddings");
    const double theta = number("rope_theta", 10000);
    MWB_CHECK(theta >= 1 && theta == std::floor(theta) && theta < 1e15,
              "{}: \"rope_theta\" {} is not a positive whole number (the RoPE base is an integer here)", origin, theta);
    c.rope_theta = static_cast<int64_t>(theta);

    // What the model does not compute: refused by name rather than converted into something else.
    const std::string act = j.value("hidden_act", "silu");
    MWB_CHECK(act == "silu", "{}: \"hidden_act\" '{}' is not supported (SwiGLU uses silu)", origin, act);
    for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size"})
        MWB_CHECK(!present(j, key) || (j[key].is_number() && j[key].get<double>() == 0),
                  "{}: \"{}\": mixture-of-experts models are not supported", origin, key);
    if (qwen2) {
        MWB_CHECK(!flag("use_sliding_window"),
                  "{}: \"use_sliding_window\" true is not supported (no sliding-window "
                  "attention)",
                  origin);
    } else {
        MWB_CHECK(!present(j, "sliding_window"),
                  "{}: \"sliding_window\" {} is not supported (no sliding-window "
                  "attention; null means none)",
                  origin, j.contains("sliding_window") ? j["sliding_window"].dump() : "");
    }
    MWB_CHECK(number("partial_rotary_factor", 1) == 1, "{}: \"partial_rotary_factor\" other than 1 is not supported",
              origin);
    if (qwen2) {
        c.qkv_bias = true;  // Qwen2's q/k/v projections always have biases, o_proj and the MLP none
    } else {
        const bool attention_bias = flag("attention_bias"), mlp_bias = flag("mlp_bias");
        MWB_CHECK(attention_bias == mlp_bias,
                  "{}: \"attention_bias\" {} with \"mlp_bias\" {} is not supported (the model has biases on every "
                  "projection or on none but q/k/v)",
                  origin, attention_bias, mlp_bias);
        c.linear_bias = attention_bias;
    }
    if (present(j, "rope_scaling")) {
        const auto& r = j["rope_scaling"];
        MWB_CHECK(r.is_object(), "{}: \"rope_scaling\" must be an object or null", origin);
        const std::string type = r.value("rope_type", r.value("type", std::string()));
        if (type != "default") {
            MWB_CHECK(type == "llama3", "{}: \"rope_scaling.rope_type\" '{}' is not supported (llama3 or default)",
                      origin, type);
            const auto scale = [&](const char* key, double want) {
                MWB_CHECK(r.contains(key) && r[key].is_number() &&
                              (want == 0 ? r[key].get<double>() > 0 : r[key].get<double>() == want),
                          "{}: \"rope_scaling.{}\" {} is not supported ({})", origin, key,
                          r.contains(key) ? r[key].dump() : "(missing)",
                          want == 0 ? "a positive number" : fmt::format("Llama 3.1's {} is built in", want));
                return r[key].get<double>();
            };
            c.rope_scaling = true;
            c.rope_factor = scale("factor", 0);
            scale("low_freq_factor", kLowFreqFactor);
            scale("high_freq_factor", kHighFreqFactor);
            scale("original_max_position_embeddings", kOriginalContext);
        }
    }
    return c;
}

HfLlamaConfig HfLlamaConfig::from_model(const ModelConfig& m, const std::string& origin) {
    const auto require = [&](bool ok, const char* field, const char* want) {
        MWB_CHECK(ok, "{}: {} must be {} for Hugging Face's Llama family", origin, field, want);
    };
    require(m.normalization == "RMSNorm", "normalization", "RMSNorm");
    require(m.swiglu, "swiglu", "true");
    require(m.position_embedding_type == "rope", "position_embedding_type", "rope");
    require(m.rotary_percent == 1.0, "rotary_percent", "1");
    require(!m.rotary_interleaved, "rotary_interleaved", "false (rotate-half pairs)");
    HfLlamaConfig c;
    c.linear_bias = m.add_bias_linear;
    c.qkv_bias = m.add_qkv_bias && !m.add_bias_linear;
    c.architecture = c.qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
    c.layers = m.num_layers;
    c.hidden = m.hidden_size;
    c.heads = m.num_attention_heads;
    c.kv_heads = m.group_query_attention ? m.num_query_groups : m.num_attention_heads;
    c.head_dim = m.kv_channels > 0 ? m.kv_channels : m.hidden_size / m.num_attention_heads;
    c.ffn = m.ffn_hidden_size;
    c.positions = m.max_position_embeddings > 0 ? m.max_position_embeddings : m.seq_length;
    c.rope_theta = m.rotary_base;
    c.rope_scaling = m.use_rope_scaling;
    c.rope_factor = m.rope_scaling_factor;
    c.norm_eps = m.layernorm_epsilon;
    c.tied = !m.untie_embeddings_and_output_weights;
    c.init_std = m.init_method_std;
    c.attention_dropout = m.attention_dropout;
    return c;
}

void HfLlamaConfig::apply_to(ModelConfig& m) const {
    m.num_layers = static_cast<int>(layers);
    m.hidden_size = static_cast<int>(hidden);
    m.num_attention_heads = static_cast<int>(heads);
    m.group_query_attention = kv_heads != heads;
    m.num_query_groups = static_cast<int>(kv_heads);
    m.kv_channels = static_cast<int>(head_dim);
    m.ffn_hidden_size = static_cast<int>(ffn);
    m.swiglu = true;
    m.add_bias_linear = linear_bias;
    m.add_qkv_bias = qkv_bias;
    m.position_embedding_type = "rope";
    m.rotary_base = rope_theta;
    m.rotary_percent = 1.0;
    m.rotary_interleaved = false;
    m.use_rope_scaling = rope_scaling;
    m.rope_scaling_factor = rope_factor;
    m.max_position_embeddings = static_cast<int>(positions);
    m.seq_length = static_cast<int>(std::min<int64_t>(positions, 4096));  // a training default; --seq-length sets it
    m.vocab_size = static_cast<int>(vocab);
    m.normalization = "RMSNorm";
    m.layernorm_epsilon = norm_eps;
    m.untie_embeddings_and_output_weights = !tied;
    m.hidden_dropout = 0;  // the Llama family has no residual dropout
    m.attention_dropout = attention_dropout;
    m.init_method_std = init_std;
}

nlohmann::json HfLlamaConfig::to_json() const {
    const bool qwen2 = architecture == "Qwen2ForCausalLM";
    nlohmann::json j = {{"architectures", {architecture}},
                        {"model_type", qwen2 ? "qwen2" : "llama"},
                        {"num_hidden_layers", layers},
                        {"hidden_size", hidden},
                        {"num_attention_heads", heads},
                        {"num_key_value_heads", kv_heads},
                        {"head_dim", head_dim},
                        {"intermediate_size", ffn},
                        {"vocab_size", vocab},
                        {"max_position_embeddings", positions},
                        {"hidden_act", "silu"},
                        {"rms_norm_eps", norm_eps},
                        {"rope_theta", rope_theta},
                        {"tie_word_embeddings", tied},
                        {"initializer_range", init_std},
                        {"attention_dropout", attention_dropout},
                        {"use_cache", true}};
    j["rope_scaling"] = nullptr;
    if (rope_scaling)
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", rope_factor},
                             {"low_freq_factor", kLowFreqFactor},
                             {"high_freq_factor", kHighFreqFactor},
                             {"original_max_position_embeddings", static_cast<int64_t>(kOriginalContext)}};
    if (qwen2) {
        j["use_sliding_window"] = false;
    } else {
        j["attention_bias"] = linear_bias;
        j["mlp_bias"] = linear_bias;
    }
    return j;
}

NamedTensor llama_from_hf(const SafetensorsModel& hf, const HfLlamaConfig& c, const std::string& name,
                          const std::vector<int64_t>& shape) {
    const int64_t H = c.hidden, F = c.ffn, D = c.head_dim, A = c.heads, G = c.kv_heads;
    const char* arch = c.architecture.c_str();
    NamedTensor out{name, shape, {}};
    const auto direct = [&](const std::string& hf_name) {
        out.values = hf_values(hf, hf_tensor(hf, hf_name, shape, arch));
    };
    const auto vocabulary = [&](const std::string& hf_name) {
        MWB_CHECK(shape.size() == 2 && shape[0] >= c.vocab && shape[1] == H, "{} [{}] cannot hold {}'s [{}, {}]", name,
                  fmt::join(shape, ", "), arch, c.vocab, H);
        out.values = hf_values(hf, hf_tensor(hf, hf_name, {c.vocab, H}, arch));
        out.values.resize(static_cast<std::size_t>(shape[0] * H), 0.0f);  // padding rows
    };
    if (name == "embedding.word_embeddings.weight") return vocabulary("model.embed_tokens.weight"), out;
    if (name == "output_layer.weight") return vocabulary("lm_head.weight"), out;
    if (name == "decoder.final_layernorm.weight") return direct("model.norm.weight"), out;
    const LayerName l = split_layer(name);
    MWB_CHECK(l.layer >= 0 && l.layer < c.layers, "{} has no counterpart of parameter {}", arch, name);
    const std::string p = fmt::format("model.layers.{}.", l.layer);
    if (l.rest == "input_layernorm.weight") return direct(p + "input_layernorm.weight"), out;
    if (l.rest == "pre_mlp_layernorm.weight") return direct(p + "post_attention_layernorm.weight"), out;
    if (l.rest == "self_attention.linear_proj.weight") return direct(p + "self_attn.o_proj.weight"), out;
    if (l.rest == "self_attention.linear_proj.bias") return direct(p + "self_attn.o_proj.bias"), out;
    if (l.rest == "mlp.linear_fc2.weight") return direct(p + "mlp.down_proj.weight"), out;
    if (l.rest == "mlp.linear_fc2.bias") return direct(p + "mlp.down_proj.bias"), out;
    const bool qkv_w = l.rest == "self_attention.linear_qkv.weight", qkv_b = l.rest == "self_attention.linear_qkv.bias";
    if (qkv_w || qkv_b) {
        const int64_t cols = qkv_w ? H : 1;
        const auto want = [&](int64_t rows) {
            return qkv_w ? std::vector<int64_t>{rows, H} : std::vector<int64_t>{rows};
        };
        const std::string suffix = qkv_w ? "weight" : "bias";
        const auto q = hf_values(hf, hf_tensor(hf, p + "self_attn.q_proj." + suffix, want(A * D), arch));
        const auto k = hf_values(hf, hf_tensor(hf, p + "self_attn.k_proj." + suffix, want(G * D), arch));
        const auto v = hf_values(hf, hf_tensor(hf, p + "self_attn.v_proj." + suffix, want(G * D), arch));
        out.values.assign(static_cast<std::size_t>((A + 2 * G) * D * cols), 0.0f);
        const QkvRows rows{A / G, D};
        const auto put = [&](int64_t to, const std::vector<float>& from, int64_t row) {
            std::copy_n(from.begin() + row * cols, cols, out.values.begin() + to * cols);
        };
        for (int64_t h = 0; h < A; ++h)
            for (int64_t d = 0; d < D; ++d) put(rows.q(h, d), q, h * D + d);
        for (int64_t g = 0; g < G; ++g)
            for (int64_t d = 0; d < D; ++d) {
                put(rows.k(g, d), k, g * D + d);
                put(rows.v(g, d), v, g * D + d);
            }
        return out;
    }
    const bool fc1_w = l.rest == "mlp.linear_fc1.weight", fc1_b = l.rest == "mlp.linear_fc1.bias";
    if (fc1_w || fc1_b) {
        const std::string suffix = fc1_w ? "weight" : "bias";
        const std::vector<int64_t> half = fc1_w ? std::vector<int64_t>{F, H} : std::vector<int64_t>{F};
        out.values = hf_values(hf, hf_tensor(hf, p + "mlp.gate_proj." + suffix, half, arch));
        const auto up = hf_values(hf, hf_tensor(hf, p + "mlp.up_proj." + suffix, half, arch));
        out.values.insert(out.values.end(), up.begin(), up.end());  // [gate | up]
        return out;
    }
    MWB_FAIL("{} has no counterpart of parameter {}", arch, name);
}

std::vector<NamedTensor> llama_to_hf(const std::vector<NamedTensor>& params, const HfLlamaConfig& c) {
    const int64_t H = c.hidden, F = c.ffn, D = c.head_dim, A = c.heads, G = c.kv_heads;
    // Sort key: Hugging Face's order (embedding, layers in order, final norm, head).
    std::vector<std::pair<std::pair<int64_t, int>, NamedTensor>> out;
    const auto put = [&](int64_t layer, int slot, std::string name, std::vector<int64_t> shape, std::vector<float> v) {
        out.push_back({{layer, slot}, {std::move(name), std::move(shape), std::move(v)}});
    };
    for (const NamedTensor& t : params) {
        const auto vocabulary = [&](const char* hf_name, int64_t layer) {
            MWB_CHECK(t.shape.size() == 2 && t.shape[0] >= c.vocab, "{} [{}] has fewer than {} rows", t.name,
                      fmt::join(t.shape, ", "), c.vocab);
            put(layer, 0, hf_name, {c.vocab, H}, {t.values.begin(), t.values.begin() + c.vocab * H});
        };
        if (t.name == "embedding.word_embeddings.weight") {
            vocabulary("model.embed_tokens.weight", -1);
            continue;
        }
        if (t.name == "output_layer.weight") {
            vocabulary("lm_head.weight", c.layers + 1);
            continue;
        }
        if (t.name == "decoder.final_layernorm.weight") {
            put(c.layers, 0, "model.norm.weight", t.shape, t.values);
            continue;
        }
        const LayerName l = split_layer(t.name);
        MWB_CHECK(l.layer >= 0 && l.layer < c.layers, "parameter {} has no {} counterpart", t.name, c.architecture);
        const std::string p = fmt::format("model.layers.{}.", l.layer);
        const bool qkv_w = l.rest == "self_attention.linear_qkv.weight",
                   qkv_b = l.rest == "self_attention.linear_qkv.bias";
        const bool fc1_w = l.rest == "mlp.linear_fc1.weight", fc1_b = l.rest == "mlp.linear_fc1.bias";
        if (l.rest == "input_layernorm.weight")
            put(l.layer, 0, p + "input_layernorm.weight", t.shape, t.values);
        else if (l.rest == "self_attention.linear_proj.weight")
            put(l.layer, 7, p + "self_attn.o_proj.weight", t.shape, t.values);
        else if (l.rest == "self_attention.linear_proj.bias")
            put(l.layer, 8, p + "self_attn.o_proj.bias", t.shape, t.values);
        else if (l.rest == "pre_mlp_layernorm.weight")
            put(l.layer, 9, p + "post_attention_layernorm.weight", t.shape, t.values);
        else if (l.rest == "mlp.linear_fc2.weight")
            put(l.layer, 14, p + "mlp.down_proj.weight", t.shape, t.values);
        else if (l.rest == "mlp.linear_fc2.bias")
            put(l.layer, 15, p + "mlp.down_proj.bias", t.shape, t.values);
        else if (qkv_w || qkv_b) {
            const int64_t cols = qkv_w ? H : 1;
            const std::string suffix = qkv_w ? "weight" : "bias";
            const auto shape = [&](int64_t rows) {
                return qkv_w ? std::vector<int64_t>{rows, H} : std::vector<int64_t>{rows};
            };
            MWB_CHECK(static_cast<int64_t>(t.values.size()) == (A + 2 * G) * D * cols, "{} holds {} values, not {}",
                      t.name, t.values.size(), (A + 2 * G) * D * cols);
            std::vector<float> q(static_cast<std::size_t>(A * D * cols)), k(static_cast<std::size_t>(G * D * cols)),
                v(k.size());
            const QkvRows rows{A / G, D};
            const auto take = [&](std::vector<float>& to, int64_t row, int64_t from) {
                std::copy_n(t.values.begin() + from * cols, cols, to.begin() + row * cols);
            };
            for (int64_t h = 0; h < A; ++h)
                for (int64_t d = 0; d < D; ++d) take(q, h * D + d, rows.q(h, d));
            for (int64_t g = 0; g < G; ++g)
                for (int64_t d = 0; d < D; ++d) {
                    take(k, g * D + d, rows.k(g, d));
                    take(v, g * D + d, rows.v(g, d));
                }
            const int slot = qkv_w ? 1 : 2;  // q/k/v weight then bias, as Hugging Face's modules list them
            put(l.layer, slot, p + "self_attn.q_proj." + suffix, shape(A * D), std::move(q));
            put(l.layer, slot + 2, p + "self_attn.k_proj." + suffix, shape(G * D), std::move(k));
            put(l.layer, slot + 4, p + "self_attn.v_proj." + suffix, shape(G * D), std::move(v));
        } else if (fc1_w || fc1_b) {
            const int64_t cols = fc1_w ? H : 1;
            MWB_CHECK(static_cast<int64_t>(t.values.size()) == 2 * F * cols, "{} holds {} values, not {}", t.name,
                      t.values.size(), 2 * F * cols);
            const std::string suffix = fc1_w ? "weight" : "bias";
            const std::vector<int64_t> half = fc1_w ? std::vector<int64_t>{F, H} : std::vector<int64_t>{F};
            const auto mid = t.values.begin() + F * cols;
            const int slot = fc1_w ? 10 : 11;
            put(l.layer, slot, p + "mlp.gate_proj." + suffix, half, {t.values.begin(), mid});
            put(l.layer, slot + 2, p + "mlp.up_proj." + suffix, half, {mid, t.values.end()});
        } else {
            MWB_FAIL("parameter {} has no {} counterpart", t.name, c.architecture);
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<NamedTensor> result;
    result.reserve(out.size());
    for (auto& [_, t] : out) result.push_back(std::move(t));
    return result;
}

}  // namespace mwb::interop
