// Store::ingest: one wire message into its table(s), idempotent on (run, seq).
#include "mwb/store/error.h"
#include "mwb/store/sample.h"
#include "mwb/store/schema.h"
#include "mwb/store/store.h"
#include "statements.h"

#include "mwb/ipc/metrics.h"

#include <algorithm>
#include <cmath>

namespace mwb::store {

namespace {

using nlohmann::json;

bool is_envelope(const std::string& key) {
    return key == "schema" || key == "topic" || key == "run_id" || key == "seq" || key == "time";
}

std::optional<std::string> text_of(const json& o, const char* key) {
    if (!o.is_object() || !o.contains(key) || o[key].is_null()) return std::nullopt;
    return o[key].dump();
}

/// The fields of `body` that have no column (envelope and `known` left out), as JSON text or NULL.
std::optional<std::string> extra(const json& body, const std::vector<std::string_view>& known) {
    json e = json::object();
    for (const auto& [k, v] : body.items()) {
        if (is_envelope(k)) continue;
        bool skip = false;
        for (std::string_view kk : known) skip = skip || k == kk;
        if (!skip) e[k] = v;
    }
    if (e.empty()) return std::nullopt;
    return e.dump();
}

/// A step's time in `phase` (seconds per iteration): the slowest rank's, from ranks[].time.
std::optional<double> slowest_rank(const json& step, const char* phase) {
    if (!step.contains("ranks") || !step["ranks"].is_array()) return ipc::get_number(step, phase);
    std::optional<double> worst;
    for (const json& r : step["ranks"])
        if (const auto v = r.is_object() && r.contains("time") ? ipc::get_number(r["time"], phase) : std::nullopt)
            worst = std::max(worst.value_or(*v), *v);
    return worst;
}

/// The value of a metric-table row with a steps column in a step record.
std::optional<double> column_value(const json& step, const ipc::Metric& m) {
    const std::string key(m.key);
    return m.source == ipc::MetricSource::SlowestRank ? slowest_rank(step, key.c_str())
                                                      : ipc::get_number(step, key.c_str());
}

/// An eval field's value in `body`, by the member's type (absent or of another type: NULL).
void bind_field(Statement& q, int col, const json& body, const ipc::EvalField& f) {
    const std::string key(f.key);
    if (std::holds_alternative<int64_t ipc::EvalRecord::*>(f.member))
        q.bind(col, ipc::get_integral(body, key.c_str()));
    else if (std::holds_alternative<double ipc::EvalRecord::*>(f.member))
        q.bind(col, ipc::get_number(body, key.c_str()));
    else
        q.bind(col, ipc::get_string(body, key.c_str()));
}

}  // namespace

bool Store::ingest(const ipc::Message& m) {
    if (m.is_heartbeat()) return false;  // not part of the series
    bool inserted = false;
    if (depth_ > 0) {
        ingest_unlocked(m, inserted);
        return inserted;
    }
    Transaction t(*this);
    ingest_unlocked(m, inserted);
    t.commit();
    return inserted;
}

void Store::ingest_unlocked(const ipc::Message& m, bool& inserted) {
    const int64_t run = run_row(m.run_id, true);
    auto& s = *st_;
    if (s.insert_message.bind(1, run).bind(2, m.seq).bind(3, m.topic).run() == 0) {
        inserted = false;  // a replay
        return;
    }
    inserted = true;
    // next_seq: every seq below it is stored. Walk over what arrived out of order before.
    int64_t next = m.seq + 1;
    while (true) {
        s.message_exists.bind(1, run).bind(2, next);
        const bool there = s.message_exists.step();
        s.message_exists.reset();
        if (!there) break;
        ++next;
    }
    s.set_next_seq.bind(1, run).bind(2, m.seq).bind(3, next).run();

    const json& b = m.body;
    const auto iteration = ipc::get_integral(b, "iteration");
    if (m.topic == "step" && iteration) {
        auto& q = s.insert_step;
        q.bind(1, run).bind(2, m.seq).bind(3, *iteration).bind(4, m.time);
        std::vector<std::string_view> known = {"iteration"};
        for (std::string_view metric : step_metrics()) known.push_back(metric);
        int col = 5;
        static const std::vector<const ipc::Metric*> columns = [] {
            std::vector<const ipc::Metric*> rows;
            for (std::string_view metric : step_metrics()) rows.push_back(ipc::find_metric(metric));
            return rows;
        }();
        for (const ipc::Metric* metric : columns) q.bind(col++, column_value(b, *metric));
        q.run();
        // mem (rank 0), ranks (per-rank communication and time), anything new
        if (const auto details = extra(b, known))
            s.insert_step_details.bind(1, run).bind(2, m.seq).bind(3, *details).run();
        s.run_iteration.bind(1, run).bind(2, *iteration).run();
        dirty_.insert({run, *iteration / block_iters(run)});
        return;
    }
    if (m.topic == "eval" && iteration) {
        auto& q = s.insert_eval;
        q.bind(1, run).bind(2, m.seq).bind(3, *iteration).bind(4, m.time);
        std::vector<std::string_view> known = {"iteration"};
        int col = 5;
        for (const ipc::EvalField* f : eval_columns()) {
            known.push_back(f->key);
            bind_field(q, col++, b, *f);
        }
        q.bind(col, extra(b, known)).run();
        return;
    }
    if (m.topic == "memory" && b.contains("ranks") && b["ranks"].is_array()) {
        // Gathered to rank 0: one sample per rank.
        for (const json& r : b["ranks"]) {
            const auto rank = ipc::get_integral(r, "rank");
            if (!rank) continue;
            s.insert_memory.bind(1, run).bind(2, m.seq).bind(3, *rank).bind(4, iteration).bind(5, m.time);
            s.insert_memory.bind(6, ipc::get_integral(r, "allocated")).bind(7, ipc::get_integral(r, "peak"));
            s.insert_memory.bind(8, ipc::get_integral(r, "reserved")).bind(9, text_of(r, "by_category")).run();
        }
        return;
    }
    std::optional<std::string> rejected;  // why a sample was refused: kept whole in events instead
    if (m.topic == "sample") {
        std::string why;
        if (const auto sample = parse_sample(b, &why)) {
            bind_sample(s.insert_sample, run, *sample);
            s.insert_sample.run();
            return;
        }
        rejected = why;
    }
    if (m.topic == "run.start") {
        s.run_started.bind(1, run).bind(2, m.time).bind(3, text_of(b, "config")).bind(4, text_of(b, "topology"));
        s.run_started.bind(5, text_of(b, "hosts")).bind(6, text_of(b, "derived")).bind(7, iteration.value_or(0)).run();
        block_iters(run);  // fix the block width from log_interval before the first step
    } else if (m.topic == "run.end") {
        const std::string status = ipc::get_string(b, "status").value_or("unknown");
        const std::string reason = ipc::get_string(b, "reason").value_or("");
        s.run_ended.bind(1, run).bind(2, status).bind(3, reason).bind(4, m.time).bind(5, iteration.value_or(0)).run();
    }
    // Everything else, known or not, is kept whole.
    const std::optional<std::string> kind = rejected ? rejected : ipc::get_string(b, "kind");
    s.insert_event.bind(1, run).bind(2, m.seq).bind(3, m.time).bind(4, m.topic).bind(5, kind).bind(6, iteration);
    s.insert_event.bind(7, m.raw.empty() ? b.dump() : m.raw).run();
}

}  // namespace mwb::store
