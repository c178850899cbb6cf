#include "parallel/schedule.h"

#include "mwb/kernels/error.h"

#include <algorithm>

namespace mwb {

std::vector<PipelineAction> pipeline_schedule(int p, int r, int v, int64_t m, bool forward_only) {
    MWB_CHECK(p >= 1 && r >= 0 && r < p && v >= 1 && m >= 1, "pipeline_schedule: stages {} rank {} chunks {} micro {}", p,
              r, v, m);
    MWB_CHECK(v == 1 || m % p == 0,
              "the interleaved pipeline schedule needs the number of micro-batches ({}) to be a multiple of "
              "pipeline_model_parallel_size ({})",
              m, p);
    using K = PipelineAction::Kind;
    std::vector<PipelineAction> out;
    const int64_t total = m * v;
    // Step k of the interleaved order: groups of p micro-batches run through chunk 0, then chunk 1, ...
    const auto step = [&](int64_t k, bool forward) {
        const int64_t in_group = k % (static_cast<int64_t>(p) * v);
        int chunk = static_cast<int>(in_group / p);
        if (!forward) chunk = v - 1 - chunk;
        const int64_t micro = (k / (static_cast<int64_t>(p) * v)) * p + k % p;
        return PipelineAction{forward ? K::Forward : K::Backward, chunk, v == 1 ? k : micro};
    };
    if (forward_only) {
        for (int64_t k = 0; k < total; ++k) out.push_back(step(k, true));
        return out;
    }
    int64_t warmup = v == 1 ? std::min<int64_t>(p - r - 1, m)
                            : (m == p ? total : std::min<int64_t>(total, 2 * (p - r - 1) + static_cast<int64_t>(v - 1) * p));
    const int64_t steady = total - warmup;
    for (int64_t k = 0; k < warmup; ++k) out.push_back(step(k, true));
    for (int64_t k = 0; k < steady; ++k) {
        out.push_back(step(warmup + k, true));
        out.push_back(step(k, false));
    }
    for (int64_t k = steady; k < total; ++k) out.push_back(step(k, false));
    return out;
}

}  // namespace mwb
