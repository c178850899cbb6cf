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
        const int per_stage = c.model.num_layers / c.parallel.pipeline_model_parallel_size;
        const double recomputed_layers =
            c.training.recompute_method == "block" ? std::min(c.training.recompute_num_layers, per_stage) *
                                                          c.parallel.pipeline_model_parallel_size
                                                    : L;
        r.hardware += T * recomputed_layers * layer_fwd;
    } else if (g == "selective") {
        r.hardware += T * L * 4 * s * h;
    }
    return r;
}

}  // namespace mwb
