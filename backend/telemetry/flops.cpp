#include "telemetry/flops.h"

#include "config/validate.h"

namespace mwb {

FlopCounts flops_per_iteration(const Config& c) {
    const double T = static_cast<double>(c.training.global_batch_size) * c.model.seq_length;
    const double L = c.model.num_layers, h = c.model.hidden_size, f = c.model.ffn_hidden_size, s = c.model.seq_length;
    const double V = static_cast<double>(padded_vocab_size(c));
    const double layer_fwd = 8 * h * h + 4 * h * f + 4 * s * h;  // per token
    const double head_fwd = 2 * h * V;
    FlopCounts r;
    r.model = 3 * T * (L * layer_fwd + head_fwd);
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
                ? static_cast<double>(std::min(c.training.recompute_num_layers, per_chunk)) * (c.model.num_layers / per_chunk)
                : L;
        r.hardware += T * recomputed_layers * layer_fwd;
    } else if (g == "selective") {
        r.hardware += T * L * 4 * s * h;
    }
    return r;
}

}  // namespace mwb
