#pragma once
// The store's schema, versioned with PRAGMA user_version and migrated forward only (docs/store.md).
//   1  runs (tags as text), messages, steps, evals, events
//   2  run_tags, memory (per rank), the step time breakdown and max-rank peak, step_blocks
//      (downsampling), derived
//   3  runs.last_seen (when a follower last heard from the run: marking runs whose process is gone)
//   4  samples (text generated during training; moved out of events where version 3 kept them)
// A file newer than this build is refused rather than guessed at.
#include "mwb/ipc/schema.h"
#include "mwb/store/sqlite.h"

#include <functional>
#include <span>
#include <string_view>

namespace mwb::store {

inline constexpr int kSchemaVersion = 4;

/// The SQL of migration `version` (1 creates the first schema); `version` in 1..kSchemaVersion.
std::string_view migration_sql(int version);

/// Brings `db` to `target` (default: the current version) in one transaction, running the
/// migrations it lacks. Throws Error for a file newer than this build. Returns the version found.
/// `fill(v)` runs in the same transaction after migration v's SQL on a file that had data (the code
/// that carries old rows into new tables).
int migrate(Database& db, int target = kSchemaVersion, const std::function<void(int)>& fill = {});

/// Numeric columns of `steps` that series() can downsample through step_blocks (schema 2).
std::span<const std::string_view> step_metrics();

/// The eval record's fields with a column of `evals` (ipc::eval_fields(), in its order).
std::span<const ipc::EvalField* const> eval_columns();

}  // namespace mwb::store
