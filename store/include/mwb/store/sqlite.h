#pragma once
// A thin RAII layer over SQLite's C API: a connection and prepared statements whose errors name the
// store file. Used by Store and by tests that build older schema versions by hand.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace mwb::store {

class Statement {
public:
    Statement() = default;
    Statement(sqlite3* db, std::string_view sql, const std::string& file);
    ~Statement();
    Statement(Statement&& other) noexcept;
    Statement& operator=(Statement&& other) noexcept;

    Statement& bind(int index, int64_t v);
    Statement& bind(int index, int v) { return bind(index, static_cast<int64_t>(v)); }
    Statement& bind(int index, double v);  ///< NaN and infinities are stored as NULL
    Statement& bind(int index, std::string_view v);
    Statement& bind(int index, const char* v) { return bind(index, std::string_view(v)); }
    Statement& bind(int index, const std::string& v) { return bind(index, std::string_view(v)); }
    Statement& bind_null(int index);
    template <typename T>
    Statement& bind(int index, const std::optional<T>& v) {
        return v ? bind(index, *v) : bind_null(index);
    }

    /// Advances; true when a row is available.
    bool step();
    /// step() for statements without rows; returns the number of rows changed.
    int run();
    void reset();

    bool is_null(int column) const;
    int64_t int64(int column) const;
    double real(int column) const;
    std::string text(int column) const;
    std::optional<double> optional_real(int column) const;
    std::optional<int64_t> optional_int64(int column) const;

private:
    void check(int rc, const char* what) const;
    sqlite3* db_ = nullptr;
    sqlite3_stmt* stmt_ = nullptr;
    std::string file_;
};

class Database {
public:
    /// Opens (creating) `file` with a busy timeout, foreign keys on, WAL journal.
    explicit Database(const std::filesystem::path& file);
    ~Database();
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;

    void exec(std::string_view sql);
    Statement prepare(std::string_view sql) const;
    int64_t scalar_int(std::string_view sql);
    int user_version();
    int64_t last_insert_rowid() const;
    int changes() const;
    const std::string& file() const { return file_; }
    sqlite3* handle() const { return db_; }

private:
    sqlite3* db_ = nullptr;
    std::string file_;
};

}  // namespace mwb::store
