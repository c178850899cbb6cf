#pragma once
// Configurations and figures of the two papers the planner is held against (docs/planner.md):
//  - Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
//    Megatron-LM" (SC21): Table 1, eq. 2 (parameters), eq. 3 (FLOPs), the 8TP/(nX) estimate;
//  - Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models":
//    Table 2 (activation bytes per layer), Table 3 (configurations), Table 5 (iteration times).
// Both use GPT models with sequence 2048 and vocabulary 51200, 16-bit training on DGX A100 nodes.
#include "backend/config/config.h"
#include "mwb/planner/cluster.h"

#include <array>
#include <cstdint>

namespace mwb::test {

struct NarayananRow {
    double billions;  ///< "Number of parameters (billion)"
    int heads, hidden, layers, tp, pp, gpus, batch;
    double tflops;  ///< "Achieved teraFLOP/s per GPU"
};

/// Table 1 of Narayanan et al. 2021 (weak scaling, full activation recomputation).
inline constexpr std::array<NarayananRow, 10> kNarayananTable1 = {{
    {1.7, 24, 2304, 24, 1, 1, 32, 512, 137},
    {3.6, 32, 3072, 30, 2, 1, 64, 512, 138},
    {7.5, 32, 4096, 36, 4, 1, 128, 512, 142},
    {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135},
    {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138},
    {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140},
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148},
    {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163},
    {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163},
}};

struct KorthikantiRow {
    const char* name;
    int heads, hidden, layers, tp, pp, gpus, batch, micro_batch;
    double full_recompute_s, present_s;  ///< Table 5: iteration time, full recompute vs selective + SP
    double mfu;                          ///< Table 5: model FLOPs utilisation of the present work
};

/// Tables 3 and 5 of Korthikanti et al. 2022.
inline constexpr std::array<KorthikantiRow, 4> kKorthikanti = {{
    {"22B", 64, 6144, 48, 8, 1, 8, 4, 4, 1.42, 1.10, 0.415},
    {"175B", 96, 12288, 96, 8, 8, 64, 64, 1, 18.13, 13.75, 0.514},
    {"530B", 128, 20480, 105, 8, 35, 280, 280, 1, 49.05, 37.83, 0.560},
    {"1T", 160, 25600, 128, 8, 64, 512, 512, 1, 94.42, 71.49, 0.563},
}};

/// A GPT of the papers: sequence 2048, vocabulary 51200 (NullTokenizer ids 0..51199, already a
/// multiple of 128 × 8), learned positions, tied embeddings, 16-bit (fp16 as in both papers).
inline Config paper_gpt(int layers, int hidden, int heads, int tp, int pp, int batch, int micro_batch) {
    Config c;
    c.model.num_layers = layers;
    c.model.hidden_size = hidden;
    c.model.num_attention_heads = heads;
    c.model.seq_length = 2048;
    c.model.vocab_size = 51200;
    c.data.tokenizer_type = "NullTokenizer";
    c.data.mock_data = true;
    c.parallel.tensor_model_parallel_size = tp;
    c.parallel.pipeline_model_parallel_size = pp;
    c.training.global_batch_size = batch;
    c.training.micro_batch_size = micro_batch;
    c.training.fp16 = true;
    c.training.lr = 1e-4;
    c.training.train_iters = 1;
    c.telemetry.mfu_attention_flops = "full";  // the paper counts the whole s×s attention matrix
    return c;
}

inline void full_recompute(Config& c) {
    c.training.recompute_granularity = "full";
    c.training.recompute_method = "uniform";
    c.training.recompute_num_layers = 1;
}

inline void selective_sp(Config& c) {
    c.training.recompute_granularity = "selective";
    c.parallel.sequence_parallel = true;
}

/// A Llama-family model as its authors published it: the fields of the Hugging Face config.json of
/// the released checkpoint (layers, hidden_size, num_attention_heads, num_key_value_heads,
/// intermediate_size, vocab_size, tie_word_embeddings, rope_theta, rope_scaling.factor,
/// max_position_embeddings, rms_norm_eps, attention bias) and its parameter count as the Hub reports
/// it from the checkpoint's safetensors (docs/planner.md, Presets).
struct LlamaRow {
    const char* preset;
    int layers, hidden, heads, groups, ffn, vocab;
    bool tied;
    double rope_theta, rope_scaling;  ///< rope_scaling 0: none
    int context;                      ///< max_position_embeddings
    double eps;
    bool qkv_bias;
    int64_t parameters;  ///< published count
    int nodes;           ///< DGX H100 nodes the preset's layout is planned for (mwb-plan search's choice)
};

inline constexpr std::array<LlamaRow, 9> kLlamaFamily = {{
    {"llama-3.2-1b", 16, 2048, 32, 8, 8192, 128256, true, 500000, 32, 131072, 1e-5, false, 1'235'814'400, 1},
    {"llama-3.2-3b", 28, 3072, 24, 8, 8192, 128256, true, 500000, 32, 131072, 1e-5, false, 3'212'749'824, 1},
    {"llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, false, 500000, 8, 131072, 1e-5, false, 8'030'261'248, 1},
    {"llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, false, 500000, 8, 131072, 1e-5, false, 70'553'706'496, 8},
    {"llama-3.1-405b", 126, 16384, 128, 8, 53248, 128256, false, 500000, 8, 131072, 1e-5, false, 405'853'388'800, 112},
    {"llama-2-7b", 32, 4096, 32, 32, 11008, 32000, false, 10000, 0, 4096, 1e-5, false, 6'738'415'616, 1},
    {"mistral-7b-v0.1", 32, 4096, 32, 8, 14336, 32000, false, 10000, 0, 32768, 1e-5, false, 7'241'732'096, 1},
    {"qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, false, 1000000, 0, 131072, 1e-6, true, 7'615'616'512, 1},
    {"tinyllama-1.1b", 22, 2048, 32, 4, 5632, 32000, false, 10000, 0, 2048, 1e-5, false, 1'100'048'384, 1},
}};

/// The small model of the hand-computed multi-rank values: L = 4, h = 32, a = 4, f = 128, s = 16,
/// micro-batch 2, global batch 8, vocabulary 128 ids (padded to 128 × TP), tied embeddings,
/// LayerNorm, bf16.
inline Config small_gpt(int tp, int pp) {
    Config c;
    c.model.num_layers = 4;
    c.model.hidden_size = 32;
    c.model.num_attention_heads = 4;
    c.model.seq_length = 16;
    c.model.vocab_size = 128;
    c.data.tokenizer_type = "NullTokenizer";
    c.data.mock_data = true;
    c.parallel.tensor_model_parallel_size = tp;
    c.parallel.pipeline_model_parallel_size = pp;
    c.training.micro_batch_size = 2;
    c.training.global_batch_size = 8;
    c.training.bf16 = true;
    c.training.lr = 1e-3;
    c.training.train_iters = 1;
    return c;
}

/// DGX A100 (80 GB) nodes holding `gpus` devices.
inline planner::Cluster dgx_a100(int gpus) {
    const auto& d = planner::find_device(planner::device_catalogue(), "A100-80GB");
    return planner::make_cluster(d, 8, (gpus + 7) / 8);
}

}  // namespace mwb::test
