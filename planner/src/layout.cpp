#include "mwb/planner/layout.h"

#include "backend/config/validate.h"

#include <algorithm>

namespace mwb::planner {

ModelShape ModelShape::from(const Config& c) {
    ModelShape m;
    m.L = c.model.num_layers;
    m.h = c.model.hidden_size;
    m.a = c.model.num_attention_heads;
    m.f = c.model.ffn_hidden_size;
    m.s = c.model.seq_length;
    m.b = c.training.micro_batch_size;
    m.V = padded_vocab_size(c);
    m.V_unpadded = model_vocab_size(c);
    const bool learned = c.model.position_embedding_type == "learned_absolute";
    const bool rope = c.model.position_embedding_type == "rope";
    m.P = learned ? c.model.max_position_embeddings : 0;
    m.G = c.model.num_query_groups;
    m.d = c.model.kv_channels;
    m.tied = !c.model.untie_embeddings_and_output_weights;
    m.rmsnorm = c.model.normalization == "RMSNorm";
    m.swiglu = c.model.swiglu;
    m.bias = c.model.add_bias_linear;
    m.qkv_bias = c.model.add_bias_linear || c.model.add_qkv_bias;
    m.rotary_dim = rope ? static_cast<int64_t>(c.model.kv_channels * c.model.rotary_percent) : 0;
    m.layer_flops = layer_forward_flops(c.model, c.telemetry.mfu_attention_flops);
    return m;
}

Layout Layout::from(const Config& c, int world) {
    Layout l;
    l.world = world;
    l.tp = c.parallel.tensor_model_parallel_size;
    l.pp = c.parallel.pipeline_model_parallel_size;
    l.dp = data_parallel_size(c, world);
    l.sp = c.parallel.sequence_parallel && l.tp > 1;
    l.distributed_optimizer = c.parallel.use_distributed_optimizer;
    l.bucket_elements = c.parallel.ddp_bucket_size;
    l.micro_batch = c.training.micro_batch_size;
    l.global_batch = c.training.global_batch_size;
    l.micro_batches = num_micro_batches(c, world);
    l.layers_per_stage = c.model.num_layers / l.pp;
    const int per_chunk = c.parallel.num_layers_per_virtual_pipeline_stage;
    l.vp = per_chunk > 0 ? std::max(1, l.layers_per_stage / per_chunk) : 1;
    l.layers_per_chunk = l.layers_per_stage / l.vp;
    const auto& t = c.training;
    if (t.recompute_granularity == "selective") l.recompute = Recompute::Selective;
    if (t.recompute_granularity == "full")
        l.recompute = t.recompute_method == "block" ? Recompute::FullBlock : Recompute::FullUniform;
    l.recompute_num_layers = t.recompute_num_layers;
    l.logits_chunk_bytes = t.logits_chunk_bytes;
    return l;
}

Precision Precision::from(const TrainingConfig& t, const DeviceSpec& device) {
    Precision p;
    p.half = t.bf16 || t.fp16;
    p.master = p.half;
    p.attention_row_stats = !device.emulated_16bit;  // a GPU
    if (!p.half) return p;  // every buffer is fp32
    p.layer_stored = 2;
    p.activation = 2;
    // The weights' working copy is a 16-bit arena on every device (the CPU's kernels take 16-bit weights).
    p.weight = 2;
    // Main grads: the engine's rule (gradient_dtype): 2 bytes in fp16 runs without
    // accumulate_allreduce_grads_in_fp32 (an f16 arena on every device), else 4 (docs/numerics.md,
    // "Gradients"; docs/memory.md).
    p.gradient = static_cast<int>(dtype_size(gradient_dtype(t)));
    // probs stays 4 on every device: attention's saved log-sum-exps are fp32 on a GPU too.
    if (device.emulated_16bit) return p;  // the CPU: logits and sums stay fp32
    p.logits = 2;
    p.partial_sum = 2;
    return p;
}

int64_t tokenizer_vocab_size(const std::string& type) {
    if (type == "ByteTokenizer") return 257;
    if (type == "GPT2BPETokenizer") return 50257;
    return 0;
}

}  // namespace mwb::planner
