#pragma once
// The one configuration of a run, as plain structs grouped by concern. Every field has the name of
// its Megatron-LM argument (snake_case in JSON, --kebab-case on the command line); the table in
// fields.cpp binds names to members, documents them, and drives JSON, flags and docs/config.md.
// Defaults are Megatron-LM's where it has one; what Megatron requires (sizes, train_iters) is 0 here, lr
// kLrNotGiven, and validation asks for it. The embedded demo is a preset (resources/presets/tiny-cpu-demo.json).
#include <cstdint>
#include <string>
#include <vector>

namespace mwb {

/// TrainingConfig::lr before --lr (Megatron-LM requires it): a rate is never negative, and 0 is a legal one.
inline constexpr double kLrNotGiven = -1;

struct ModelConfig {
    int num_layers = 0;                        ///< transformer layers
    int hidden_size = 0;                     ///< model width h
    int num_attention_heads = 0;               ///< heads a; hidden_size must divide by it (unless kv_channels)
    bool group_query_attention = false;        ///< key/value heads shared by groups of query heads
    int num_query_groups = 1;                  ///< G key/value heads with group_query_attention (1 = multi-query)
    int kv_channels = 0;                       ///< head dim d; 0 = hidden_size / num_attention_heads
    int ffn_hidden_size = 0;                   ///< MLP width (per branch with swiglu); 0 = Megatron's default
    bool swiglu = false;                       ///< gated MLP: fc1 gives [gate | up], silu(gate)·up goes to fc2
    bool add_bias_linear = true;               ///< biases in QKV, projection, fc1, fc2 (--disable-bias-linear: off)
    bool add_qkv_bias = false;                 ///< bias on QKV even without add_bias_linear (Qwen2)
    std::string position_embedding_type = "learned_absolute";  ///< learned_absolute | rope | none
    int64_t rotary_base = 10000;               ///< RoPE theta
    double rotary_percent = 1.0;               ///< fraction of each head's dims that RoPE rotates
    bool rotary_interleaved = false;           ///< GPT-J pairs (2i, 2i+1) instead of rotate-half (i, i+R/2)
    bool use_rope_scaling = false;             ///< Llama 3.1's frequency scaling of RoPE
    double rope_scaling_factor = 8.0;          ///< its factor (low/high frequency factors 1 and 4, context 8192)
    int seq_length = 0;                      ///< tokens per sample s
    int max_position_embeddings = 0;           ///< rows of the position table; 0 = seq_length
    int vocab_size = 0;                        ///< tokenizer vocabulary (NullTokenizer); 0 = from the tokenizer
    int make_vocab_size_divisible_by = 128;    ///< pad the vocabulary to a multiple of this × TP
    std::string normalization = "LayerNorm";   ///< LayerNorm | RMSNorm
    double layernorm_epsilon = 1e-5;           ///< epsilon of the norms
    bool untie_embeddings_and_output_weights = false;  ///< separate output layer instead of the embedding
    double hidden_dropout = 0.1;               ///< dropout on embeddings and residual branches
    double attention_dropout = 0.1;            ///< dropout on attention probabilities
    double init_method_std = 0.02;             ///< std of weight init (output layers: std/sqrt(2·layers))
};

struct ParallelConfig {
    int tensor_model_parallel_size = 1;        ///< splits each weight matrix across ranks
    int pipeline_model_parallel_size = 1;      ///< splits the layers into stages
    bool sequence_parallel = false;            ///< shards norm/dropout activations along s; needs TP > 1
    int num_layers_per_virtual_pipeline_stage = 0;  ///< interleaved schedule; 0 = plain 1F1B
    bool use_distributed_optimizer = false;    ///< shard optimizer state across data-parallel ranks
    int64_t ddp_bucket_size = 0;               ///< gradient all-reduce bucket (elements); 0 = automatic
    double distributed_timeout_minutes = 10;   ///< a collective or point-to-point wait this long ends the run
};

struct TrainingConfig {
    int micro_batch_size = 1;                  ///< samples per micro-batch per data-parallel rank
    int global_batch_size = 0;                 ///< samples per iteration; 0 = micro × data-parallel size
    int64_t train_iters = 0;                   ///< iterations to train (or train_samples)
    int64_t train_samples = 0;                 ///< samples to train instead of train_iters (sample-based schedule)
    std::vector<std::string> rampup_batch_size;  ///< [start, increment, ramp-up samples] of the global batch; empty = off
    std::string step_batch_size_schedule;      ///< "THRESHOLD:BATCH ..." (thresholds in tokens, K/M/B/T); "" = off
    int64_t seed = 1234;                       ///< seeds init, dropout, data order
    double lr = kLrNotGiven;                   ///< peak learning rate (0 is legal: Megatron-LM trains with it)
    double min_lr = 0;                      ///< floor of the decay
    int64_t lr_warmup_iters = 0;               ///< linear warm-up from lr_warmup_init
    int64_t lr_warmup_samples = 0;             ///< the same in samples (sample-based training)
    double lr_warmup_fraction = 0;             ///< warm-up as a fraction of the decay length; 0 = not used
    double lr_warmup_init = 0;                 ///< learning rate the warm-up starts from
    int64_t lr_decay_iters = 0;                ///< decay length; 0 = train_iters
    int64_t lr_decay_samples = 0;              ///< decay length in samples; 0 = train_samples
    std::string lr_decay_style = "linear";     ///< constant | linear | cosine | inverse-square-root | WSD
    std::string lr_wsd_decay_style = "exponential";  ///< WSD's annealing: exponential | linear | cosine | minus_sqrt
    int64_t lr_wsd_decay_iters = 0;            ///< WSD's annealing length
    int64_t lr_wsd_decay_samples = 0;          ///< the same in samples
    double weight_decay = 0.01;                ///< AdamW decay (never on biases and norms)
    std::string weight_decay_incr_style = "constant";  ///< constant | linear | cosine (start -> end over training)
    double start_weight_decay = 0;             ///< with linear/cosine increments
    double end_weight_decay = 0;               ///< with linear/cosine increments
    double adam_beta1 = 0.9;
    double adam_beta2 = 0.999;
    double adam_eps = 1e-8;
    double clip_grad = 1.0;                    ///< global gradient-norm clip; 0 = off
    std::string recompute_granularity;         ///< "" (none) | selective | full
    std::string recompute_method;              ///< uniform | block (with full)
    int recompute_num_layers = 0;              ///< layers per recomputed chunk (uniform) or recomputed layers (block)
    int64_t logits_chunk_bytes = int64_t{256} << 20;  ///< the head's logits held at once (rows chunked); 0 = all
    bool bf16 = false;                         ///< bf16 weights/activations, fp32 master weights
    bool fp16 = false;                         ///< fp16 with dynamic loss scaling
    double loss_scale = 0;                     ///< fp16 static loss scale; 0 = dynamic
    double initial_loss_scale = 4294967296.0;  ///< dynamic scaling start (2^32)
    double min_loss_scale = 1.0;
    int loss_scale_window = 1000;              ///< clean iterations before the scale doubles
    int hysteresis = 2;                        ///< overflows tolerated before the scale halves
    bool accumulate_allreduce_grads_in_fp32 = false;  ///< fp32 gradient buffers in 16-bit runs (bf16 forces it)
};

struct DataConfig {
    std::vector<std::string> data_path;        ///< [weight] prefix ... of .bin/.idx datasets; empty = bundled corpus
    std::string split = "969,30,1";            ///< train,valid,test proportions
    std::string tokenizer_type = "ByteTokenizer";  ///< ByteTokenizer | GPT2BPETokenizer | NullTokenizer | ...
    std::string vocab_file;                    ///< GPT-2 vocab.json
    std::string merge_file;                    ///< GPT-2 merges.txt
    std::string tokenizer_model;               ///< tokenizer.json / dir, tokenizer.model or tiktoken ranks
    std::string tiktoken_pattern = "v2";       ///< TikTokenizer: Megatron's v1 | v2
    int tiktoken_num_special_tokens = 1000;    ///< TikTokenizer: ids before the first rank
    int null_tokenizer_eod_id = -1;            ///< NullTokenizer's EOD; -1 = vocab_size - 1 (Megatron-LM's default)
    bool null_tokenizer_legacy_eod = false;    ///< Megatron-LM before core_v0.18: vocab_size + 1 ids, EOD = vocab_size
    bool mock_data = false;                    ///< random tokens from a seeded RNG (needs no files)
    std::string data_cache_path;               ///< where sample indices are cached; "" = next to the data
    int64_t eval_interval = 0;                 ///< evaluate every N iterations; 0 = only after training
    int64_t eval_iters = 100;                   ///< iterations (of global batches) per evaluation
};

/// Where and how the engine runs.
struct RuntimeConfig {
    std::string device = "auto";  ///< cpu | cuda | auto
    int threads = 0;              ///< CPU threads; 0 = all cores (or OMP_NUM_THREADS)
    bool deterministic = false;   ///< GPU: bit-identical run to run (no TF32, pinned cuBLAS reductions)
    std::string attention_backend = "auto";  ///< GPU attention kernels: auto | cudnn | own
    bool enable_cuda_graph = false;          ///< GPU: capture one training step in a CUDA graph, replay it
    int64_t cuda_graph_warmup_steps = 3;     ///< eager steps before the capture (Megatron-LM's default)
};

/// Checkpoints: where they go, what they hold, how a run resumes, and the exits that save one.
struct CheckpointConfig {
    std::string save;                   ///< checkpoint directory; "" = run_dir/checkpoints when saving
    int64_t save_interval = 0;          ///< checkpoint every N iterations; 0 = only at the end when save is set
    std::string load;                   ///< checkpoint directory (or iter_ folder) to resume from
    bool no_save_optim = false;         ///< checkpoints without the optimizer state
    bool no_load_optim = false;         ///< resume with a fresh optimizer (and schedule)
    bool no_load_rng = false;           ///< accepted: dropout's RNG is a function of seed and iteration
    bool finetune = false;              ///< load the weights only, start at iteration 0
    int64_t exit_interval = 0;          ///< stop (with a checkpoint) at an iteration divisible by this
    double exit_duration_in_mins = 0;   ///< stop (with a checkpoint) after this many minutes of training
};

/// The run directory's records, the progress line and TensorBoard.
struct LoggingConfig {
    int64_t log_interval = 100;               ///< iterations per metrics line
    std::string run_dir;                      ///< "" = a new folder under the user's data dir
    bool log_throughput = false;              ///< TFLOP/s per device in the progress line
    std::string tensorboard_dir;              ///< write TensorBoard event files here; "" = off
    int64_t tensorboard_log_interval = 1;     ///< iterations per TensorBoard scalar
    bool log_loss_scale_to_tensorboard = true;
    bool log_validation_ppl_to_tensorboard = false;
    bool log_timers_to_tensorboard = false;   ///< iteration-time and throughput scalars
    bool log_memory_to_tensorboard = false;
};

/// Telemetry and control over ZeroMQ (docs/protocol.md; rank 0 binds, loopback by default) and the
/// utilisation figure the records carry.
struct TelemetryConfig {
    double peak_tflops_per_device = 0;           ///< the device's peak for MFU; 0 = not reported
    std::string mfu_attention_flops = "causal";  ///< causal (Megatron-LM since core_v0.12) | full (older, papers)
    std::string telemetry_endpoint = "tcp://127.0.0.1:0";           ///< PUB socket; port 0 = ephemeral; "" = off
    std::string telemetry_snapshot_endpoint = "tcp://127.0.0.1:0";  ///< "everything since seq N" requests
    std::string control_endpoint = "tcp://127.0.0.1:0";             ///< pause/resume/checkpoint/stop/status; "" = off
    std::string curve_secret_key_file;  ///< this run's CURVE key pair (NAME.key_secret); required off loopback
    std::string curve_client_keys;      ///< client public keys admitted: NAME.key, a directory of them, or a list
};

/// Text samples during training (docs/generation.md): rank 0 generates from its current weights.
struct SamplingConfig {
    int64_t sample_interval = 0;    ///< generate every N iterations (and at the end); 0 = off
    std::string sample_prompts;     ///< prompts file: one per line, at most 64, 4096 bytes each
    int64_t sample_max_new_tokens = 32;
    double sample_temperature = 0;  ///< 0 = greedy
    int64_t sample_top_k = 0;       ///< 0 = off
    double sample_top_p = 1.0;      ///< 1 = off
    int64_t sample_seed = 1234;
};

struct Config {
    ModelConfig model;
    ParallelConfig parallel;
    TrainingConfig training;
    DataConfig data;
    RuntimeConfig runtime;
    CheckpointConfig checkpoint;
    LoggingConfig logging;
    TelemetryConfig telemetry;
    SamplingConfig sampling;
};

}  // namespace mwb
