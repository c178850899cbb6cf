#include "mwb/store/schema.h"

#include "mwb/ipc/metrics.h"
#include "mwb/store/error.h"

#include <vector>

#include <string>

namespace mwb::store {

namespace {

// Version 1, as the first recorder wrote it. Never edit a released migration: add one.
constexpr std::string_view kV1 = R"sql(
CREATE TABLE runs (
  id         INTEGER PRIMARY KEY,
  uid        TEXT NOT NULL UNIQUE,          -- run_id on the wire
  name       TEXT NOT NULL DEFAULT '',
  created    REAL,                          -- Unix seconds of the first run.start
  finished   REAL,                          -- of the last run.end (NULL while running)
  status     TEXT NOT NULL DEFAULT 'unknown',
  reason     TEXT NOT NULL DEFAULT '',
  iteration  INTEGER NOT NULL DEFAULT 0,
  config     TEXT,
  topology   TEXT,
  hosts      TEXT,
  tags       TEXT NOT NULL DEFAULT '',      -- comma-separated (moved to run_tags in version 2)
  notes      TEXT NOT NULL DEFAULT '',
  next_seq   INTEGER NOT NULL DEFAULT 0     -- every seq below is stored
);
CREATE TABLE messages (
  run   INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  seq   INTEGER NOT NULL,
  topic TEXT NOT NULL,
  PRIMARY KEY (run, seq)
) WITHOUT ROWID;
CREATE TABLE steps (
  run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  iteration INTEGER NOT NULL,
  time REAL,
  consumed_samples INTEGER,
  consumed_tokens INTEGER,
  lm_loss REAL,
  lr REAL,
  grad_norm REAL,
  loss_scale REAL,
  skipped_iterations INTEGER,
  iteration_time_s REAL,
  tokens_per_sec REAL,
  tflops_per_device REAL,
  hardware_tflops_per_device REAL,
  mem_allocated_bytes INTEGER,
  mem_peak_bytes INTEGER,
  extra TEXT,                               -- fields this schema has no column for (JSON)
  PRIMARY KEY (run, iteration, seq)
) WITHOUT ROWID;
CREATE TABLE evals (
  run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  iteration INTEGER NOT NULL,
  time REAL,
  consumed_tokens INTEGER,
  lm_loss REAL,
  ppl REAL,
  samples INTEGER,
  time_s REAL,
  extra TEXT,
  PRIMARY KEY (run, seq)
) WITHOUT ROWID;
CREATE TABLE events (
  run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  time REAL,
  topic TEXT NOT NULL,
  kind TEXT,
  iteration INTEGER,
  body TEXT NOT NULL,                       -- the whole message (JSON)
  PRIMARY KEY (run, seq)
) WITHOUT ROWID;
)sql";

// Version 2: tags get their own table, per-rank memory samples, the step time breakdown (slowest
// rank per phase) and the highest memory peak of any rank, and per-block aggregates for fast
// downsampling (filled by the code after this SQL runs).
constexpr std::string_view kV2 = R"sql(
CREATE TABLE run_tags (
  run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  tag TEXT NOT NULL,
  PRIMARY KEY (run, tag)
) WITHOUT ROWID;
WITH RECURSIVE split(run, tag, rest) AS (
  SELECT id, '', tags || ',' FROM runs
  UNION ALL
  SELECT run, trim(substr(rest, 1, instr(rest, ',') - 1)), substr(rest, instr(rest, ',') + 1)
  FROM split WHERE rest <> ''
)
INSERT OR IGNORE INTO run_tags (run, tag) SELECT run, tag FROM split WHERE tag <> '';
ALTER TABLE runs DROP COLUMN tags;
ALTER TABLE runs ADD COLUMN derived TEXT;
ALTER TABLE runs ADD COLUMN block_iters INTEGER NOT NULL DEFAULT 0;  -- iterations per step_blocks block
CREATE INDEX runs_by_created ON runs(created);
-- steps keep only numbers (narrow rows: fast range reads); the rest of a record moves beside them
CREATE TABLE step_details (
  run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  body TEXT NOT NULL,                       -- the step's fields without a column (JSON): mem, ranks, new ones
  PRIMARY KEY (run, seq)
) WITHOUT ROWID;
INSERT INTO step_details (run, seq, body) SELECT run, seq, extra FROM steps WHERE extra IS NOT NULL;
ALTER TABLE steps DROP COLUMN extra;
ALTER TABLE steps ADD COLUMN mem_peak_bytes_max_rank INTEGER;
ALTER TABLE steps ADD COLUMN forward_s REAL;          -- seconds per iteration, the slowest rank's (ranks[].time)
ALTER TABLE steps ADD COLUMN backward_s REAL;
ALTER TABLE steps ADD COLUMN gradient_reduce_s REAL;
ALTER TABLE steps ADD COLUMN optimizer_s REAL;
ALTER TABLE steps ADD COLUMN data_s REAL;
ALTER TABLE steps ADD COLUMN communication_s REAL;
ALTER TABLE steps ADD COLUMN pipeline_bubble_s REAL;
CREATE TABLE memory (
  run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  iteration INTEGER,
  time REAL,
  allocated INTEGER,
  peak INTEGER,
  reserved INTEGER,
  by_category TEXT,                         -- {"category": {"current", "peak"}} (JSON)
  PRIMARY KEY (run, seq, rank)
) WITHOUT ROWID;
CREATE TABLE step_blocks (
  run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  metric TEXT NOT NULL,
  block INTEGER NOT NULL,                   -- iterations [block * block_iters, (block + 1) * block_iters)
  n INTEGER NOT NULL,                       -- non-NULL values
  y_min REAL, y_max REAL, y_sum REAL,
  x_min INTEGER, x_max INTEGER,             -- iterations of the first and last of them
  PRIMARY KEY (run, metric, block)
) WITHOUT ROWID;
)sql";

