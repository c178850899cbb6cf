// Files written before the typed telemetry schema still load: a real PP2 run's run directory and the
// store mwb-record made of it (tests/fixtures/telemetry_run_pp2, frozen, written by the build before
// the schema change) give, through today's code, what that build gave: the frozen store opens and
// ingests nothing new; a fresh ingest of the run directory fills every step column the records carry;
// the app's history loader (from the frozen store and from the fresh one) and the live digest yield
// the series, picker metrics, events, memory and last step recorded in expected.json, which the old
// build wrote (`test_telemetry_fixture --write-expected` rewrites it: only for a deliberate change).
#include "test_monitor_fixtures.h"

#include "app/live/digest.h"
#include "app/live/history_loader.h"
#include "mwb/ipc/metrics.h"
#include "mwb/store/schema.h"
#include "mwb/store/store.h"
#include "store/store_fixtures.h"
#include "support/fixtures.h"
#include "support/suite.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

namespace test_telemetry_fixture {

using namespace mwb;
using namespace mwb::app;
namespace fs = std::filesystem;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
    if (!ok) {
        std::fprintf(stderr, "FAIL: %s\n", what.c_str());
        ++failures;
    }
}

fs::path fixture_dir() {
    return test::source_dir() / "tests" / "fixtures" / "telemetry_run_pp2";
}

nlohmann::json points_json(const std::vector<PlotPoint>& pts) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& p : pts) a.push_back({p.x, p.y});
    return a;
}

nlohmann::json number_or_null(double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

/// What a view would draw from an Update, as JSON (series by their index in SeriesId).
nlohmann::json update_json(const Update& u) {
    nlohmann::json j;
    j["run_id"] = u.run_id;
    for (int s = 0; s < kSeriesCount; ++s)
        j["points"][std::to_string(s)] = points_json(u.points[static_cast<std::size_t>(s)]);
    j["metrics"] = nlohmann::json::object();
    for (const auto& [k, pts] : u.metrics) j["metrics"][k] = points_json(pts);
    j["events"] = nlohmann::json::array();
    for (const auto& e : u.events)
        j["events"].push_back({{"seq", e.seq},
                               {"iteration", e.iteration},
                               {"kind", e.kind},
                               {"detail", e.detail},
                               {"severity", e.severity}});
    if (u.last_step) {
        const LastStep& s = *u.last_step;
        j["last_step"] = {{"iteration", s.iteration},
                          {"consumed_tokens", s.consumed_tokens},
                          {"loss", number_or_null(s.loss)},
                          {"lr", number_or_null(s.lr)},
                          {"grad_norm", number_or_null(s.grad_norm)},
                          {"loss_scale", number_or_null(s.loss_scale)},
                          {"iteration_time_s", number_or_null(s.iteration_time_s)},
                          {"tokens_per_sec", number_or_null(s.tokens_per_sec)},
                          {"tflops", number_or_null(s.tflops)},
                          {"mfu", number_or_null(s.mfu)}};
    }
    if (u.last_eval) j["last_eval"] = *u.last_eval;
    if (u.memory) {
        j["memory_iteration"] = u.memory_iteration;
        for (const auto& r : *u.memory)
            j["memory"].push_back({{"rank", r.rank},
                                   {"allocated", r.allocated},
                                   {"peak", r.peak},
                                   {"reserved", r.reserved},
                                   {"current", r.current},
                                   {"peak_by_category", r.peak_by_category}});
    }
    if (u.timings)
        for (const auto& t : *u.timings)
            j["timings"].push_back({{"rank", t.rank},
                                    {"pp", t.pp},
                                    {"compute", t.compute},
                                    {"communication", t.communication},
                                    {"bubble", t.bubble},
                                    {"total", t.total}});
    if (u.end) j["end"] = {{"status", u.end->status}, {"reason", u.end->reason}, {"iteration", u.end->iteration}};
    if (u.start) j["start"] = {{"iteration", u.start->iteration}, {"config", u.start->config}};
    return j;
}

/// Equal as JSON, numbers within a relative 1e-12 (the same arithmetic may be reordered).
bool same(const nlohmann::json& a, const nlohmann::json& b, const std::string& where) {
    if (a.is_number() && b.is_number()) {
        const double x = a.get<double>(), y = b.get<double>();
        if (std::abs(x - y) <= 1e-12 * std::max(std::abs(x), std::abs(y))) return true;
        std::fprintf(stderr, "  %s: %.17g vs %.17g\n", where.c_str(), x, y);
        return false;
    }
    if (a.type() != b.type()) {
        std::fprintf(stderr, "  %s: %s vs %s\n", where.c_str(), a.dump().substr(0, 200).c_str(),
                     b.dump().substr(0, 200).c_str());
        return false;
    }
    if (a.is_object()) {
        bool ok = a.size() == b.size();
        if (!ok) std::fprintf(stderr, "  %s: %zu vs %zu members\n", where.c_str(), a.size(), b.size());
        for (const auto& [k, v] : a.items()) {
            if (!b.contains(k)) {
                std::fprintf(stderr, "  %s.%s missing\n", where.c_str(), k.c_str());
                ok = false;
            } else {
                ok = same(v, b[k], where + "." + k) && ok;
            }
        }
        return ok;
    }
    if (a.is_array()) {
        if (a.size() != b.size()) {
            std::fprintf(stderr, "  %s: %zu vs %zu elements\n", where.c_str(), a.size(), b.size());
            return false;
        }
        bool ok = true;
        for (std::size_t i = 0; i < a.size(); ++i) ok = same(a[i], b[i], where + "[" + std::to_string(i) + "]") && ok;
        return ok;
    }
    if (a == b) return true;
    std::fprintf(stderr, "  %s: %s vs %s\n", where.c_str(), a.dump().c_str(), b.dump().c_str());
    return false;
}

}  // namespace

