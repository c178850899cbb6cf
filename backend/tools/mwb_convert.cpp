// mwb-convert: Hugging Face model directories <-> mwb checkpoints (GPT2LMHeadModel for now).
//   mwb-convert import-hf DIR --save CKPT [--tensor-model-parallel-size T --pipeline-model-parallel-size P]
//       config.json + model.safetensors (or its shards) -> CKPT/iter_0000000: the weights as
//       "param/...", zero Adam moments, iteration 0 (mwb-train --load CKPT then starts from them
//       with a fresh optimizer, as Megatron-LM's --finetune), and the model's configuration. The
//       tensors are stored whole, so the checkpoint loads into any TP/PP layout (the loader
//       reshards); T and P are written into the configuration as the layout to train with.
//   mwb-convert export-hf CKPT --output DIR [--dtype F32|BF16|F16]
//       any mwb checkpoint of a GPT-2-shaped model (any layout) -> config.json,
//       generation_config.json, model.safetensors with GPT2LMHeadModel's names, and the tokenizer
//       files of the run when it used a HuggingFaceTokenizer directory.
#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "config/config_io.h"
#include "config/validate.h"
#include "interop/hf_gpt2.h"
#include "model/gpt_model.h"
#include "optim/loss_scaler.h"
#include "parallel/parallel_context.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>

namespace {

using namespace mwb;
using namespace mwb::interop;

// The model's parameters plus two arenas for the Adam moments, as the trainer's checkpoints name them.
struct ModelState {
    OpContext ctx;
    Allocator alloc;
    std::unique_ptr<GptModel> model;
    std::vector<float> exp_avg, exp_avg_sq;

