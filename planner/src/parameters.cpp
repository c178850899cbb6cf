#include "mwb/planner/parameters.h"

#include <algorithm>

namespace mwb::planner {

namespace {

/// Accumulates the tensors of one rank: their elements, and their arena footprint.
struct Tally {
    int64_t numel = 0, arena = 0;
    void add(int64_t n) {
        numel += n;
        arena += arena_footprint(n);
    }
};

/// One transformer layer's tensors on a tensor-parallel rank (Megatron-core's split: QKV and fc1 by
/// output rows — QKV by query groups, fc1's gate and up halves each — proj and fc2 by input columns;
/// their biases and the norms are replicated).
void add_layer(Tally& t, const ModelShape& m, int64_t tp) {
    const int64_t norm_params = m.rmsnorm ? 1 : 2;
    for (int64_t i = 0; i < norm_params; ++i) t.add(m.h);  // input_layernorm weight [, bias]
    t.add(m.qkv_width() / tp * m.h);                       // linear_qkv.weight ((a + 2G)·d/t, h)
    if (m.qkv_bias) t.add(m.qkv_width() / tp);             // linear_qkv.bias
    t.add(m.h * (m.q_width() / tp));                       // linear_proj.weight (h, a·d/t)
    if (m.bias) t.add(m.h);                                // linear_proj.bias
    for (int64_t i = 0; i < norm_params; ++i) t.add(m.h);  // pre_mlp_layernorm
    t.add(m.fc1_width() / tp * m.h);                       // linear_fc1.weight (f/t or 2f/t, h)
    if (m.bias) t.add(m.fc1_width() / tp);                 // linear_fc1.bias
    t.add(m.h * (m.f / tp));                               // linear_fc2.weight (h, f/t)
    if (m.bias) t.add(m.h);                                // linear_fc2.bias
}

}  // namespace

int64_t ParameterCounts::max_per_rank() const {
    int64_t best = 0;
    for (const auto& s : stages) best = std::max(best, s.parameters);
    return best;
}

int64_t ParameterCounts::max_arena_elements() const {
    int64_t best = 0;
    for (const auto& s : stages) best = std::max(best, s.arena_elements);
    return best;
}

ParameterCounts count_parameters(const ModelShape& m, const Layout& l) {
    ParameterCounts c;
    Tally one_layer;
    add_layer(one_layer, m, 1);
    c.per_layer = one_layer.numel;
    c.embedding = m.V * m.h + m.P * m.h;
    c.output_layer = m.tied ? 0 : m.V * m.h;
    c.final_norm = m.rmsnorm ? m.h : 2 * m.h;
    c.total = c.embedding + m.L * c.per_layer + c.final_norm + c.output_layer;
    c.vocabulary_padding = (m.V - m.V_unpadded) * m.h * (m.tied ? 1 : 2);

    const int64_t tp = l.tp;
    for (int r = 0; r < l.pp; ++r) {
        Tally t;
        StageParameters s;
        s.layers = l.layers_per_stage;
        s.embedding = r == 0;
        s.head = r == l.pp - 1;
        if (s.embedding) {
            t.add(m.V / tp * m.h);          // word embeddings, vocab-parallel (V/t, h)
            if (m.P > 0) t.add(m.P * m.h);  // learned position embeddings, replicated
        }
        Tally layer;
        add_layer(layer, m, tp);
        t.numel += s.layers * layer.numel;
        t.arena += s.layers * layer.arena;
        if (s.head) {
            t.add(m.h);                  // final norm weight
            if (!m.rmsnorm) t.add(m.h);  // and bias
            // Untied: its own output layer. Tied with pp > 1: the last stage keeps a copy of the word
            // embedding (Megatron-LM's), kept equal by an all-reduce of the two copies' gradients.
            if (!m.tied || l.pp > 1) t.add(m.V / tp * m.h);
        }
        s.parameters = t.numel;
        s.arena_elements = t.arena;
        // The distributed optimizer splits the arena into DP equal, aligned shards (ParamLayout::pad_to_shards).
        if (l.distributed_optimizer) s.arena_elements = arena_padded_to_shards(s.arena_elements, l.dp);
        c.stages.push_back(s);
    }
    return c;
}

}  // namespace mwb::planner
