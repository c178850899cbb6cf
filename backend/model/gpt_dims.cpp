#include "backend/model/gpt_dims.h"

#include "backend/config/validate.h"

#include <algorithm>

namespace mwb {

GptDims GptDims::from_config(const Config& c) {
    GptDims d;
    d.layers = c.model.num_layers;
    d.hidden = c.model.hidden_size;
    d.heads = c.model.num_attention_heads;
    // Without group_query_attention every head is its own group, whatever num_query_groups says.
    d.groups = c.model.group_query_attention ? c.model.num_query_groups : c.model.num_attention_heads;
    d.kv_channels = c.model.kv_channels;
    d.ffn = c.model.ffn_hidden_size;
    d.swiglu = c.model.swiglu;
    d.linear_bias = c.model.add_bias_linear;
    d.qkv_bias = c.model.add_qkv_bias;
    const std::string& pos = c.model.position_embedding_type;
    d.positions = pos == "rope" ? Positions::Rope : pos == "none" ? Positions::None : Positions::Learned;
    d.rotary_dim = static_cast<int64_t>(static_cast<double>(d.head_dim()) * c.model.rotary_percent);
    d.rotary_base = static_cast<double>(c.model.rotary_base);
    d.rotary_interleaved = c.model.rotary_interleaved;
    d.rope_scaling = c.model.use_rope_scaling;
    d.rope_scaling_factor = c.model.rope_scaling_factor;
    d.seq = c.model.seq_length;
    d.micro_batch = c.training.micro_batch_size;
    d.vocab = padded_vocab_size(c);
    d.max_positions = c.model.max_position_embeddings;
    d.tied_output = !c.model.untie_embeddings_and_output_weights;
    d.rmsnorm = c.model.normalization == "RMSNorm";
    d.norm_eps = static_cast<float>(c.model.layernorm_epsilon);
    d.hidden_dropout = static_cast<float>(c.model.hidden_dropout);
    d.attention_dropout = static_cast<float>(c.model.attention_dropout);
    d.init_std = static_cast<float>(c.model.init_method_std);
    d.logits_chunk_bytes = c.training.logits_chunk_bytes;
    return d;
}

ModelPartition ModelPartition::whole(const GptDims& d) {
    ModelPartition p;
    p.chunks.push_back({0, d.layers});
    return p;
}

ModelPartition ModelPartition::for_stage(const GptDims& d, int pp_size, int pp_rank, int layers_per_virtual_stage) {
    ModelPartition p;
    if (layers_per_virtual_stage > 0) {
        const int64_t chunks = d.layers / (static_cast<int64_t>(pp_size) * layers_per_virtual_stage);
        for (int64_t c = 0; c < chunks; ++c) {
            const int64_t stage = c * pp_size + pp_rank;
            p.chunks.push_back({stage * layers_per_virtual_stage, (stage + 1) * layers_per_virtual_stage});
        }
    } else {
        const int64_t per = d.layers / pp_size;
        p.chunks.push_back({pp_rank * per, (pp_rank + 1) * per});
    }
    p.embedding = p.chunks.front().first_layer == 0;
    p.head = p.chunks.back().end_layer == d.layers;
    p.tied_copy = p.head && !p.embedding && d.tied_output;
    return p;
}

RecomputePolicy RecomputePolicy::from_config(const TrainingConfig& t) {
    RecomputePolicy p;
    if (t.recompute_granularity == "selective") p.granularity = RecomputeGranularity::Selective;
    if (t.recompute_granularity == "full") p.granularity = RecomputeGranularity::Full;
    p.uniform = t.recompute_method != "block";
    p.num_layers = t.recompute_num_layers;
    return p;
}

bool RecomputePolicy::stores_all(int64_t l) const {
    if (granularity != RecomputeGranularity::Full) return true;
    return uniform ? false : l >= num_layers;
}

int64_t RecomputePolicy::chunk_begin(int64_t l) const {
    return uniform ? l / num_layers * num_layers : l;
}

int64_t RecomputePolicy::chunk_end(int64_t l, int64_t layers) const {
    return uniform ? std::min(layers, chunk_begin(l) + num_layers) : l + 1;
}

}  // namespace mwb
