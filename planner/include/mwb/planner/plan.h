#pragma once
// The planner's entry point: everything predicted for one configuration on one cluster. Qt-free and
// fast enough to call on every edit in the app's Designer (microseconds; see docs/planner.md).
#include "backend/config/config.h"
#include "backend/config/config_io.h"
#include "mwb/planner/activations.h"
#include "mwb/planner/cluster.h"
#include "mwb/planner/communication.h"
#include "mwb/planner/layout.h"
#include "mwb/planner/memory.h"
#include "mwb/planner/parameters.h"
#include "mwb/planner/timing.h"
#include "backend/telemetry/flops.h"

#include <string>
#include <vector>

namespace mwb::planner {

struct PlanOptions {
    Accounting accounting = Accounting::Engine;  ///< what mwb-train allocates, or Korthikanti's Megatron-LM count
    double compute_efficiency = 0;               ///< fraction of peak; 0 = the device's catalogue value
    double train_tokens = 0;                     ///< for days to train; 0 = train_iters × global batch × s
};

struct Plan {
    Config config;  ///< resolved (defaults filled in) for the cluster's world size
    Cluster cluster;
    PlanOptions options;
    std::vector<ConfigIssue> issues;  ///< every reason the run cannot start: validate(), the planner's own
                                      ///< checks, and memory beyond the device (field "memory")
    std::vector<std::string> notes;   ///< resolve()'s notes and the planner's remarks
    bool estimated = false;           ///< the model and layout make sense: the numbers below are filled in
    bool fits = false;                ///< every stage fits in the device's memory

    ModelShape model;
    Layout layout;
    Precision precision;
    ParameterCounts parameters;
    std::vector<StageMemory> memory;  ///< per pipeline stage (every rank of a stage is alike)
    int most_loaded_stage = 0;
    int64_t memory_limit = 0;                       ///< bytes per device available to the run (0 = not checked)
    FlopCounts flops;                               ///< per iteration, the whole model (telemetry/flops.h)
    std::vector<StageCommunication> communication;  ///< per pipeline stage, per rank
    Timing time;

    const StageMemory& most_loaded() const { return memory.at(static_cast<std::size_t>(most_loaded_stage)); }
    /// estimated, fits, and no issue with the model, layout or batch (other fields such as lr don't count).
    bool runnable() const;
    /// Per group, the most any rank sends per iteration.
    std::array<int64_t, kGroups> max_bytes_sent() const;
};

/// Config fields whose problems make an estimate meaningless (model shape, layout, batch, recompute,
/// precision); problems elsewhere (lr, data files, ...) are reported but the estimate is still made.
bool is_layout_field(const std::string& field);

Plan plan(const Config& config, const Cluster& cluster, const PlanOptions& options = {});

}  // namespace mwb::planner
