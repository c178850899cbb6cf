#pragma once
// Store files as users have them: a real SQLite file made from a frozen dump in tests/store/fixtures.
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mwb::test {

/// Runs the SQL file `sql` (sqlite3 .dump output, with its user_version) into a new file `file`.
inline std::filesystem::path store_from_sql(const std::filesystem::path& sql_file, const std::filesystem::path& file) {
    std::ifstream in(sql_file);
    std::stringstream sql;
    sql << in.rdbuf();
    sqlite3* db = nullptr;
    sqlite3_open(file.c_str(), &db);
    char* err = nullptr;
    const int rc = sqlite3_exec(db, sql.str().c_str(), nullptr, nullptr, &err);
    const std::string why = err ? err : "";
    sqlite3_free(err);
    sqlite3_close(db);
    if (rc != SQLITE_OK) throw std::runtime_error("fixture " + sql_file.filename().string() + ": " + why);
    return file;
}

#ifdef MWB_STORE_FIXTURES
/// Runs tests/store/fixtures/`dump` into a new file `file`.
inline std::filesystem::path store_from_dump(const std::string& dump, const std::filesystem::path& file) {
    return store_from_sql(std::filesystem::path(MWB_STORE_FIXTURES) / dump, file);
}
#endif

}  // namespace mwb::test
