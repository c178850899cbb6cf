// mwb-convert: Hugging Face model directories <-> mwb checkpoints (GPT2LMHeadModel, and the Llama family:
// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM without sliding windows).
//   mwb-convert import-hf DIR --save CKPT [--tensor-model-parallel-size T --pipeline-model-parallel-size P]
//       config.json + model.safetensors (or its shards) -> CKPT/iter_0000000: the weights as "param/..."
//       (no optimizer state: mwb-train --load CKPT starts from them with a fresh optimizer, and
//       --finetune also at iteration 0, as Megatron-LM's), the model's configuration in the metadata and
//       as CKPT/model_config.json (for mwb-train --config). The tensors are stored whole, so the
//       checkpoint loads into any TP/PP layout (the loader reshards); T and P are recorded as the layout.
//   mwb-convert export-hf CKPT --output DIR [--dtype F32|BF16|F16] [--max-shard-size 5GB]
//       any mwb checkpoint of a GPT-2- or Llama-shaped model (any layout) -> config.json,
//       generation_config.json, model.safetensors (or shards with an index) with Hugging Face's names,
//       and the run's tokenizer files.
#include "backend/checkpoint/checkpoint.h"
#include "backend/config/config.h"
#include "backend/config/config_io.h"
#include "backend/config/fields.h"
#include "backend/config/null_vocabulary.h"
#include "backend/config/validate.h"
#include "backend/data/tokenizer.h"
#include "backend/interop/hf_gpt2.h"
#include "backend/interop/hf_llama.h"
#include "backend/model/gpt_model.h"
#include "backend/optim/loss_scaler.h"
#include "backend/parallel/parallel_context.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <stdexcept>

namespace {

using namespace mwb;
using namespace mwb::interop;

// The model's parameters (and, for a trained checkpoint that holds them, two arenas for the Adam
// moments), as the trainer's checkpoints name them.
struct ModelState {
    OpContext ctx;
    Allocator alloc;
    std::unique_ptr<GptModel> model;
    std::vector<float> exp_avg, exp_avg_sq;

