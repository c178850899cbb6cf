#pragma once
// The prepared statements of the ingest path (internal to store/).
#include "mwb/store/sqlite.h"
#include "mwb/store/store.h"

namespace mwb::store {

struct Store::Statements {
    explicit Statements(Database& db);

    Statement find_run, insert_run, insert_message, message_exists, set_next_seq;
    Statement insert_step, insert_step_details, insert_eval, insert_event, insert_memory;
    Statement run_started, run_ended, run_iteration, get_block_iters, set_block_iters;
    Statement block_aggregates, upsert_block, delete_block;
    Statement insert_sample;
};

/// INSERT OR IGNORE of one samples row (src/samples.cpp) and binding a record to it.
extern const char* const kInsertSampleSql;
void bind_sample(Statement& insert, int64_t run, const SampleRecord& s);
/// Migration 4's fill: the `sample` messages a version-3 store kept in events move to samples.
void move_sample_events(Database& db);

}  // namespace mwb::store
