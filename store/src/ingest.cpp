// Store::ingest: one wire message into its table(s), idempotent on (run, seq).
#include "mwb/store/error.h"
#include "mwb/store/sample.h"
#include "mwb/store/schema.h"
#include "mwb/store/store.h"
#include "statements.h"

#include <algorithm>
#include <cmath>

namespace mwb::store {

namespace {

using nlohmann::json;

bool is_envelope(const std::string& key) {
    return key == "schema" || key == "topic" || key == "run_id" || key == "seq" || key == "time";
}

std::optional<double> number(const json& o, const char* key) {
    if (!o.is_object()) return std::nullopt;
    const auto it = o.find(key);
    if (it == o.end() || !it->is_number()) return std::nullopt;
    const double v = it->get<double>();
    return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::optional<int64_t> integer(const json& o, const char* key) {
    if (!o.is_object()) return std::nullopt;
    const auto it = o.find(key);
    if (it == o.end() || !it->is_number()) return std::nullopt;
    if (it->is_number_integer()) return it->get<int64_t>();
    const double v = it->get<double>();
    return std::isfinite(v) ? std::optional<int64_t>(static_cast<int64_t>(v)) : std::nullopt;
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

constexpr std::string_view kPhases[] = {"forward_s", "backward_s",      "gradient_reduce_s", "optimizer_s",
                                        "data_s",    "communication_s", "pipeline_bubble_s"};

bool is_phase(const std::string& name) {
    return std::find(std::begin(kPhases), std::end(kPhases), name) != std::end(kPhases);
}

/// A step's time in `phase` (seconds per iteration): the slowest rank's, from ranks[].time.
std::optional<double> slowest_rank(const json& step, const std::string& phase) {
    if (!step.contains("ranks") || !step["ranks"].is_array()) return number(step, phase.c_str());
    std::optional<double> worst;
    for (const json& r : step["ranks"])
        if (const auto v = r.is_object() && r.contains("time") ? number(r["time"], phase.c_str()) : std::nullopt)
            worst = std::max(worst.value_or(*v), *v);
    return worst;
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
    const auto iteration = integer(b, "iteration");
    if (m.topic == "step" && iteration) {
        auto& q = s.insert_step;
        q.bind(1, run).bind(2, m.seq).bind(3, *iteration).bind(4, m.time);
        std::vector<std::string_view> known = {"iteration"};
        for (std::string_view metric : step_metrics()) known.push_back(metric);
        int col = 5;
        for (std::string_view metric : step_metrics()) {
            const std::string name(metric);
            q.bind(col++, is_phase(name) ? slowest_rank(b, name) : number(b, name.c_str()));
        }
        q.run();
        // mem (rank 0), ranks (per-rank communication and time), anything new
        if (const auto details = extra(b, known))
            s.insert_step_details.bind(1, run).bind(2, m.seq).bind(3, *details).run();
        s.run_iteration.bind(1, run).bind(2, *iteration).run();
        dirty_.insert({run, *iteration / block_iters(run)});
        return;
    }
    if (m.topic == "eval" && iteration) {
        s.insert_eval.bind(1, run).bind(2, m.seq).bind(3, *iteration).bind(4, m.time);
        s.insert_eval.bind(5, integer(b, "consumed_tokens")).bind(6, number(b, "lm_loss")).bind(7, number(b, "ppl"));
        s.insert_eval.bind(8, integer(b, "samples")).bind(9, number(b, "time_s"));
        s.insert_eval.bind(10, extra(b, {"iteration", "consumed_tokens", "lm_loss", "ppl", "samples", "time_s"})).run();
        return;
    }
    if (m.topic == "memory" && b.contains("ranks") && b["ranks"].is_array()) {
        // Gathered to rank 0: one sample per rank.
        for (const json& r : b["ranks"]) {
            const auto rank = integer(r, "rank");
            if (!rank) continue;
            s.insert_memory.bind(1, run).bind(2, m.seq).bind(3, *rank).bind(4, iteration).bind(5, m.time);
            s.insert_memory.bind(6, integer(r, "allocated")).bind(7, integer(r, "peak"));
            s.insert_memory.bind(8, integer(r, "reserved")).bind(9, text_of(r, "by_category")).run();
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
        const std::string status =
            b.contains("status") && b["status"].is_string() ? b["status"].get<std::string>() : "unknown";
        const std::string reason =
            b.contains("reason") && b["reason"].is_string() ? b["reason"].get<std::string>() : "";
        s.run_ended.bind(1, run).bind(2, status).bind(3, reason).bind(4, m.time).bind(5, iteration.value_or(0)).run();
    }
    // Everything else, known or not, is kept whole.
    const std::optional<std::string> kind = rejected ? rejected
                                            : b.contains("kind") && b["kind"].is_string()
                                                ? std::optional<std::string>(b["kind"].get<std::string>())
                                                : std::nullopt;
    s.insert_event.bind(1, run).bind(2, m.seq).bind(3, m.time).bind(4, m.topic).bind(5, kind).bind(6, iteration);
    s.insert_event.bind(7, m.raw.empty() ? b.dump() : m.raw).run();
}

}  // namespace mwb::store