    explicit ModelState(const Config& cfg) {
        GptDims d = GptDims::from_config(cfg);
        d.micro_batch = 1;  // no forward pass runs here: the smallest activations
        d.seq = 1;
        model = std::make_unique<GptModel>(d, RecomputePolicy{}, DType::F32, ctx, alloc);
    }
    std::vector<CheckpointTensor> tensors(bool with_moments) {
        if (with_moments) {
            exp_avg.assign(static_cast<std::size_t>(model->params().numel()), 0.0f);
            exp_avg_sq = exp_avg;
        }
        const ParamLayout& layout = model->layout();
        float* bases[3] = {model->params().f32(), exp_avg.data(), exp_avg_sq.data()};
        const char* prefixes[3] = {"param/", "exp_avg/", "exp_avg_sq/"};
        std::vector<CheckpointTensor> out;
        for (int k = 0; k < (with_moments ? 3 : 1); ++k)
            for (std::size_t i = 0; i < layout.size(); ++i)
                for (CheckpointTensor& c : parameter_slices(layout, i, prefixes[k], bases[k] + layout[i].offset))
                    out.push_back(std::move(c));
        return out;
    }
};

// Input that cannot be converted (config.json, the layout, a model Hugging Face has no class for): exit
// status 2, as mwb-train's invalid configuration.
struct InvalidInput : std::runtime_error {
    using std::runtime_error::runtime_error;
};
template <typename F>
auto as_invalid_input(F&& f) {
    try {
        return f();
    } catch (const Error& e) {
        throw InvalidInput(e.what());
    }
}

// The model and layout fields of a resolved configuration must validate (training fields are the run's).
void check_model_and_layout(const Config& cfg, int world_size) {
    std::vector<std::string> problems;
    for (const ConfigIssue& issue : validate(cfg, world_size)) {
        const Field* f = find_config_field(issue.field);
        if (f && (f->group == "model" || f->group == "parallel")) problems.push_back(issue.message);
    }
    if (!problems.empty()) throw InvalidInput(fmt::format("{}", fmt::join(problems, "; ")));
}

nlohmann::json parse_json_file(const fs::path& path) {
    try {
        return nlohmann::json::parse(read_file(path, std::size_t{64} << 20));
    } catch (const nlohmann::json::exception& e) {
        MWB_FAIL("{}: not valid JSON ({})", path.string(), e.what());
    }
}

void gpt2_model_config(const HfGpt2Config& c, ModelConfig& m) {
    m.num_layers = static_cast<int>(c.layers);
    m.hidden_size = static_cast<int>(c.hidden);
    m.num_attention_heads = static_cast<int>(c.heads);
    m.ffn_hidden_size = static_cast<int>(c.ffn);
    m.seq_length = static_cast<int>(c.positions);
    m.max_position_embeddings = static_cast<int>(c.positions);
    m.vocab_size = static_cast<int>(c.vocab);
    m.layernorm_epsilon = c.norm_eps;
}

// The model and tokenizer fields of `cfg`: a --config file for mwb-train (training flags stay the user's).
nlohmann::json model_config_json(const Config& cfg) {
    const nlohmann::json all = to_json(cfg);
    nlohmann::json out = nlohmann::json::object();
    for (const Field& f : config_fields()) {
        const std::string name(f.name);
        if (f.group == "model" || f.name.starts_with("tokenizer_") || f.name.starts_with("tiktoken_") ||
            f.name == "vocab_file" || f.name == "merge_file")
            out[name] = all[name];
    }
    return out;
}

int import_hf(World& world, const fs::path& dir, const fs::path& save, int tp, int pp) {
    const fs::path config_file = dir / "config.json";
    const nlohmann::json hf_config = as_invalid_input([&] { return parse_json_file(config_file); });
    const bool llama = is_llama_family(hf_config);
    HfGpt2Config gpt2;
    HfLlamaConfig family;
    Config cfg;
    if (llama) {
        family = as_invalid_input([&] { return HfLlamaConfig::from_json(hf_config, config_file.string()); });
        family.apply_to(cfg.model);
    } else {
        gpt2 = as_invalid_input([&] { return HfGpt2Config::from_json(hf_config, config_file.string()); });
        gpt2_model_config(gpt2, cfg.model);
    }
    const SafetensorsModel hf(dir);
    cfg.parallel.tensor_model_parallel_size = tp;
    cfg.parallel.pipeline_model_parallel_size = pp;
    std::error_code ec;
    if (fs::is_regular_file(dir / "tokenizer.json", ec)) {
        cfg.data.tokenizer_type = "HuggingFaceTokenizer";
        cfg.data.tokenizer_model = fs::absolute(dir).string();
    } else if (fs::is_regular_file(dir / "tokenizer.model", ec)) {
        cfg.data.tokenizer_type = "SentencePieceTokenizer";
        cfg.data.tokenizer_model = fs::absolute(dir / "tokenizer.model").string();
    } else {
        // No tokenizer files: ids only, as current Megatron-LM's NullTokenizer (vocab_size ids, the last EOD).
        cfg.data.tokenizer_type = "NullTokenizer";
    }
    // The weights' precision becomes the checkpoint's (export-hf writes it back by default).
    const std::string embedding =
        llama ? "model.embed_tokens.weight"
              : (hf.contains("transformer.wte.weight") ? "transformer.wte.weight" : "wte.weight");
    if (hf.contains(embedding)) {
        cfg.training.bf16 = hf.get(embedding).dtype == StDtype::BF16;
        cfg.training.fp16 = hf.get(embedding).dtype == StDtype::F16;
    }
    resolve(cfg, tp * pp, llama ? family.vocab : gpt2.vocab);  // the tokenizer's vocabulary is config.json's
    check_model_and_layout(cfg, tp * pp);
    ModelState st(cfg);
    const ParamLayout& layout = st.model->layout();
    for (std::size_t i = 0; i < layout.size(); ++i) {
        const NamedTensor t = llama ? llama_from_hf(hf, family, layout[i].name, layout[i].global_shape)
                                    : gpt2_from_hf(hf, gpt2, layout[i].name, layout[i].global_shape);
        std::copy(t.values.begin(), t.values.end(), layout.view(st.model->params(), i).f32());
    }
    CheckpointState s;
    s.config = to_json(cfg);
    s.loss_scaler = LossScaler(cfg.training).state();
    ParallelConfig one;  // this process writes every tensor whole
    ParallelContext par(world, one);
    const fs::path where = save_checkpoint(save, s, st.tensors(false), par, true);
    write_file_atomic(save / "model_config.json", model_config_json(cfg).dump(2) + "\n");
    fmt::print("{}\n", where.string());
    return 0;
}

// The tokenizer files of the run, by the names Hugging Face's loaders look for.
void copy_tokenizer_files(const Config& cfg, const fs::path& out) {
    const DataConfig& d = cfg.data;
    std::error_code ec;
    const auto copy = [&](const fs::path& from, const char* name) {
        if (fs::is_regular_file(from, ec)) write_file_atomic(out / name, read_file(from, std::size_t{1} << 30));
    };
    if (d.tokenizer_type == "HuggingFaceTokenizer" && !d.tokenizer_model.empty()) {
        const fs::path src = fs::is_directory(d.tokenizer_model, ec) ? fs::path(d.tokenizer_model)
                                                                     : fs::path(d.tokenizer_model).parent_path();
        for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                              "vocab.json", "merges.txt"})
            copy(src / f, f);
    } else if (d.tokenizer_type == "SentencePieceTokenizer" && !d.tokenizer_model.empty()) {
        const fs::path model(d.tokenizer_model);
        copy(model, "tokenizer.model");
        for (const char* f : {"tokenizer_config.json", "special_tokens_map.json"}) copy(model.parent_path() / f, f);
    } else if (d.tokenizer_type == "GPT2BPETokenizer") {
        copy(d.vocab_file, "vocab.json");
        copy(d.merge_file, "merges.txt");
    }
}