// Version 3: when a follower last heard from each run (its clock, Unix seconds), so a run whose
// process is gone is marked interrupted instead of staying "running" forever (store/src/liveness.cpp).
// Existing runs start from their newest step's time (or their start).
constexpr std::string_view kV3 = R"sql(
ALTER TABLE runs ADD COLUMN last_seen REAL;
UPDATE runs SET last_seen = coalesce((SELECT max(time) FROM steps WHERE steps.run = runs.id), created);
)sql";

// Version 4: text samples written during training (the `sample` topic of mwb.telemetry/1.1), one row
// per prompt per sampling point; a version-3 store kept such messages whole in events, and the code
// after this SQL moves them here (Store's migration fill).
constexpr std::string_view kV4 = R"sql(
CREATE TABLE samples (
  run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  iteration INTEGER NOT NULL,
  prompt_index INTEGER NOT NULL,
  time REAL,
  consumed_tokens INTEGER,
  prompt TEXT NOT NULL,
  completion TEXT NOT NULL,
  prompt_tokens INTEGER,
  completion_tokens INTEGER,
  finish_reason TEXT,
  greedy INTEGER,
  temperature REAL,
  top_k INTEGER,
  top_p REAL,
  seed INTEGER,
  time_s REAL,
  PRIMARY KEY (run, iteration, prompt_index, seq)
) WITHOUT ROWID;
CREATE INDEX samples_by_prompt ON samples(run, prompt, iteration);
)sql";

}  // namespace

std::string_view migration_sql(int version) {
    switch (version) {
        case 1:
            return kV1;
        case 2:
            return kV2;
        case 3:
            return kV3;
        case 4:
            return kV4;
        default:
            throw Error("no migration to schema version " + std::to_string(version));
    }
}

std::span<const std::string_view> step_metrics() {
    // the metric table's rows with a steps column, in its order (test_telemetry_fixture checks that
    // they are exactly the columns the migrations made)
    static const std::vector<std::string_view> columns = [] {
        std::vector<std::string_view> c;
        for (const ipc::Metric& m : ipc::metrics())
            if (!m.column.empty() && m.source != ipc::MetricSource::Eval) c.push_back(m.column);
        return c;
    }();
    return columns;
}

std::span<const ipc::EvalField* const> eval_columns() {
    // test_telemetry_fixture checks that they are exactly the value columns the migrations made
    static const std::vector<const ipc::EvalField*> columns = [] {
        std::vector<const ipc::EvalField*> c;
        for (const ipc::EvalField& f : ipc::eval_fields())
            if (!f.column.empty()) c.push_back(&f);
        return c;
    }();
    return columns;
}

int migrate(Database& db, int target, const std::function<void(int)>& fill) {
    if (target < 1 || target > kSchemaVersion)
        throw Error("store " + db.file() + ": cannot migrate to schema version " + std::to_string(target));
    // IMMEDIATE: two processes opening an old file at once migrate it once, one after the other.
    db.exec("BEGIN IMMEDIATE");
    try {
        const int found = db.user_version();
        if (found > kSchemaVersion)
            throw Error("store " + db.file() + " has schema version " + std::to_string(found) +
                        "; this build reads versions up to " + std::to_string(kSchemaVersion) + " (use a newer mwb)");
        if (found == 0 && db.scalar_int("SELECT count(*) FROM sqlite_schema") > 0)
            throw Error("store " + db.file() + " is an SQLite database but not an mwb store (no schema version)");
        for (int v = found + 1; v <= target; ++v) {
            db.exec(migration_sql(v));
            if (fill && found > 0) fill(v);  // a new file has no old data to carry over
        }
        if (found < target) db.exec("PRAGMA user_version = " + std::to_string(target));
        db.exec("COMMIT");
        return found;
    } catch (...) {
        db.exec("ROLLBACK");
        throw;
    }
}

}  // namespace mwb::store
