#include "model/gpt_dims.h"

#include "config/validate.h"

#include <algorithm>

namespace mwb {

GptDims GptDims::from_config(const Config& c) {
    GptDims d;
    d.layers = c.model.num_layers;
    d.hidden = c.model.hidden_size;
    d.heads = c.model.num_attention_heads;
    d.ffn = c.model.ffn_hidden_size;
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
    return d;
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

int64_t RecomputePolicy::chunk_begin(int64_t l) const { return uniform ? l / num_layers * num_layers : l; }

int64_t RecomputePolicy::chunk_end(int64_t l, int64_t layers) const {
    return uniform ? std::min(layers, chunk_begin(l) + num_layers) : l + 1;
}

}  // namespace mwb