nlohmann::json gpt2_hf_config(const HfGpt2Config& c, const Config& cfg) {
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"n_layer", c.layers},
            {"n_embd", c.hidden},
            {"n_head", c.heads},
            {"n_inner", c.ffn},
            {"vocab_size", c.vocab},
            {"n_positions", c.positions},
            {"n_ctx", c.positions},
            {"activation_function", "gelu_new"},
            {"layer_norm_epsilon", c.norm_eps},
            {"tie_word_embeddings", true},
            {"resid_pdrop", cfg.model.hidden_dropout},
            {"embd_pdrop", cfg.model.hidden_dropout},
            {"attn_pdrop", cfg.model.attention_dropout},
            {"initializer_range", cfg.model.init_method_std}};
}

int export_hf(const fs::path& ckpt, const fs::path& out, const std::string& dtype_arg, const std::string& shard_arg) {
    const uint64_t max_shard = parse_byte_size(shard_arg);
    const fs::path dir = resolve_checkpoint_dir(ckpt);
    const fs::path meta_file = dir / "metadata.json";
    const auto meta = nlohmann::json::parse(read_file(meta_file, std::size_t{256} << 20));
    Config cfg;
    apply_json(cfg, meta.value("config", nlohmann::json::object()), meta_file.string());
    cfg.data.null_tokenizer_legacy_eod = saved_legacy_null_vocabulary(meta.value("config", nlohmann::json::object()));
    const int64_t vocab = model_vocab_size(cfg);
    MWB_CHECK(vocab >= 2, "{}: the saved configuration has no vocab_size", dir.string());
    // Llama-shaped (RMSNorm, SwiGLU or RoPE) or GPT-2-shaped; each side names what does not fit.
    const bool llama =
        cfg.model.normalization == "RMSNorm" || cfg.model.swiglu || cfg.model.position_embedding_type == "rope";
    HfLlamaConfig family;
    HfGpt2Config gpt2;
    if (llama) {
        family = as_invalid_input([&] { return HfLlamaConfig::from_model(cfg.model, dir.string()); });
        family.vocab = vocab;
    } else {
        if (cfg.model.normalization != "LayerNorm" || cfg.model.untie_embeddings_and_output_weights ||
            cfg.model.position_embedding_type != "learned_absolute")
            throw InvalidInput(
                fmt::format("{}: export-hf writes GPT2LMHeadModel for this model, which needs "
                            "LayerNorm, learned positions and tied embeddings",
                            dir.string()));
        gpt2.layers = cfg.model.num_layers;
        gpt2.hidden = cfg.model.hidden_size;
        gpt2.heads = cfg.model.num_attention_heads;
        gpt2.ffn = cfg.model.ffn_hidden_size;
        gpt2.vocab = vocab;
        gpt2.positions = cfg.model.max_position_embeddings;
        gpt2.norm_eps = cfg.model.layernorm_epsilon;
    }
    // The default dtype is the checkpoint's: its run's precision (an import records the weights').
    const std::string dtype_name_used = !dtype_arg.empty()  ? dtype_arg
                                        : cfg.training.bf16 ? "BF16"
                                        : cfg.training.fp16 ? "F16"
                                                            : "F32";
    const StDtype dtype = dtype_name_used == "BF16"  ? StDtype::BF16
                          : dtype_name_used == "F16" ? StDtype::F16
                                                     : StDtype::F32;

    bool has_moments = false;  // a trained checkpoint: its moments are read (the loader wants every tensor placed)
    for (const auto& t : meta.value("tensors", nlohmann::json::array()))
        has_moments |= t.is_object() && t.value("name", "").starts_with("exp_avg/");
    ModelState st(cfg);
    load_checkpoint(dir, st.tensors(has_moments));
    std::vector<NamedTensor> params;
    const ParamLayout& layout = st.model->layout();
    for (std::size_t i = 0; i < layout.size(); ++i) {
        const TensorView v = layout.view(st.model->params(), i);
        params.push_back({layout[i].name, layout[i].global_shape, std::vector<float>(v.f32(), v.f32() + v.numel())});
    }
    st.model.reset();  // the HF tensors below are a second copy of the weights
    const std::vector<NamedTensor> hf = llama ? llama_to_hf(params, family) : gpt2_to_hf(params, gpt2);
    params.clear();
    std::vector<std::vector<unsigned char>> bytes(hf.size());
    std::vector<StWriteTensor> tensors;
    for (std::size_t i = 0; i < hf.size(); ++i) {
        encode_f32(hf[i].values, dtype, bytes[i]);
        tensors.push_back({hf[i].name, dtype, hf[i].shape, bytes[i]});
    }
    write_safetensors_model(out, tensors, max_shard, {{"format", "pt"}});

    nlohmann::json config = llama ? family.to_json() : gpt2_hf_config(gpt2, cfg);
    config["torch_dtype"] = dtype == StDtype::BF16 ? "bfloat16" : dtype == StDtype::F16 ? "float16" : "float32";
    nlohmann::json generation = {{"_from_model_config", true}};
    // Token ids from the run's tokenizer (when its files are still there).
    try {
        const auto tok = data::make_tokenizer(cfg.data, cfg.model);
        for (nlohmann::json* j : {&config, &generation}) {
            if (tok->bos() >= 0) (*j)["bos_token_id"] = tok->bos();
            (*j)["eos_token_id"] = tok->eod();
        }
    } catch (const std::exception& e) {
        std::cerr << "mwb-convert: note: no bos/eos token ids written (the run's tokenizer does not load: " << e.what()
                  << ")\n";
    }
    copy_tokenizer_files(cfg, out);
    write_file_atomic(out / "config.json", config.dump(2) + "\n");
    write_file_atomic(out / "generation_config.json", generation.dump(2) + "\n");
    fmt::print("{}\n", out.string());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    mwb::World world(&argc, &argv);
    CLI::App app{
        "mwb-convert: Hugging Face model directories <-> mwb checkpoints (GPT2LMHeadModel, LlamaForCausalLM, "
        "MistralForCausalLM, Qwen2ForCausalLM)",
        "mwb-convert"};
    app.require_subcommand(1);
    auto* imp = app.add_subcommand("import-hf", "A Hugging Face directory -> an mwb checkpoint");
    std::string hf_dir, save;
    int tp = 1, pp = 1;
    imp->add_option("dir", hf_dir, "Hugging Face model directory (config.json, model.safetensors or shards)")
        ->required()
        ->check(CLI::ExistingDirectory);
    imp->add_option("--save", save, "Checkpoint directory to write")->required();
    imp->add_option("--tensor-model-parallel-size", tp, "Layout recorded for training")->capture_default_str();
    imp->add_option("--pipeline-model-parallel-size", pp, "Layout recorded for training")->capture_default_str();
    auto* exp = app.add_subcommand("export-hf", "An mwb checkpoint -> a Hugging Face directory");
    std::string ckpt, out, dtype, shard = "5GB";
    exp->add_option("ckpt", ckpt, "Checkpoint directory or one iter_NNNNNNN folder")->required();
    exp->add_option("--output", out, "Directory to write")->required();
    exp->add_option("--dtype", dtype, "Tensor dtype (default: the checkpoint's precision)")
        ->check(CLI::IsMember({"F32", "BF16", "F16"}));
    exp->add_option("--max-shard-size", shard, "Largest weight file, as Hugging Face's (5GB, 500MB, 2GiB, bytes)")
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        if (imp->parsed()) return import_hf(world, hf_dir, save, tp, pp);
        return export_hf(ckpt, out, dtype, shard);
    } catch (const InvalidInput& e) {
        std::cerr << "mwb-convert: invalid input: " << e.what() << "\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "mwb-convert: error: " << e.what() << "\n";
        return 1;
    }
}
