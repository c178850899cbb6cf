#pragma once
// Auto-configuration: enumerate the layouts a model can take on a cluster (TP, PP, virtual PP, DP, SP,
// micro-batch, recomputation, distributed optimizer), predict each with plan(), keep those that run
// and fit, and rank them by predicted throughput (ties: less memory). Model, global batch, precision and
// the rest of the configuration stay as given.
#include "mwb/planner/plan.h"

#include <string>
#include <vector>

namespace mwb::planner {

struct SearchOptions {
    int top = 10;              ///< how many ranked layouts to return
    int max_tp = 0;            ///< largest tensor-parallel size tried; 0 = devices per node
    int max_micro_batch = 16;  ///< micro-batch sizes tried: powers of two up to this that divide
    bool interleaving = true;  ///< try virtual pipeline stages
    PlanOptions plan;
};

struct RankedLayout {
    Plan plan;
    std::string summary;  ///< "TP 8 · PP 4 · DP 4 · SP · v2 · mb 1 · selective · distopt"
    std::string reason;   ///< why it wins, or what costs it time against the best (and what it saves)
};

struct Rejection {
    std::string reason;  ///< e.g. "exceeds memory", or the first layout issue's field
    int64_t count = 0;
};

struct SearchResult {
    std::vector<RankedLayout> ranked;   ///< best first, at most `top`
    std::vector<RankedLayout> too_big;  ///< the fastest few that do not fit (how much they exceed)
    std::vector<Rejection> rejected;    ///< counts by reason
    int64_t evaluated = 0, runnable = 0;
    double seconds = 0;  ///< time the search took
};

/// The layout of `p` in one line.
std::string describe_layout(const Plan& p);

SearchResult search(const Config& base, const Cluster& cluster, const SearchOptions& options = {});

}  // namespace mwb::planner
