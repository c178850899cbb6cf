#include "backend/telemetry/flops.h"

#include "backend/config/validate.h"

#include "mwb/kernels/error.h"

#include <algorithm>

namespace mwb {

double attention_flops_share(std::string_view reading) {
    if (reading == "causal") return 0.5;
    if (reading == "full") return 1.0;
    MWB_FAIL("mfu_attention_flops: expected causal or full, got '{}'", reading);
}

LayerFlops layer_forward_flops(const ModelConfig& m, std::string_view mfu_attention_flops) {
    const double h = m.hidden_size, a = m.num_attention_heads, G = m.num_query_groups, d = m.kv_channels;
    const double f = m.ffn_hidden_size, s = m.seq_length;
    const double mlp_matrices = m.swiglu ? 3 : 2;  // fc1 is h -> 2f with SwiGLU
    LayerFlops r;
    r.gemm = 2 * h * (a + 2 * G) * d + 2 * a * d * h + 2 * mlp_matrices * h * f;
    r.attention = attention_flops_share(mfu_attention_flops) * 4 * s * a * d;
    return r;
}

FlopCounts flops_per_iteration(const Config& c) {
    const double T = static_cast<double>(c.training.global_batch_size) * c.model.seq_length;
    const double L = c.model.num_layers, h = c.model.hidden_size;
    const double V = static_cast<double>(padded_vocab_size(c));
    const LayerFlops layer = layer_forward_flops(c.model, c.telemetry.mfu_attention_flops);
    const double head_fwd = 2 * h * V;
    FlopCounts r;
    r.model = 3 * T * (L * layer.total() + head_fwd);
    r.hardware = r.model;
    const std::string& g = c.training.recompute_granularity;
    if (g == "full") {
        // The block method recomputes the first N layers of every model chunk (as the engine applies it).
        const int pp = c.parallel.pipeline_model_parallel_size;
        const int per_chunk = c.parallel.num_layers_per_virtual_pipeline_stage > 0
                                  ? c.parallel.num_layers_per_virtual_pipeline_stage
                                  : c.model.num_layers / pp;
        const double recomputed_layers =
            c.training.recompute_method == "block"
                ? static_cast<double>(std::min(c.training.recompute_num_layers, per_chunk)) *
                      (c.model.num_layers / per_chunk)
                : L;
        r.hardware += T * recomputed_layers * layer.total();
    } else if (g == "selective") {
        r.hardware += T * L * layer.attention;
    }
    return r;
}

}  // namespace mwb
