#include "backend/config/fields.h"

#include <algorithm>
#include <array>

namespace mwb {

namespace {

// One row: group, member, help, choices. The JSON key is the member's name.
#define MWB_FIELD(GROUP, NAME, HELP, CHOICES) \
    Field { #NAME, #GROUP, HELP, CHOICES, [](Config& c) -> FieldRef { return &c.GROUP.NAME; } }

const auto kFields = std::to_array<Field>({
    // model
    MWB_FIELD(model, num_layers, "Number of transformer layers (required).", ""),
    MWB_FIELD(model, hidden_size, "Transformer hidden size h (required).", ""),
    MWB_FIELD(model, num_attention_heads, "Attention heads a; must divide hidden_size (required).", ""),
    MWB_FIELD(model, group_query_attention,
              "Grouped-query attention: num_query_groups key/value heads, each shared by num_attention_heads / "
              "num_query_groups query heads.",
              ""),
    MWB_FIELD(model, num_query_groups,
              "Key/value heads with group_query_attention (1 is multi-query attention); must divide "
              "num_attention_heads, and tensor_model_parallel_size must divide it.",
              ""),
    MWB_FIELD(model, kv_channels, "Head dimension; 0 means hidden_size / num_attention_heads.", ""),
    MWB_FIELD(model, ffn_hidden_size,
              "MLP hidden size (each of the gate and up branches with swiglu); 0 means 4 x hidden_size, or "
              "Megatron's int(8 x hidden_size / 3 / 64) x 64 with swiglu.",
              ""),
    MWB_FIELD(model, swiglu,
              "Gated MLP (SwiGLU): fc1 produces gate and up projections, fc2 takes silu(gate) x up.", ""),
    MWB_FIELD(model, add_bias_linear,
              "Biases in the QKV, projection, fc1 and fc2 linear layers (the flag --disable-bias-linear turns "
              "them off).",
              ""),
    MWB_FIELD(model, add_qkv_bias, "Bias on the QKV projection even when add_bias_linear is off (as Qwen2).", ""),
    MWB_FIELD(model, position_embedding_type,
              "Position embedding: a learned table, rotary (RoPE) on queries and keys, or none.",
              "learned_absolute|rope|none"),
    MWB_FIELD(model, rotary_base, "RoPE base theta: frequency i of rotary dims R is base^(-2i/R).", ""),
    MWB_FIELD(model, rotary_percent, "Fraction of each head's dims that RoPE rotates, in (0, 1].", ""),
    MWB_FIELD(model, rotary_interleaved,
              "RoPE pairs dims (2i, 2i+1) as GPT-J instead of rotate-half pairs (i, i + R/2).", ""),
    MWB_FIELD(model, use_rope_scaling,
              "Llama 3.1's RoPE frequency scaling (low/high frequency factors 1 and 4, original context 8192; "
              "docs/architecture.md states the formula).",
              ""),
    MWB_FIELD(model, rope_scaling_factor, "The factor of use_rope_scaling.", ""),
    MWB_FIELD(model, seq_length, "Tokens per training sample s (required).", ""),
    MWB_FIELD(model, max_position_embeddings,
              "Rows of the learned position table (learned_absolute), or the longest position RoPE tables cover; "
              "0 means seq_length.",
              ""),
    MWB_FIELD(model, vocab_size,
              "Vocabulary of the NullTokenizer: ids 0..vocab_size-1, EOD among them (null_tokenizer_eod_id; with "
              "null_tokenizer_legacy_eod ids 0..vocab_size, EOD = vocab_size).",
              ""),
    MWB_FIELD(model, make_vocab_size_divisible_by,
              "Pad the vocabulary to a multiple of this times tensor_model_parallel_size.", ""),
    MWB_FIELD(model, normalization, "Normalisation layer.", "LayerNorm|RMSNorm"),
    MWB_FIELD(model, layernorm_epsilon, "Epsilon of LayerNorm/RMSNorm.", ""),
    MWB_FIELD(model, untie_embeddings_and_output_weights,
              "Give the output layer its own weights instead of sharing the word embedding.", ""),
    MWB_FIELD(model, hidden_dropout, "Dropout on the embeddings and on both residual branches.", ""),
    MWB_FIELD(model, attention_dropout, "Dropout on the attention probabilities.", ""),
    MWB_FIELD(model, init_method_std,
              "Std of the normal weight init; the two output projections per layer use std/sqrt(2 x num_layers).",
              ""),
    // parallel
    MWB_FIELD(parallel, tensor_model_parallel_size, "Tensor-parallel size: splits each layer's weights.", ""),
    MWB_FIELD(parallel, pipeline_model_parallel_size, "Pipeline-parallel size: splits the layers into stages.", ""),
    MWB_FIELD(parallel, sequence_parallel, "Shard norm/dropout activations along the sequence (needs TP > 1).", ""),
    MWB_FIELD(parallel, num_layers_per_virtual_pipeline_stage,
              "Layers per virtual stage for the interleaved schedule; 0 means the plain 1F1B schedule.", ""),
    MWB_FIELD(parallel, use_distributed_optimizer, "Shard optimizer state and master weights across data-parallel ranks.",
              ""),
    MWB_FIELD(parallel, ddp_bucket_size, "Gradient reduction bucket, in elements; 0 chooses automatically.", ""),
    MWB_FIELD(parallel, distributed_timeout_minutes,
              "A rank that waits this long in a collective or point-to-point exchange, or sends no heartbeat for "
              "this long, ends the run (every rank exits 124, naming the stalled rank).",
              ""),
    // training
    MWB_FIELD(training, micro_batch_size, "Samples per micro-batch on each data-parallel rank.", ""),
    MWB_FIELD(training, global_batch_size,
              "Samples per iteration; a multiple of micro_batch_size x data-parallel size (gradient accumulation). "
              "0 means micro_batch_size x data-parallel size.",
              ""),
    MWB_FIELD(training, train_iters, "Iterations to train (this or train_samples is required).", ""),
    MWB_FIELD(training, train_samples,
              "Samples to train instead of train_iters; the learning-rate schedule is then given in samples.", ""),
    MWB_FIELD(training, rampup_batch_size,
              "Ramp the global batch up: START INCREMENT SAMPLES, from START by INCREMENT to global_batch_size "
              "over SAMPLES samples (the number of micro-batches grows; older Megatron-LM releases' reading, "
              "current Megatron-LM ignores it with a deprecation warning).",
              ""),
    MWB_FIELD(training, step_batch_size_schedule,
              "Global batch size by consumed tokens: \"0:16 2.4B:320 ...\" (suffixes K, M, B, T); the last batch size "
              "is the global batch size, so global_batch_size must not be given too.",
              ""),
    MWB_FIELD(training, seed, "Seed of weight init, dropout and data order.", ""),
    MWB_FIELD(training, lr, "Peak learning rate (required; 0 is a legal rate, -1 means not given).", ""),
    MWB_FIELD(training, min_lr, "Learning rate at the end of the decay.", ""),
    MWB_FIELD(training, lr_warmup_iters, "Iterations of linear warm-up from lr_warmup_init to lr.", ""),
    MWB_FIELD(training, lr_warmup_samples, "Samples of linear warm-up (sample-based training).", ""),
    MWB_FIELD(training, lr_warmup_fraction,
              "Warm-up as a fraction of the decay length (instead of lr_warmup_iters/samples); 0 means not used.", ""),
    MWB_FIELD(training, lr_warmup_init, "Learning rate the warm-up starts from.", ""),
    MWB_FIELD(training, lr_decay_iters, "Iterations over which lr decays to min_lr; 0 means train_iters.", ""),
    MWB_FIELD(training, lr_decay_samples, "Samples over which lr decays (sample-based); 0 means train_samples.", ""),
    MWB_FIELD(training, lr_decay_style, "Shape of the decay after warm-up.",
              "constant|linear|cosine|inverse-square-root|WSD"),
    MWB_FIELD(training, lr_wsd_decay_style, "Annealing shape of the last phase of WSD.",
              "exponential|linear|cosine|minus_sqrt"),
    MWB_FIELD(training, lr_wsd_decay_iters, "Iterations of WSD's annealing phase (the end of the decay).", ""),
    MWB_FIELD(training, lr_wsd_decay_samples, "Samples of WSD's annealing phase (sample-based).", ""),
    MWB_FIELD(training, weight_decay, "AdamW weight decay (never applied to biases and norm weights).", ""),
    MWB_FIELD(training, weight_decay_incr_style,
              "Weight decay over training: constant (weight_decay), or linear/cosine from start_weight_decay to "
              "end_weight_decay.",
              "constant|linear|cosine"),
    MWB_FIELD(training, start_weight_decay, "Weight decay at the start (linear/cosine increments).", ""),
    MWB_FIELD(training, end_weight_decay, "Weight decay at the end of training (linear/cosine increments).", ""),
    MWB_FIELD(training, adam_beta1, "AdamW beta1.", ""),
    MWB_FIELD(training, adam_beta2, "AdamW beta2.", ""),
    MWB_FIELD(training, adam_eps, "AdamW epsilon.", ""),
    MWB_FIELD(training, clip_grad, "Clip the global gradient L2 norm to this; 0 disables clipping.", ""),
    MWB_FIELD(training, recompute_granularity,
              "Activation recomputation: selective recomputes the attention core, full recomputes whole layers; "
              "empty for none.",
              "|selective|full"),
    MWB_FIELD(training, recompute_method,
              "With full recompute: uniform recomputes chunks of recompute_num_layers layers, block recomputes "
              "the first recompute_num_layers layers of each stage.",
              "|uniform|block"),
    MWB_FIELD(training, recompute_num_layers, "Layers per chunk (uniform) or recomputed layers (block).", ""),
    MWB_FIELD(training, logits_chunk_bytes,
              "Bytes of logits the output layer holds at once: the classifier runs over chunks of rows (tokens) "
              "whose logits fit, each computing its loss and gradient before the next; 0 holds the whole "
              "micro-batch's logits.",
              ""),
    MWB_FIELD(training, bf16, "bf16 weights and activations with fp32 master weights and fp32 gradients.", ""),
    MWB_FIELD(training, fp16, "fp16 weights and activations with fp32 master weights and loss scaling.", ""),
    MWB_FIELD(training, loss_scale, "Static fp16 loss scale; 0 means dynamic loss scaling.", ""),
    MWB_FIELD(training, initial_loss_scale, "Initial dynamic loss scale.", ""),
    MWB_FIELD(training, min_loss_scale, "Lowest dynamic loss scale.", ""),
    MWB_FIELD(training, loss_scale_window, "Iterations without overflow before the loss scale doubles.", ""),
    MWB_FIELD(training, hysteresis, "Overflowing iterations tolerated before the loss scale halves.", ""),
    MWB_FIELD(training, accumulate_allreduce_grads_in_fp32,
              "Keep gradients in fp32 in 16-bit runs (always on with bf16); without it an fp16 run's gradient "
              "arena is fp16 (docs/numerics.md).",
              ""),
    // data
    MWB_FIELD(data, data_path,
              "Datasets as prefixes of .bin/.idx pairs, optionally weighted: [w1] p1 [w2] p2 ...; empty means the "
              "bundled corpus.",
              ""),
    MWB_FIELD(data, split, "Train,valid,test proportions of each dataset, e.g. 969,30,1.", ""),
    MWB_FIELD(data, tokenizer_type, "Tokenizer.",
              "ByteTokenizer|GPT2BPETokenizer|NullTokenizer|HuggingFaceTokenizer|SentencePieceTokenizer|TikTokenizer"),
    MWB_FIELD(data, vocab_file, "GPT-2 vocab.json (GPT2BPETokenizer).", ""),
    MWB_FIELD(data, merge_file, "GPT-2 merges.txt (GPT2BPETokenizer).", ""),
    MWB_FIELD(data, tokenizer_model,
              "Tokenizer file: tokenizer.json or its directory (HuggingFaceTokenizer), tokenizer.model "
              "(SentencePieceTokenizer), Megatron's tiktoken JSON ranks (TikTokenizer).",
              ""),
    MWB_FIELD(data, tiktoken_pattern, "TikTokenizer's split pattern (Megatron-LM's).", "v1|v2"),
    MWB_FIELD(data, tiktoken_num_special_tokens, "TikTokenizer: special token ids before the first rank.", ""),
    MWB_FIELD(data, null_tokenizer_eod_id,
              "NullTokenizer's end-of-document id, in [0, vocab_size); -1 means vocab_size - 1 (current Megatron-LM, "
              "core_v0.18.0 on).",
              ""),
    MWB_FIELD(data, null_tokenizer_legacy_eod,
              "NullTokenizer as Megatron-LM before core_v0.18.0: vocab_size counts the ids without EOD, the "
              "vocabulary is vocab_size + 1 ids and EOD is vocab_size (null_tokenizer_eod_id must then be -1).",
              ""),
    MWB_FIELD(data, mock_data, "Train on random tokens from a seeded RNG (no data files needed).", ""),
    MWB_FIELD(data, data_cache_path, "Where sample indices are cached; empty means next to the data.", ""),
    MWB_FIELD(data, eval_interval,
              "Evaluate on the validation split every N iterations; 0 only once after training (the test split, "
              "when not empty, is evaluated after training either way).",
              ""),
    MWB_FIELD(data, eval_iters, "Global batches per evaluation.", ""),
    // checkpoint
    MWB_FIELD(checkpoint, save, "Checkpoint directory; empty means <run_dir>/checkpoints when checkpoints are saved.", ""),
    MWB_FIELD(checkpoint, save_interval, "Save a checkpoint every N iterations (and at the end); 0 saves only at the "
              "end, and only when save is set.", ""),
    MWB_FIELD(checkpoint, load, "Checkpoint directory (or one iter_NNNNNNN folder) to resume from.", ""),
    MWB_FIELD(checkpoint, no_save_optim, "Save checkpoints without the optimizer state (Adam moments).", ""),
    MWB_FIELD(checkpoint, no_load_optim,
              "Resume with a fresh optimizer: Adam moments, step count and learning-rate schedule start over.", ""),
    MWB_FIELD(checkpoint, no_load_rng,
              "Accepted; no effect: dropout's random numbers are a function of seed and iteration (Philox), there "
              "is no RNG state to load.",
              ""),
    MWB_FIELD(checkpoint, finetune,
              "Load only the weights from load: iteration, consumed samples, optimizer and schedule start at 0.", ""),
    MWB_FIELD(checkpoint, exit_interval, "Stop (saving a checkpoint) at the first iteration divisible by this; 0 off.",
              ""),
    MWB_FIELD(checkpoint, exit_duration_in_mins,
              "Stop (saving a checkpoint) once training has run this many minutes; 0 off.", ""),
    // logging
    MWB_FIELD(logging, log_interval, "Iterations per metrics record and progress line.", ""),
    MWB_FIELD(logging, run_dir, "Run directory; empty means a new folder under the user's data dir.", ""),
    MWB_FIELD(logging, log_throughput, "Add TFLOP/s per device to the progress line.", ""),
    MWB_FIELD(logging, tensorboard_dir, "Write TensorBoard event files with Megatron-LM's tags here; empty is off.",
              ""),
    MWB_FIELD(logging, tensorboard_log_interval, "Iterations between TensorBoard scalars.", ""),
    MWB_FIELD(logging, log_loss_scale_to_tensorboard, "Log loss-scale to TensorBoard.", ""),
    MWB_FIELD(logging, log_validation_ppl_to_tensorboard, "Log validation perplexity to TensorBoard.", ""),
    MWB_FIELD(logging, log_timers_to_tensorboard, "Log iteration-time and throughput to TensorBoard.", ""),
    MWB_FIELD(logging, log_memory_to_tensorboard, "Log memory (allocated, peak, reserved) to TensorBoard.", ""),
    // runtime
    MWB_FIELD(runtime, device, "Where to train: cuda needs a GPU, auto uses one when present.", "cpu|cuda|auto"),
    MWB_FIELD(runtime, threads, "CPU threads; 0 means OMP_NUM_THREADS or every core.", ""),
    MWB_FIELD(runtime, deterministic,
              "GPU runs bit-identical run to run: no TF32 and no split-K reductions in cuBLAS (the CUDA ops never "
              "reduce with atomics). CPU runs always are, for any thread count.",
              ""),
    MWB_FIELD(runtime, attention_backend,
              "GPU attention kernels: cudnn is cuDNN 9's fused attention (bf16 runs, sm_80+, libcudnn.so.9 found at "
              "run time; its own dropout masks), own the engine's kernels (the CPU's dropout masks, bit-identical "
              "reruns), auto cuDNN where it runs, else own. cudnn and auto fall back to own, with one log line "
              "saying why, where cuDNN does not run, and in deterministic runs. Megatron-LM's names: fused runs "
              "as cudnn; flash, unfused and local as own. The CPU has one implementation and ignores it.",
              "auto|cudnn|own|fused|flash|unfused|local"),
    MWB_FIELD(runtime, enable_cuda_graph,
              "GPU: after cuda_graph_warmup_steps eager iterations, capture one whole training step (the forward "
              "and backward passes of every micro-batch, the pipeline's sends and receives, the gradient "
              "reduction, the optimizer, NCCL collectives included) in a CUDA graph and replay it on the "
              "following iterations; the step's scalars (learning rate, loss scale, dropout streams) and every "
              "micro-batch's tokens are uploaded before each launch, the end-of-step read stays outside, "
              "evaluation, checkpoints and samples run eagerly between replays (docs/gpu.md). Any tensor, "
              "pipeline and data-parallel layout; a batch ramp gets a graph per micro-batch count (each warmed "
              "up first, at most 4 kept). The CPU has no graphs and ignores it. Megatron-LM's "
              "--enable-cuda-graph (its full-iteration scope).",
              ""),
    MWB_FIELD(runtime, cuda_graph_warmup_steps,
              "Eager training iterations at each micro-batch count before enable_cuda_graph captures one (the "
              "caching allocator, the scratch areas, the cuBLASLt/cuDNN plans and NCCL's connections reach their "
              "sizes first); at least 1.",
              ""),
    // sampling
    MWB_FIELD(sampling, sample_interval,
              "Generate text from the current weights every N iterations and at the end of training (the ranks "
              "of data-parallel replica 0, each with its part of the model; sample records on the telemetry "
              "stream and in samples.jsonl); 0 off.",
              ""),
    MWB_FIELD(sampling, sample_prompts,
              "Prompts for sample_interval: a UTF-8 file, one prompt per line (empty lines ignored), at most 64 "
              "prompts of at most 4096 bytes.",
              ""),
    MWB_FIELD(sampling, sample_max_new_tokens, "Tokens generated per prompt at most (also bounded by the context).", ""),
    MWB_FIELD(sampling, sample_temperature, "Sampling temperature; 0 is greedy decoding.", ""),
    MWB_FIELD(sampling, sample_top_k, "Sample from the k most likely tokens; 0 off.", ""),
    MWB_FIELD(sampling, sample_top_p, "Nucleus sampling: the most likely tokens up to this probability mass; 1 off.",
              ""),
    MWB_FIELD(sampling, sample_seed, "Seed of the sampling random streams (the same seed gives the same text).", ""),
    // telemetry
    MWB_FIELD(telemetry, peak_tflops_per_device,
              "Peak TFLOP/s of one device (e.g. 989.4 for an H100 SXM in bf16, the measured sgemm peak on a CPU): "
              "MFU is reported against it; 0 leaves MFU out.",
              ""),
    MWB_FIELD(telemetry, mfu_attention_flops,
              "How model FLOPs (MFU, TFLOP/s, the planner) count the causal attention core: causal counts the "
              "unmasked half of the s x s matrix (Megatron-LM since core_v0.12.0), full the whole matrix "
              "(Megatron-LM up to core_v0.11, Narayanan et al. 2021 and the published MFU tables).",
              "causal|full"),
    MWB_FIELD(telemetry, telemetry_endpoint,
              "ZeroMQ PUB endpoint of live telemetry (tcp://HOST:PORT, port 0 = any free port; ipc://PATH); empty "
              "turns telemetry and control off. Bound ports go to <run_dir>/telemetry.json.",
              ""),
    MWB_FIELD(telemetry, telemetry_snapshot_endpoint,
              "ZeroMQ endpoint answering \"everything since seq N\" (late or reconnecting subscribers).", ""),
    MWB_FIELD(telemetry, control_endpoint,
              "ZeroMQ endpoint taking pause, resume, checkpoint, stop and status requests; empty turns control off.",
              ""),
    MWB_FIELD(telemetry, curve_secret_key_file,
              "This run's CURVE key pair (NAME.key_secret from mwb-record keygen); required to bind anything but "
              "loopback.",
              ""),
    MWB_FIELD(telemetry, curve_client_keys,
              "Client public keys admitted with CURVE: a NAME.key file, a directory of them, or one Z85 key per line.",
              ""),
});

#undef MWB_FIELD

std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diag = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

std::string snake(std::string_view name) {
    std::string s(name);
    std::replace(s.begin(), s.end(), '-', '_');
    return s;
}

}  // namespace

std::string Field::flag() const {
    std::string s = "--" + std::string(name);
    std::replace(s.begin(), s.end(), '_', '-');
    return s;
}

std::string_view Field::type_name() const {
    Config probe;
    return std::visit(
        [](auto* p) -> std::string_view {
            using T = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) return "int";
            else if constexpr (std::is_same_v<T, double>) return "float";
            else if constexpr (std::is_same_v<T, bool>) return "bool";
            else if constexpr (std::is_same_v<T, std::string>) return "string";
            else return "list";
        },
        bind(probe));
}

std::span<const Field> config_fields() { return kFields; }

const Field* find_config_field(std::string_view name) {
    const std::string key = snake(name);
    for (const Field& f : kFields)
        if (f.name == key) return &f;
    return nullptr;
}

std::string closest_name(std::string_view name, std::span<const std::string_view> candidates) {
    std::string best;
    std::size_t best_d = name.size() / 3 + 2;  // suggest only when reasonably close
    for (const std::string_view c : candidates) {
        const std::size_t d = edit_distance(name, c);
        if (d < best_d) {
            best_d = d;
            best = c;
        }
    }
    return best;
}

std::string closest_field_name(std::string_view name) {
    std::vector<std::string_view> names;
    for (const Field& f : kFields) names.push_back(f.name);
    return closest_name(snake(name), names);
}

}  // namespace mwb
