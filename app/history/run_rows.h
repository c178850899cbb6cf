#pragma once
// One row of the History table per stored run: the store's summary plus what a person scans for
// (model size, parallel layout, the final tokens/s), read once per reload. Qt-free.
#include "mwb/store/store.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mwb::app {

struct RunRow {
    std::string uid, name, status, reason, notes;
    std::optional<double> created, finished;
    int64_t iteration = 0;
    std::optional<int64_t> train_iters;
    std::optional<double> final_loss;      ///< lm_loss of the last step record
    std::optional<double> tokens_per_sec;  ///< of the last step record
    std::optional<double> parameters;      ///< derived.parameters
    std::string model;                     ///< "12 L · 768 H · 12 A · seq 1024"
    std::string layout;                    ///< "TP 2 · PP 1 · DP 2 (4 ranks)"
    std::vector<std::string> tags;
    std::string run_dir;  ///< the resolved config's run_dir ("" when unknown)
    /// Every scalar of the configuration and the topology ("topology.KEY") as text: what filters
    /// (`tp=2`), grouping and the scatter read.
    std::map<std::string, std::string> settings;

    /// The name, or the uid when the run has none.
    const std::string& title() const { return name.empty() ? uid : name; }
};

/// Every run of the store (newest first), with its configuration's summary and the last tokens/s.
std::vector<RunRow> load_run_rows(store::Store& store);
/// The row of one run (nullopt when the store lacks it).
std::optional<RunRow> load_run_row(store::Store& store, const std::string& uid);

/// The value of setting `key` of `row`: the exact key, "topology." + key, or a short name (tp, pp,
/// dp, layers, hidden, heads, seq, mbs, gbs, lr); nullptr when the run has none.
const std::string* setting(const RunRow& row, const std::string& key);
/// A setting as a number (nullopt when absent or not a number).
std::optional<double> setting_number(const RunRow& row, const std::string& key);

/// "12 L · 768 H · 12 A · seq 1024" from a config ("" when it has none of these keys).
std::string describe_model(const nlohmann::json& config);
/// "TP 2 · PP 1 · DP 2 (4 ranks)" from a topology ("" when unknown).
std::string describe_layout(const nlohmann::json& topology);

}  // namespace mwb::app
