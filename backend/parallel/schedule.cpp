#include "backend/parallel/schedule.h"

#include "mwb/kernels/error.h"

#include <algorithm>

namespace mwb {

namespace {

/// Numbers the exchange steps: one per action, but one per forward + backward pair of the `steady`
/// pairs after `warmup` forwards when `paired`.
std::vector<PipelineAction> number_steps(std::vector<PipelineAction> actions, int64_t warmup, int64_t steady, bool paired) {
    int64_t step = -1;
    for (int64_t i = 0; i < static_cast<int64_t>(actions.size()); ++i) {
        const bool second_of_pair = paired && i > warmup && i < warmup + 2 * steady && (i - warmup) % 2 == 1;
        if (!second_of_pair) ++step;
        actions[static_cast<std::size_t>(i)].step = step;
    }
    return actions;
}

}  // namespace

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
    // Action k of the interleaved order: groups of p micro-batches run through chunk 0, then chunk 1, ...
    const auto action = [&](int64_t k, bool forward) {
        const int64_t in_group = k % (static_cast<int64_t>(p) * v);
        int chunk = static_cast<int>(in_group / p);
        if (!forward) chunk = v - 1 - chunk;
        const int64_t micro = (k / (static_cast<int64_t>(p) * v)) * p + k % p;
        return PipelineAction{forward ? K::Forward : K::Backward, chunk, v == 1 ? k : micro};
    };
    if (forward_only) {
        for (int64_t k = 0; k < total; ++k) out.push_back(action(k, true));
        return number_steps(out, 0, 0, false);
    }
    int64_t warmup = v == 1 ? std::min<int64_t>(p - r - 1, m)
                            : (m == p ? total : std::min<int64_t>(total, 2 * (p - r - 1) + static_cast<int64_t>(v - 1) * p));
    const int64_t steady = total - warmup;
    for (int64_t k = 0; k < warmup; ++k) out.push_back(action(k, true));
    for (int64_t k = 0; k < steady; ++k) {
        out.push_back(action(warmup + k, true));
        out.push_back(action(k, false));
    }
    for (int64_t k = steady; k < total; ++k) out.push_back(action(k, false));
    return number_steps(out, warmup, steady, v > 1);
}

}  // namespace mwb
