#pragma once
// mwb-record's two jobs: follow live runs into the store, and import finished run directories.
#include "mwb/ipc/curve.h"
#include "mwb/store/store.h"

#include <atomic>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mwb::record {

/// A problem with what the user asked for (exit status 2).
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct FollowOptions {
    std::vector<std::string> endpoints;  ///< tcp://HOST:PORT, ipc://PATH or run directories
    std::optional<ipc::ClientCurve> curve;
    bool until_end = false;  ///< return once every followed run has published run.end
    bool quiet = false;      ///< no progress lines
    double progress_interval_s = 5;
    /// A run silent this long (no message, no heartbeat) is marked interrupted in the store and,
    /// with until_end, counts as ended.
    double gone_after_s = store::Store::kDefaultGoneAfterS;
};

/// Follows every endpoint, writing what arrives into `store` (one transaction per batch, at most
/// ~100 ms apart) until `stop` is set (or, with until_end, every run ended). Returns the exit status.
int follow(store::Store& store, const FollowOptions& options, const std::atomic<bool>& stop);

/// Loads a run directory's metrics.jsonl and events.jsonl into `store` (idempotent). Prints a
/// summary line; throws on errors.
void import_run_dir(store::Store& store, const std::string& run_dir, bool quiet);

}  // namespace mwb::record