    explicit ModelState(const GptDims& d) {
        model = std::make_unique<GptModel>(d, RecomputePolicy{}, DType::F32, ctx, alloc);
        exp_avg.assign(static_cast<std::size_t>(model->params().numel()), 0.0f);
        exp_avg_sq = exp_avg;
    }
    std::vector<CheckpointTensor> tensors() {
        const ParamLayout& layout = model->layout();
        float* bases[3] = {model->params().f32(), exp_avg.data(), exp_avg_sq.data()};
        const char* prefixes[3] = {"param/", "exp_avg/", "exp_avg_sq/"};
        std::vector<CheckpointTensor> out;
        for (int k = 0; k < 3; ++k)
            for (const ParamInfo& p : layout) {
                CheckpointTensor c;
                c.name = prefixes[k] + p.name;
                c.global_shape = p.global_shape;
                c.shape = p.shape;
                c.data = c.dest = bases[k] + p.offset;
                c.padded_rows = p.name == "embedding.word_embeddings.weight" || p.name == "output_layer.weight";
                out.push_back(std::move(c));
            }
        return out;
    }
};

GptDims dims_for_conversion(const Config& cfg) {
    GptDims d = GptDims::from_config(cfg);
    d.micro_batch = 1;  // no forward pass runs here
    return d;
}

int import_hf(World& world, const fs::path& dir, const fs::path& save, int tp, int pp) {
    const fs::path config_file = dir / "config.json";
    const HfGpt2Config c = HfGpt2Config::from_json(nlohmann::json::parse(read_file(config_file)), config_file.string());
    const SafetensorsModel hf(dir);
    Config cfg;
    cfg.model.num_layers = static_cast<int>(c.layers);
    cfg.model.hidden_size = static_cast<int>(c.hidden);
    cfg.model.num_attention_heads = static_cast<int>(c.heads);
    cfg.model.ffn_hidden_size = static_cast<int>(c.ffn);
    cfg.model.seq_length = static_cast<int>(c.positions);
    cfg.model.max_position_embeddings = static_cast<int>(c.positions);
    cfg.model.vocab_size = static_cast<int>(c.vocab);
    cfg.model.layernorm_epsilon = c.norm_eps;
    cfg.parallel.tensor_model_parallel_size = tp;
    cfg.parallel.pipeline_model_parallel_size = pp;
    std::error_code ec;
    if (fs::is_regular_file(dir / "tokenizer.json", ec)) {
        cfg.data.tokenizer_type = "HuggingFaceTokenizer";
        cfg.data.tokenizer_model = fs::absolute(dir).string();
    }
    resolve(cfg, tp * pp, c.vocab);
    ModelState st(dims_for_conversion(cfg));
    const ParamLayout& layout = st.model->layout();
    for (std::size_t i = 0; i < layout.size(); ++i) {
        const NamedTensor t = gpt2_from_hf(hf, c, layout[i].name, layout[i].global_shape);
        std::copy(t.values.begin(), t.values.end(), layout.view(st.model->params(), i).f32());
    }
    CheckpointState s;
    s.config = to_json(cfg);
    s.loss_scaler = LossScaler(cfg.training).state();
    ParallelConfig one;  // this process writes every tensor whole
    ParallelContext par(world, one);
    const fs::path where = save_checkpoint(save, s, st.tensors(), par, true);
    fmt::print("{}\n", where.string());
    return 0;
}

int export_hf(const fs::path& ckpt, const fs::path& out, const std::string& dtype_name_arg) {
    const fs::path dir = resolve_checkpoint_dir(ckpt);
    const auto meta = nlohmann::json::parse(read_file(dir / "metadata.json", std::size_t{256} << 20));
    Config cfg;
    apply_json(cfg, meta.value("config", nlohmann::json::object()), (dir / "metadata.json").string());
    MWB_CHECK(cfg.model.normalization == "LayerNorm" && !cfg.model.untie_embeddings_and_output_weights,
              "{}: export-hf writes GPT2LMHeadModel, which needs LayerNorm and tied embeddings", dir.string());
    const StDtype dtype = dtype_name_arg == "BF16"  ? StDtype::BF16
                          : dtype_name_arg == "F16" ? StDtype::F16
                                                    : StDtype::F32;
    ModelState st(dims_for_conversion(cfg));
    load_checkpoint(dir, st.tensors());
    HfGpt2Config c;
    c.layers = cfg.model.num_layers;
    c.hidden = cfg.model.hidden_size;
    c.heads = cfg.model.num_attention_heads;
    c.ffn = cfg.model.ffn_hidden_size;
    c.vocab = cfg.model.vocab_size;
    c.positions = cfg.model.max_position_embeddings;
    c.norm_eps = cfg.model.layernorm_epsilon;
    MWB_CHECK(c.vocab > 0, "{}: the saved configuration has no vocab_size", dir.string());
    std::vector<NamedTensor> params;
    const ParamLayout& layout = st.model->layout();
    for (std::size_t i = 0; i < layout.size(); ++i) {
        const TensorView v = layout.view(st.model->params(), i);
        params.push_back({layout[i].name, layout[i].global_shape, std::vector<float>(v.f32(), v.f32() + v.numel())});
    }
    const std::vector<NamedTensor> hf = gpt2_to_hf(params, c);
    std::vector<std::vector<unsigned char>> bytes(hf.size());
    std::vector<StWriteTensor> tensors;
    for (std::size_t i = 0; i < hf.size(); ++i) {
        encode_f32(hf[i].values, dtype, bytes[i]);
        tensors.push_back({hf[i].name, dtype, hf[i].shape, bytes[i]});
    }
    fs::create_directories(out);
    write_safetensors(out / "model.safetensors", tensors, {{"format", "pt"}});
    nlohmann::json config = {{"architectures", {"GPT2LMHeadModel"}},
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
                             {"initializer_range", cfg.model.init_method_std},
                             {"torch_dtype", dtype == StDtype::BF16 ? "bfloat16" : dtype == StDtype::F16 ? "float16" : "float32"}};
    nlohmann::json generation = {{"_from_model_config", true}};
    // The run's tokenizer files travel with the model when it used a tokenizer.json directory.
    if (cfg.data.tokenizer_type == "HuggingFaceTokenizer" && !cfg.data.tokenizer_model.empty()) {
        std::error_code ec;
        const fs::path src = fs::is_directory(cfg.data.tokenizer_model, ec) ? fs::path(cfg.data.tokenizer_model)
                                                                           : fs::path(cfg.data.tokenizer_model).parent_path();
        for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"})
            if (fs::is_regular_file(src / f, ec)) write_file_atomic(out / f, read_file(src / f));
    }
    write_file_atomic(out / "config.json", config.dump(2) + "\n");
    write_file_atomic(out / "generation_config.json", generation.dump(2) + "\n");
    fmt::print("{}\n", out.string());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    mwb::World world(&argc, &argv);
    CLI::App app{"mwb-convert: Hugging Face model directories <-> mwb checkpoints (GPT2LMHeadModel)", "mwb-convert"};
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
    std::string ckpt, out, dtype = "F32";
    exp->add_option("ckpt", ckpt, "Checkpoint directory or one iter_NNNNNNN folder")->required();
    exp->add_option("--output", out, "Directory to write")->required();
    exp->add_option("--dtype", dtype, "Tensor dtype")->check(CLI::IsMember({"F32", "BF16", "F16"}))->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        if (imp->parsed()) return import_hf(world, hf_dir, save, tp, pp);
        return export_hf(ckpt, out, dtype);
    } catch (const std::exception& e) {
        std::cerr << "mwb-convert: error: " << e.what() << "\n";
        return 1;
    }
}
