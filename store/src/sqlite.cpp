#include "mwb/store/sqlite.h"

#include "mwb/store/error.h"

#include <sqlite3.h>

#include <cmath>
#include <utility>

namespace mwb::store {

namespace {

std::string message(sqlite3* db, int rc) {
    std::string m = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    if (rc == SQLITE_NOTADB) m += " (the file is not an SQLite database)";
    return m;
}

}  // namespace

Statement::Statement(sqlite3* db, std::string_view sql, const std::string& file) : db_(db), file_(file) {
    const int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
    if (rc != SQLITE_OK)
        throw Error("store " + file_ + ": cannot prepare \"" + std::string(sql.substr(0, 80)) +
                    "\": " + message(db, rc));
}

Statement::~Statement() {
    sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)), file_(std::move(other.file_)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
    if (this != &other) {
        sqlite3_finalize(stmt_);
        db_ = other.db_;
        stmt_ = std::exchange(other.stmt_, nullptr);
        file_ = std::move(other.file_);
    }
    return *this;
}

void Statement::check(int rc, const char* what) const {
    if (rc != SQLITE_OK) throw Error("store " + file_ + ": " + what + ": " + message(db_, rc));
}

Statement& Statement::bind(int index, int64_t v) {
    check(sqlite3_bind_int64(stmt_, index, v), "bind");
    return *this;
}

Statement& Statement::bind(int index, double v) {
    check(std::isfinite(v) ? sqlite3_bind_double(stmt_, index, v) : sqlite3_bind_null(stmt_, index), "bind");
    return *this;
}

Statement& Statement::bind(int index, std::string_view v) {
    check(sqlite3_bind_text64(stmt_, index, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8), "bind");
    return *this;
}

Statement& Statement::bind_null(int index) {
    check(sqlite3_bind_null(stmt_, index), "bind");
    return *this;
}

bool Statement::step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    const std::string sql = sqlite3_sql(stmt_) ? sqlite3_sql(stmt_) : "";
    throw Error("store " + file_ + ": \"" + sql.substr(0, 80) + "\": " + message(db_, rc));
}

int Statement::run() {
    while (step()) {
    }
    const int n = sqlite3_changes(db_);
    reset();
    return n;
}

void Statement::reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
}

bool Statement::is_null(int c) const {
    return sqlite3_column_type(stmt_, c) == SQLITE_NULL;
}
int64_t Statement::int64(int c) const {
    return sqlite3_column_int64(stmt_, c);
}
double Statement::real(int c) const {
    return sqlite3_column_double(stmt_, c);
}

std::string Statement::text(int c) const {
    const auto* p = sqlite3_column_text(stmt_, c);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(stmt_, c)))
             : std::string();
}

std::optional<double> Statement::optional_real(int c) const {
    if (is_null(c)) return std::nullopt;
    return real(c);
}

std::optional<int64_t> Statement::optional_int64(int c) const {
    if (is_null(c)) return std::nullopt;
    return int64(c);
}

Database::Database(const std::filesystem::path& file) : file_(file.string()) {
    std::error_code ec;
    if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
    // NOMUTEX: a connection is used by one thread at a time (each Store has its own), so SQLite's own
    // per-call locking is pure overhead.
    const int rc =
        sqlite3_open_v2(file_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
        const std::string why = message(db_, rc);
        sqlite3_close(db_);
        db_ = nullptr;
        throw Error("store " + file_ + ": cannot open: " + why);
    }
    sqlite3_extended_result_codes(db_, 0);
    sqlite3_busy_timeout(db_, 10000);  // a recorder and the app share the file
    try {
        exec("PRAGMA foreign_keys = ON");
        if (user_version() == 0 && scalar_int("SELECT count(*) FROM sqlite_schema") == 0)
            exec("PRAGMA page_size = 8192");  // only takes effect on a new file
        exec("PRAGMA journal_mode = WAL");
        exec("PRAGMA synchronous = NORMAL");  // durable at checkpoints; a crash loses at most the last commits
        // Reads through a memory map (no copy per page) and a 32 MiB page cache: series queries on long
        // runs touch thousands of pages.
        exec("PRAGMA mmap_size = 1073741824");
        exec("PRAGMA cache_size = -32768");
    } catch (...) {
        sqlite3_close(db_);
        db_ = nullptr;
        throw;
    }
}

Database::~Database() {
    sqlite3_close(db_);
}

void Database::exec(std::string_view sql) {
    char* err = nullptr;
    const std::string s(sql);
    const int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
        std::string why = err ? err : message(db_, rc);
        if (rc == SQLITE_NOTADB) why += " (the file is not an SQLite database)";
        sqlite3_free(err);
        throw Error("store " + file_ + ": \"" + s.substr(0, 80) + "\": " + why);
    }
}

Statement Database::prepare(std::string_view sql) const {
    return Statement(db_, sql, file_);
}

int64_t Database::scalar_int(std::string_view sql) {
    Statement s = prepare(sql);
    return s.step() ? s.int64(0) : 0;
}

int Database::user_version() {
    return static_cast<int>(scalar_int("PRAGMA user_version"));
}
int64_t Database::last_insert_rowid() const {
    return sqlite3_last_insert_rowid(db_);
}
int Database::changes() const {
    return sqlite3_changes(db_);
}

}  // namespace mwb::store
