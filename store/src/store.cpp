#include "mwb/store/store.h"

#include "mwb/store/error.h"
#include "mwb/store/schema.h"
#include "statements.h"

#include <cstdlib>

namespace mwb::store {

namespace fs = std::filesystem;

namespace {

/// The block aggregate query: count/min/max/sum and first/last iteration of every metric.
std::string block_aggregates_sql() {
    std::string sql = "SELECT ";
    bool first = true;
    for (std::string_view m : step_metrics()) {
        const std::string c(m);
        if (!first) sql += ", ";
        first = false;
        sql += "count(" + c + "), min(" + c + "), max(" + c + "), sum(" + c + "), min(CASE WHEN " + c +
               " IS NOT NULL THEN iteration END), max(CASE WHEN " + c + " IS NOT NULL THEN iteration END)";
    }
    return sql + " FROM steps WHERE run = ?1 AND iteration >= ?2 AND iteration < ?3";
}

std::string insert_step_sql() {
    std::string cols = "run, seq, iteration, time", vals = "?, ?, ?, ?";
    for (std::string_view m : step_metrics()) {
        cols += ", " + std::string(m);
        vals += ", ?";
    }
    return "INSERT OR IGNORE INTO steps (" + cols + ") VALUES (" + vals + ")";
}

std::string insert_eval_sql() {
    std::string cols = "run, seq, iteration, time", vals = "?, ?, ?, ?";
    for (const ipc::EvalField* f : eval_columns()) {
        cols += ", " + std::string(f->column);
        vals += ", ?";
    }
    return "INSERT OR IGNORE INTO evals (" + cols + ", extra) VALUES (" + vals + ", ?)";
}

}  // namespace

fs::path default_store_path() {
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return fs::path(xdg) / "mwb" / "history.sqlite";
    if (const char* home = std::getenv("HOME"); home && *home)
        return fs::path(home) / ".local" / "share" / "mwb" / "history.sqlite";
    return fs::current_path() / ".mwb" / "history.sqlite";
}

Store::Statements::Statements(Database& db)
    : find_run(db.prepare("SELECT id FROM runs WHERE uid = ?")),
      insert_run(db.prepare("INSERT INTO runs (uid, name) VALUES (?, ?)")),
      insert_message(db.prepare("INSERT OR IGNORE INTO messages (run, seq, topic) VALUES (?, ?, ?)")),
      message_exists(db.prepare("SELECT 1 FROM messages WHERE run = ? AND seq = ?")),
      set_next_seq(db.prepare("UPDATE runs SET next_seq = ?3 WHERE id = ?1 AND next_seq = ?2")),
      insert_step(db.prepare(insert_step_sql())),
      insert_step_details(db.prepare("INSERT OR IGNORE INTO step_details (run, seq, body) VALUES (?, ?, ?)")),
      insert_eval(db.prepare(insert_eval_sql())),
      insert_event(db.prepare("INSERT OR IGNORE INTO events (run, seq, time, topic, kind, iteration, body) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?)")),
      insert_memory(db.prepare("INSERT OR IGNORE INTO memory (run, seq, rank, iteration, time, allocated, peak, "
                               "reserved, by_category) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")),
      run_started(db.prepare("UPDATE runs SET status = 'running', reason = '', finished = NULL, "
                             "created = min(coalesce(created, ?2), ?2), config = ?3, topology = ?4, hosts = ?5, "
                             "derived = ?6, iteration = max(iteration, ?7) WHERE id = ?1")),
      run_ended(db.prepare("UPDATE runs SET status = ?2, reason = ?3, finished = ?4, "
                           "iteration = max(iteration, ?5) WHERE id = ?1")),
      run_iteration(db.prepare("UPDATE runs SET iteration = ?2 WHERE id = ?1 AND iteration < ?2")),
      get_block_iters(db.prepare("SELECT block_iters, json_extract(config, '$.log_interval') FROM runs WHERE id = ?")),
      set_block_iters(db.prepare("UPDATE runs SET block_iters = ? WHERE id = ?")),
      block_aggregates(db.prepare(block_aggregates_sql())),
      upsert_block(db.prepare("INSERT OR REPLACE INTO step_blocks (run, metric, block, n, y_min, y_max, y_sum, "
                              "x_min, x_max) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")),
      delete_block(db.prepare("DELETE FROM step_blocks WHERE run = ? AND metric = ? AND block = ?")),
      insert_sample(db.prepare(kInsertSampleSql)) {}

Store::Store(const fs::path& file) : db_(file) {
    migrate(db_, kSchemaVersion, [this](int version) {
        if (version == 4) move_sample_events(db_);
    });
    st_ = std::make_unique<Statements>(db_);
    rebuild_missing_blocks();
}

Store::~Store() = default;

Store::Transaction::Transaction(Store& store) : store_(store) {
    if (store_.depth_++ == 0) store_.db_.exec("BEGIN IMMEDIATE");
}

Store::Transaction::~Transaction() {
    if (done_) return;
    if (--store_.depth_ == 0) {
        store_.dirty_.clear();
        store_.run_ids_.clear();  // rows created in this transaction are gone
        store_.block_iters_.clear();
        try {
            store_.db_.exec("ROLLBACK");
        } catch (const Error&) {
        }
    }
}

void Store::Transaction::commit() {
    if (done_) return;
    done_ = true;
    if (--store_.depth_ > 0) return;
    try {
        store_.refresh_blocks();
        store_.db_.exec("COMMIT");
    } catch (...) {
        store_.dirty_.clear();
        store_.run_ids_.clear();
        store_.block_iters_.clear();
        store_.db_.exec("ROLLBACK");
        throw;
    }
}

int64_t Store::run_row(const std::string& uid, bool create) {
    if (const auto it = run_ids_.find(uid); it != run_ids_.end()) return it->second;
    auto& s = st_->find_run;
    s.bind(1, uid);
    int64_t id = -1;
    if (s.step()) id = s.int64(0);
    s.reset();
    if (id < 0 && create) {
        // The run directory's name without the random suffix: "20250101-120000-gpt-1a2b3c4d" -> "...-gpt".
        std::string name = uid;
        if (const auto dash = name.rfind('-'); dash != std::string::npos && name.size() - dash == 9) name.resize(dash);
        st_->insert_run.bind(1, uid).bind(2, name).run();
        id = db_.last_insert_rowid();
    }
    if (id >= 0) run_ids_[uid] = id;
    return id;
}

int64_t Store::run_row_or_throw(const std::string& uid) {
    const int64_t id = run_row(uid, false);
    if (id < 0) throw Error("store " + file() + ": no run '" + uid + "'");
    return id;
}

int64_t Store::next_seq(const std::string& uid) {
    const int64_t id = run_row(uid, false);
    if (id < 0) return 0;
    Statement s = db_.prepare("SELECT next_seq FROM runs WHERE id = ?");
    s.bind(1, id);
    return s.step() ? s.int64(0) : 0;
}

void Store::set_name(const std::string& uid, const std::string& name) {
    db_.prepare("UPDATE runs SET name = ? WHERE id = ?").bind(1, name).bind(2, run_row_or_throw(uid)).run();
}

void Store::set_notes(const std::string& uid, const std::string& notes) {
    db_.prepare("UPDATE runs SET notes = ? WHERE id = ?").bind(1, notes).bind(2, run_row_or_throw(uid)).run();
}

void Store::add_tag(const std::string& uid, const std::string& tag) {
    if (tag.empty()) throw Error("store " + file() + ": a tag cannot be empty");
    db_.prepare("INSERT OR IGNORE INTO run_tags (run, tag) VALUES (?, ?)")
        .bind(1, run_row_or_throw(uid))
        .bind(2, tag)
        .run();
}

void Store::remove_tag(const std::string& uid, const std::string& tag) {
    db_.prepare("DELETE FROM run_tags WHERE run = ? AND tag = ?").bind(1, run_row_or_throw(uid)).bind(2, tag).run();
}

void Store::delete_run(const std::string& uid) {
    const int64_t id = run_row_or_throw(uid);
    db_.prepare("DELETE FROM runs WHERE id = ?").bind(1, id).run();
    run_ids_.erase(uid);
    block_iters_.erase(id);
}

}  // namespace mwb::store
