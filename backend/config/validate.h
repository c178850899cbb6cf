#pragma once
// What a configuration implies (padded vocabulary, data-parallel size, micro-batches) and whether it
// can run: every problem is reported with the field that causes it, before any work starts.
#include "backend/config/config.h"
#include "backend/config/config_io.h"
#include "mwb/kernels/tensor.h"

#include <string>
#include <vector>

namespace mwb {

/// Replaces every "0 means ..." default with its value (ffn_hidden_size, max_position_embeddings,
/// global_batch_size, lr_decay_iters, vocab_size from the tokenizer unless it is the NullTokenizer,
/// whose vocab_size is the user's) and applies Megatron-LM's
/// implied settings (bf16 implies fp32 gradient accumulation; sequence_parallel is off when TP = 1).
/// Returns notes on what it changed that the user may not expect.
std::vector<std::string> resolve(Config& config, int world_size, int64_t tokenizer_vocab);

/// Every problem of a resolved configuration for a world of `world_size` ranks.
std::vector<ConfigIssue> validate(const Config& config, int world_size);
/// validate() and throw ConfigError when anything is wrong.
void check_config(const Config& config, int world_size);

/// Token ids the model must embed: the tokenizer's vocabulary. For NullTokenizer that is vocab_size
/// (current Megatron-LM) or vocab_size + 1 (null_tokenizer_legacy_eod, config/null_vocabulary.h), else
/// the tokenizer's size that resolve() stored in vocab_size.
int64_t model_vocab_size(const Config& config);
/// The vocabulary padded as Megatron-LM does: up to a multiple of make_vocab_size_divisible_by × TP.
int64_t padded_vocab_size(const Config& config);
int data_parallel_size(const Config& config, int world_size);
/// Micro-batches per iteration on each data-parallel rank (gradient accumulation steps) at the full
/// global batch size.
int64_t num_micro_batches(const Config& config, int world_size);
/// The same for the iteration that starts after `consumed_samples` (batch ramp-up or schedule).
int64_t num_micro_batches(const Config& config, int world_size, int64_t consumed_samples);
/// The largest of those over the run (a batch ramp's or schedule's largest global batch).
int64_t max_num_micro_batches(const Config& config, int world_size);
/// Global batch of the iteration that starts after `consumed_samples`: rampup_batch_size as older
/// Megatron-LM releases ramp it (RampupBatchsizeNumMicroBatchesCalculator), step_batch_size_schedule
/// as current Megatron-LM (StepBatchsizeNumMicroBatchesCalculator), else global_batch_size.
int64_t global_batch_size_at(const Config& config, int64_t consumed_samples);
/// Iterations to consume `train_samples` (Megatron-LM's update_train_iters).
int64_t iterations_for_samples(const Config& config);
/// Element type activations and model weights are stored in (F32, BF16 or F16).
DType storage_dtype(const TrainingConfig& training);
/// Element type of the gradient arena ("main grads"), on every device: F16 in an fp16 run without
/// accumulate_allreduce_grads_in_fp32, where Megatron-LM keeps main grads in the params' dtype, else
/// F32 (bf16 forces the flag on). The one rule the model (GptModel's arena) and the planner
/// (Precision::gradient) read (docs/numerics.md, "Gradients").
DType gradient_dtype(const TrainingConfig& training);

}  // namespace mwb