int run_suite(int argc, char** argv) {
    const bool write_expected = argc > 1 && std::string(argv[1]) == "--write-expected";
    const test::TempDir t;
    const auto messages = test::run_dir_messages(fixture_dir() / "run");
    check(messages.size() == 15,
          "the run directory holds its 15 messages (got " + std::to_string(messages.size()) + ")");
    const std::string uid = messages.empty() ? "" : messages.front().run_id;

    // the frozen store opens (no migration due) and already holds every message: ingest adds nothing
    const fs::path frozen = test::store_from_sql(fixture_dir() / "store_v4.sql", t.path() / "frozen.sqlite");
    nlohmann::json from_frozen;
    {
        store::Store st(frozen);
        check(st.next_seq(uid) == 15, "the frozen store's next_seq is 15");
        int64_t next = 0;
        from_frozen = update_json(load_run_history(st, uid, next));
        check(next == 15, "history's next_seq from the frozen store");
        bool any_new = false;
        for (const auto& m : messages) any_new = st.ingest(m) || any_new;
        check(!any_new, "the frozen store already holds every message of the run");
    }

    // a fresh ingest of the run directory: every step column the records carry is filled
    const fs::path fresh = t.path() / "fresh.sqlite";
    nlohmann::json from_fresh;
    {
        store::Store st(fresh);
        for (const auto& m : messages) st.ingest(m);
        int64_t next = 0;
        from_fresh = update_json(load_run_history(st, uid, next));
        const auto steps = test::of_topic(messages, "step");
        check(steps.size() == 4, "four step records");
        for (std::string_view metric : store::step_metrics()) {
            const auto s = st.series(uid, std::string(metric), store::SeriesQuery{});
            check(s.buckets.size() == steps.size(), "the store's column " + std::string(metric) + " has every step (" +
                                                        std::to_string(s.buckets.size()) + ")");
        }
        check(st.evals(uid).size() == 4, "four evaluations stored");
        check(st.memory(uid).size() == 8, "eight memory samples (4 records x 2 ranks)");
    }

    // the eval rows of a fresh ingest are the frozen store's, column by column (extra included)
    {
        const auto eval_rows = [](const fs::path& file) {
            sqlite3* db = nullptr;
            sqlite3_open(file.c_str(), &db);
            std::vector<std::string> rows;
            sqlite3_stmt* st = nullptr;
            sqlite3_prepare_v2(db, "SELECT * FROM evals ORDER BY seq", -1, &st, nullptr);
            while (sqlite3_step(st) == SQLITE_ROW) {
                std::string row;
                for (int c = 1; c < sqlite3_column_count(st); ++c) {  // column 0 is the run's row id
                    const auto* v = sqlite3_column_text(st, c);
                    row += std::string(sqlite3_column_name(st, c)) + "=" +
                           (v ? reinterpret_cast<const char*>(v) : "NULL") + ";";
                }
                rows.push_back(row);
            }
            sqlite3_finalize(st);
            sqlite3_close(db);
            return rows;
        };
        const auto before = eval_rows(frozen), now = eval_rows(fresh);
        check(before.size() == 4 && before == now, "a fresh ingest stores the frozen store's eval rows");
    }

    // every column the migrations made for metrics is a row of the metric table, and every row with a
    // column has one (steps: everything but the keys; evals: the columns of Eval rows)
    {
        sqlite3* db = nullptr;
        sqlite3_open(fresh.c_str(), &db);
        const auto columns = [&](const char* table) {
            std::set<std::string> out;
            sqlite3_stmt* st = nullptr;
            sqlite3_prepare_v2(db, ("SELECT name FROM pragma_table_info('" + std::string(table) + "')").c_str(), -1,
                               &st, nullptr);
            while (sqlite3_step(st) == SQLITE_ROW)
                out.insert(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
            sqlite3_finalize(st);
            return out;
        };
        std::set<std::string> steps = columns("steps"), evals = columns("evals");
        sqlite3_close(db);
        for (const char* key : {"run", "seq", "iteration", "time"}) steps.erase(key);
        std::set<std::string> step_rows, eval_rows;
        for (const ipc::Metric& m : ipc::metrics())
            if (!m.column.empty())
                (m.source == ipc::MetricSource::Eval ? eval_rows : step_rows).insert(std::string(m.column));
        check(steps == step_rows, "the steps table's metric columns are the metric table's step columns");
        for (const auto& c : eval_rows) check(evals.count(c) > 0, "the evals table has the column " + c);
        // the evals table's value columns are the eval table's (ipc::eval_fields), and the metric
        // table's Eval rows name fields of it
        for (const char* key : {"run", "seq", "iteration", "time", "extra"}) evals.erase(key);
        std::set<std::string> eval_columns;
        for (const ipc::EvalField* f : store::eval_columns()) eval_columns.insert(std::string(f->column));
        check(evals == eval_columns, "the evals table's value columns are the eval fields' columns");
        for (const ipc::Metric& m : ipc::metrics())
            if (m.source == ipc::MetricSource::Eval)
                check(std::any_of(store::eval_columns().begin(), store::eval_columns().end(),
                                  [&](const ipc::EvalField* f) { return f->key == m.key && f->column == m.column; }),
                      "the eval field of metric " + std::string(m.name));
        for (std::string_view c : store::step_metrics())
            check(step_rows.count(std::string(c)) > 0, "step_metrics " + std::string(c));
    }

    // the live digest of the same messages
    Update live;
    for (const auto& m : messages) digest(live, m);
    const nlohmann::json from_live = update_json(live);

    const fs::path expected_file = fixture_dir() / "expected.json";
    if (write_expected) {
        std::ofstream(expected_file) << nlohmann::json{{"history", from_frozen}, {"live", from_live}}.dump(1) << "\n";
        std::printf("wrote %s\n", expected_file.c_str());
        return failures ? 1 : 0;
    }
    const nlohmann::json expected = test::load_fixture("telemetry_run_pp2/expected.json");
    check(same(from_frozen, expected["history"], "history(frozen)"), "history from the frozen store as before");
    check(same(from_fresh, expected["history"], "history(fresh)"), "history from a fresh ingest as before");
    check(same(from_live, expected["live"], "live"), "the live digest as before");
    if (failures)
        std::fprintf(stderr, "%d check(s) failed\n", failures);
    else
        std::printf("telemetry fixture: all checks passed\n");
    return failures ? 1 : 0;
}
MWB_TEST_SUITE_MAIN(test_telemetry_fixture, run_suite)
}  // namespace test_telemetry_fixture
