// The store's read side for the app and mwb-record: run lists, runs, evaluations, events, memory,
// configuration differences.
#include "mwb/store/error.h"
#include "mwb/store/schema.h"
#include "mwb/store/store.h"

#include <algorithm>
#include <sstream>

namespace mwb::store {

namespace {

using nlohmann::json;

json parse_or_null(const std::string& text) {
    if (text.empty()) return nullptr;
    auto j = json::parse(text, nullptr, false);
    return j.is_discarded() ? json(nullptr) : j;
}

/// LIKE pattern matching `text` anywhere, with % and _ escaped.
std::string like_pattern(const std::string& text) {
    std::string p = "%";
    for (char c : text) {
        if (c == '%' || c == '_' || c == '\\') p += '\\';
        p += c;
    }
    return p + "%";
}

/// {"a": {"b": 1}} -> {"prefix" + "a.b": 1}; arrays are leaves.
void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
    if (j.is_object()) {
        for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    } else if (!prefix.empty()) {
        out[prefix] = j;
    }
}

constexpr const char* kSummaryColumns =
    "r.uid, r.name, r.created, r.finished, r.status, r.reason, r.iteration, json_extract(r.config, '$.train_iters'), "
    "(SELECT lm_loss FROM steps s WHERE s.run = r.id AND s.lm_loss IS NOT NULL ORDER BY s.iteration DESC, s.seq DESC "
    "LIMIT 1), (SELECT group_concat(tag, char(10)) FROM (SELECT tag FROM run_tags t WHERE t.run = r.id ORDER BY tag)), "
    "r.notes, r.next_seq";

void read_summary(const Statement& s, RunSummary& r) {
    r.uid = s.text(0);
    r.name = s.text(1);
    r.created = s.optional_real(2);
    r.finished = s.optional_real(3);
    r.status = s.text(4);
    r.reason = s.text(5);
    r.iteration = s.int64(6);
    r.train_iters = s.optional_int64(7);
    r.last_loss = s.optional_real(8);
    std::istringstream tags(s.text(9));
    for (std::string t; std::getline(tags, t);)
        if (!t.empty()) r.tags.push_back(t);
    r.notes = s.text(10);
    r.next_seq = s.int64(11);
}

}  // namespace

std::vector<RunSummary> Store::runs(const RunFilter& f) {
    std::string sql = std::string("SELECT ") + kSummaryColumns + " FROM runs r WHERE 1";
    if (!f.text.empty())
        sql += " AND (r.uid LIKE ?1 ESCAPE '\\' OR r.name LIKE ?1 ESCAPE '\\' OR r.notes LIKE ?1 ESCAPE '\\')";
    if (!f.tag.empty()) sql += " AND EXISTS (SELECT 1 FROM run_tags t WHERE t.run = r.id AND t.tag = ?2)";
    if (f.created_after) sql += " AND r.created >= ?3";
    if (f.created_before) sql += " AND r.created <= ?4";
    if (!f.statuses.empty()) {
        sql += " AND r.status IN (";
        for (std::size_t i = 0; i < f.statuses.size(); ++i) sql += (i ? ", ?" : "?") + std::to_string(10 + i);
        sql += ")";
    }
    sql += " ORDER BY r.created DESC NULLS LAST, r.id DESC LIMIT ?5 OFFSET ?6";
    Statement s = db_.prepare(sql);
    if (!f.text.empty()) s.bind(1, like_pattern(f.text));
    if (!f.tag.empty()) s.bind(2, f.tag);
    if (f.created_after) s.bind(3, *f.created_after);
    if (f.created_before) s.bind(4, *f.created_before);
    for (std::size_t i = 0; i < f.statuses.size(); ++i) s.bind(static_cast<int>(10 + i), f.statuses[i]);
    s.bind(5, static_cast<int64_t>(std::max(0, f.limit))).bind(6, static_cast<int64_t>(std::max(0, f.offset)));
    std::vector<RunSummary> out;
    while (s.step()) read_summary(s, out.emplace_back());
    return out;
}

std::optional<RunRecord> Store::run(const std::string& uid) {
    Statement s = db_.prepare(std::string("SELECT ") + kSummaryColumns +
                              ", r.config, r.topology, r.hosts, r.derived FROM runs r WHERE r.uid = ?");
    s.bind(1, uid);
    if (!s.step()) return std::nullopt;
    RunRecord r;
    read_summary(s, r);
    r.config = parse_or_null(s.text(12));
    r.topology = parse_or_null(s.text(13));
    r.hosts = parse_or_null(s.text(14));
    r.derived = parse_or_null(s.text(15));
    return r;
}

std::vector<WallClockPoint> Store::wall_clock(const std::string& uid, int anchors) {
    const int64_t run = run_row_or_throw(uid);
    Statement created = db_.prepare("SELECT created FROM runs WHERE id = ?");
    created.bind(1, run);
    const std::optional<double> origin = created.step() ? created.optional_real(0) : std::nullopt;
    Statement range = db_.prepare("SELECT min(iteration), max(iteration) FROM steps WHERE run = ? AND time IS NOT NULL");
    range.bind(1, run);
    std::vector<WallClockPoint> out;
    if (!range.step() || range.is_null(0)) return out;
    const int64_t lo = range.int64(0), hi = range.int64(1);
    // steps is clustered on (run, iteration, seq): each anchor is one seek
    Statement at = db_.prepare(
        "SELECT iteration, time FROM steps WHERE run = ? AND iteration >= ? AND time IS NOT NULL "
        "ORDER BY iteration, seq LIMIT 1");
    const int64_t n = std::max(2, anchors);
    for (int64_t k = 0; k < n; ++k) {
        at.bind(1, run).bind(2, lo + (hi - lo) * k / (n - 1));
        if (at.step() && (out.empty() || out.back().iteration != at.int64(0))) out.push_back({at.int64(0), at.real(1)});
        at.reset();
    }
    const double start = origin.value_or(out.front().seconds);
    for (auto& p : out) p.seconds -= start;
    return out;
}

std::vector<EvalPoint> Store::evals(const std::string& uid) {
    // the columns of eval_columns(), in its order, between the row's key and `extra`
    std::string columns;
    for (const ipc::EvalField* f : eval_columns()) columns += std::string(f->column) + ", ";
    Statement s =
        db_.prepare("SELECT seq, iteration, time, " + columns + "extra FROM evals WHERE run = ? ORDER BY iteration, seq");
    s.bind(1, run_row_or_throw(uid));
    const auto fields = eval_columns();
    const int extra_column = 3 + static_cast<int>(fields.size());
    std::vector<EvalPoint> out;
    while (s.step()) {
        EvalPoint e{s.int64(0), s.int64(1), s.optional_real(2)};
        if (const json extra = parse_or_null(s.text(extra_column)); extra.is_object()) e.body = extra;
        e.body["iteration"] = e.iteration;
        for (std::size_t i = 0; i < fields.size(); ++i) {
            const int c = 3 + static_cast<int>(i);
            if (s.is_null(c)) continue;
            const std::string key(fields[i]->key);
            if (std::holds_alternative<int64_t ipc::EvalRecord::*>(fields[i]->member))
                e.body[key] = s.int64(c);
            else if (std::holds_alternative<double ipc::EvalRecord::*>(fields[i]->member))
                e.body[key] = s.real(c);
            else
                e.body[key] = s.text(c);
        }
        out.push_back(std::move(e));
    }
    return out;
}

std::vector<EventRecord> Store::events(const std::string& uid, const std::string& topic) {
    Statement s = db_.prepare(std::string("SELECT seq, time, topic, coalesce(kind, ''), iteration, body FROM events "
                                          "WHERE run = ?1") +
                              (topic.empty() ? "" : " AND topic = ?2") + " ORDER BY seq");
    s.bind(1, run_row_or_throw(uid));
    if (!topic.empty()) s.bind(2, topic);
    std::vector<EventRecord> out;
    while (s.step())
        out.push_back(
            {s.int64(0), s.optional_real(1), s.text(2), s.text(3), s.optional_int64(4), parse_or_null(s.text(5))});
    return out;
}

std::vector<MemorySample> Store::memory(const std::string& uid, std::optional<int64_t> rank) {
    Statement s = db_.prepare(std::string("SELECT seq, rank, iteration, allocated, peak, reserved, time, by_category "
                                          "FROM memory WHERE run = ?1") +
                              (rank ? " AND rank = ?2" : "") + " ORDER BY seq, rank");
    s.bind(1, run_row_or_throw(uid));
    if (rank) s.bind(2, *rank);
    std::vector<MemorySample> out;
    while (s.step())
        out.push_back({s.int64(0), s.int64(1), s.optional_int64(2), s.optional_int64(3), s.optional_int64(4),
                       s.optional_int64(5), s.optional_real(6), parse_or_null(s.text(7))});
    return out;
}

std::vector<ConfigDifference> Store::config_diff(const std::vector<std::string>& uids) {
    std::vector<std::map<std::string, json>> flat(uids.size());
    std::set<std::string> keys;
    for (std::size_t i = 0; i < uids.size(); ++i) {
        const auto r = run(uids[i]);
        if (!r) throw Error("store " + file() + ": no run '" + uids[i] + "'");
        flatten(r->config, "", flat[i]);
        flatten(r->topology, "topology", flat[i]);
        for (const auto& [k, v] : flat[i]) keys.insert(k);
    }
    std::vector<ConfigDifference> out;
    for (const auto& key : keys) {
        ConfigDifference d{key, {}};
        for (const auto& f : flat) {
            const auto it = f.find(key);
            d.values.push_back(it == f.end() ? json(nullptr) : it->second);
        }
        if (std::any_of(d.values.begin(), d.values.end(), [&](const json& v) { return v != d.values.front(); }))
            out.push_back(std::move(d));
    }
    return out;
}

std::map<std::string, int64_t> Store::counts(const std::string& uid) {
    const int64_t id = run_row_or_throw(uid);
    std::map<std::string, int64_t> out;
    for (const char* table : {"messages", "steps", "evals", "events", "memory", "samples"}) {
        Statement s = db_.prepare(std::string("SELECT count(*) FROM ") + table + " WHERE run = ?");
        s.bind(1, id);
        out[table] = s.step() ? s.int64(0) : 0;
    }
    return out;
}

}  // namespace mwb::store
