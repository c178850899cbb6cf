#include "app/live/digest.h"

#include "mwb/ipc/json_get.h"
#include "mwb/store/sample.h"

#include <algorithm>
#include <cstdio>

namespace mwb::app {

namespace {

double num(const nlohmann::json& o, const char* key, double fallback = NAN) {
    return ipc::get_number(o, key).value_or(fallback);
}

int64_t integer(const nlohmann::json& o, const char* key, int64_t fallback = -1) {
    return ipc::get_integral(o, key).value_or(fallback);
}

std::string text(const nlohmann::json& o, const char* key, const std::string& fallback = {}) {
    return ipc::get_string(o, key).value_or(fallback);
}

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

void add_point(Update& u, SeriesId s, double x, double y) {
    if (std::isfinite(x) && std::isfinite(y)) u.points[series_index(s)].push_back({x, y});
}

void digest_step(Update& u, const ipc::Message& m) {
    const auto& b = m.body;
    const ipc::StepRecord r = b.get<ipc::StepRecord>();
    if (r.iteration < 0) return;
    const double it = static_cast<double>(r.iteration);
    LastStep s;
    s.iteration = r.iteration;
    s.time = m.time;
    s.consumed_tokens = r.consumed_tokens;
    s.consumed_samples = r.consumed_samples;
    s.skipped_iterations = r.skipped_iterations;
    s.loss = r.lm_loss.value_or(NAN);
    s.lr = r.lr;
    s.grad_norm = r.grad_norm.value_or(NAN);
    s.loss_scale = r.loss_scale;
    s.iteration_time_s = r.iteration_time_s;
    s.tokens_per_sec = r.tokens_per_sec;
    s.tflops = r.tflops_per_device;
    s.mfu = r.mfu.value_or(NAN);
    // the built-in series of the record's own fields, as the metric table lists them
    for (const ipc::Metric& metric : ipc::metrics())
        if (metric.source == ipc::MetricSource::Step && metric.series != SeriesId::Count)
            add_point(u, metric.series, it, ipc::step_value(r, metric));
    if (m.time > 0) add_point(u, SeriesId::Time, it, m.time);
    u.last_step = s;
    add_picker_metrics(b, it, u.metrics);
    if (!r.ranks.empty()) {
        std::vector<RankTiming> t;
        t.reserve(r.ranks.size());
        RankTiming worst;  // per component, the slowest rank (as the store keeps it)
        for (const auto& rank : r.ranks) {
            t.push_back(rank_timing(rank));
            worst.compute = std::max(worst.compute, t.back().compute);
            worst.communication = std::max(worst.communication, t.back().communication);
            worst.bubble = std::max(worst.bubble, t.back().bubble);
        }
        add_point(u, SeriesId::Compute, it, worst.compute);
        add_point(u, SeriesId::Communication, it, worst.communication);
        add_point(u, SeriesId::Bubble, it, worst.bubble);
        u.timings = std::move(t);
    }
}

void digest_memory(Update& u, const ipc::Message& m) {
    const auto ranks = m.body.find("ranks");
    if (ranks == m.body.end() || !ranks->is_array()) return;
    std::vector<RankMemory> out;
    for (const auto& r : *ranks) {
        if (!r.is_object()) continue;
        ipc::RankMemoryRecord x = r.get<ipc::RankMemoryRecord>();
        if (!ipc::get_integral(r, "rank")) x.rank = static_cast<int>(out.size());
        out.push_back(rank_memory(x));
    }
    std::sort(out.begin(), out.end(), [](const RankMemory& a, const RankMemory& b) { return a.rank < b.rank; });
    u.memory = std::move(out);
    u.memory_iteration = integer(m.body, "iteration", -1);
}

}  // namespace

RankTiming rank_timing(const ipc::RankRecord& r) {
    RankTiming t;
    t.rank = r.rank;
    t.tp = r.tp;
    t.pp = r.pp;
    t.dp = r.dp;
    const ipc::TimeSplit split = r.time.split();
    t.compute = split.compute;
    t.communication = split.communication;
    t.bubble = split.bubble;
    t.total = split.total;
    return t;
}

RankMemory rank_memory(const ipc::RankMemoryRecord& r) {
    RankMemory x;
    x.rank = r.rank;
    x.allocated = static_cast<double>(r.mem.allocated);
    x.peak = static_cast<double>(r.mem.peak);
    x.reserved = static_cast<double>(r.mem.reserved);
    for (std::size_t c = 0; c < ipc::kMemoryCategoryCount; ++c) {
        x.current[c] = static_cast<double>(r.mem.by_category[c].current);
        x.peak_by_category[c] = static_cast<double>(r.mem.by_category[c].peak);
    }
    return x;
}

EventItem describe(const ipc::Message& m) {
    const auto& b = m.body;
    EventItem e;
    e.seq = m.seq;
    e.time = m.time;
    e.iteration = integer(b, "iteration", -1);
    e.kind = m.topic;
    if (m.topic == "run.start") {
        const auto& c = b.value("config", nlohmann::json::object());
        const auto& t = b.value("topology", nlohmann::json::object());
        char buf[256];
        std::snprintf(
            buf, sizeof buf,
            "%s: %lld layers, hidden %lld, %lld heads, seq %lld; %lld rank(s) (TP %lld, PP %lld, DP %lld) on %s",
            e.iteration > 0 ? "resumed" : "started", static_cast<long long>(integer(c, "num_layers", 0)),
            static_cast<long long>(integer(c, "hidden_size", 0)),
            static_cast<long long>(integer(c, "num_attention_heads", 0)),
            static_cast<long long>(integer(c, "seq_length", 0)), static_cast<long long>(integer(t, "world_size", 1)),
            static_cast<long long>(integer(t, "tensor_model_parallel_size", 1)),
            static_cast<long long>(integer(t, "pipeline_model_parallel_size", 1)),
            static_cast<long long>(integer(t, "data_parallel_size", 1)), text(t, "device", "?").c_str());
        e.detail = buf;
        if (e.iteration > 0) e.detail += " from iteration " + std::to_string(e.iteration);
    } else if (m.topic == "run.end") {
        const std::string status = text(b, "status", "unknown");
        e.kind = "run.end";
        e.detail = "run " + status;
        const std::string reason = text(b, "reason");
        if (!reason.empty()) e.detail += ": " + reason;
        e.severity = status == "failed" ? 2 : (status == "finished" ? 0 : 1);
    } else if (m.topic == "eval") {
        e.kind = "eval";
        e.detail =
            "validation loss " + fmt("%.4f", num(b, "lm_loss")) + " (perplexity " + fmt("%.3f", num(b, "ppl")) + ")";
    } else if (m.topic == "event") {
        e.kind = text(b, "kind", "event");
        if (e.kind == "skipped_iteration") {
            e.detail = "iteration skipped: " + text(b, "reason", "non-finite gradients");
            if (std::isfinite(num(b, "loss_scale")))
                e.detail += " (loss scale " + fmt("%g", num(b, "loss_scale")) + ")";
            e.severity = 1;
        } else if (e.kind == "nan_loss") {
            e.detail = "the loss is not finite";
            e.severity = 2;
        } else if (e.kind == "checkpoint_saved") {
            e.detail = "checkpoint saved to " + text(b, "path", "?");
            if (std::isfinite(num(b, "time_s"))) e.detail += " in " + fmt("%.2f s", num(b, "time_s"));
        } else if (e.kind == "checkpoint_loaded") {
            e.detail = "checkpoint loaded from " + text(b, "path", "?");
        } else if (e.kind == "control_applied") {
            e.detail = text(b, "action", "?") + " applied";
            const std::string id = text(b, "request_id");
            if (!id.empty()) e.detail += " (request " + id + ")";
        } else if (e.kind == "warning") {
            e.detail = text(b, "message", "warning");
            e.severity = 1;
        } else {
            nlohmann::json rest = nlohmann::json::object();
            for (const auto& [k, v] : b.items())
                if (k != "schema" && k != "topic" && k != "run_id" && k != "seq" && k != "time" && k != "kind")
                    rest[k] = v;
            e.detail = rest.dump();
        }
    } else {
        e.detail = m.raw.empty() ? b.dump() : m.raw;
        if (e.detail.size() > 300) e.detail = e.detail.substr(0, 300) + "…";
    }
    return e;
}

bool Update::empty() const {
    if (reset || start || end || last_step || memory || timings || !events.empty() || last_eval || !metrics.empty() ||
        !samples.empty())
        return false;
    return std::all_of(points.begin(), points.end(), [](const auto& p) { return p.empty(); });
}

void Update::merge(Update&& later) {
    if (later.reset) {
        *this = std::move(later);
        return;
    }
    if (!later.run_id.empty()) run_id = later.run_id;
    for (int s = 0; s < kSeriesCount; ++s) {
        auto& dst = points[static_cast<std::size_t>(s)];
        auto& src = later.points[static_cast<std::size_t>(s)];
        dst.insert(dst.end(), src.begin(), src.end());
    }
    for (auto& [k, pts] : later.metrics) {
        auto& dst = metrics[k];
        dst.insert(dst.end(), pts.begin(), pts.end());
    }
    events.insert(events.end(), std::make_move_iterator(later.events.begin()),
                  std::make_move_iterator(later.events.end()));
    samples.insert(samples.end(), std::make_move_iterator(later.samples.begin()),
                   std::make_move_iterator(later.samples.end()));
    if (later.start) {
        start = std::move(later.start);
        if (!later.end) end.reset();  // resumed after the end this update had seen
    }
    if (later.end) end = std::move(later.end);
    if (later.last_step) last_step = later.last_step;
    if (later.last_eval) last_eval = later.last_eval;
    if (later.memory) {
        memory = std::move(later.memory);
        memory_iteration = later.memory_iteration;
    }
    if (later.timings) timings = std::move(later.timings);
    messages += later.messages;
    history_messages += later.history_messages;
}

bool is_charted_field(const std::string& field) {
    // the built-in charts' fields (Update::points): the table's step fields with a series; the
    // rest goes to the metric picker
    if (field == "iteration") return true;
    const ipc::Metric* m = ipc::find_metric(field);
    return m && m->source == ipc::MetricSource::Step && m->series != SeriesId::Count;
}

void add_picker_metrics(const nlohmann::json& b, double it, std::map<std::string, std::vector<PlotPoint>>& metrics) {
    // top-level numbers, nested objects' numbers ("mem.peak") and per rank its numbers ("rank3.forward_s")
    const auto add_numbers = [&metrics, it](const nlohmann::json& o, const std::string& prefix, const auto& self,
                                            int depth) -> void {
        for (const auto& [k, v] : o.items()) {
            if (v.is_number()) {
                const double y = v.template get<double>();
                if (std::isfinite(y)) metrics[prefix + k].push_back({it, y});
            } else if (v.is_object() && depth < 2) {
                self(v, prefix + k + ".", self, depth + 1);
            }
        }
    };
    for (const auto& [k, v] : b.items()) {
        if (is_charted_field(k) || k == "ranks") continue;
        if (v.is_number() && std::isfinite(v.get<double>()))
            metrics[k].push_back({it, v.get<double>()});
        else if (v.is_object())
            add_numbers(v, k + ".", add_numbers, 1);
    }
    const auto ranks = b.find("ranks");
    if (ranks != b.end() && ranks->is_array()) {
        for (const auto& r : *ranks) {
            if (!r.is_object()) continue;
            nlohmann::json numbers = r;
            for (const char* k : {"rank", "tp", "pp", "dp"}) numbers.erase(k);
            add_numbers(numbers, "rank" + std::to_string(integer(r, "rank", 0)) + ".", add_numbers, 0);
        }
    }
}

void digest(Update& u, const ipc::Message& m) {
    if (m.is_heartbeat()) return;
    u.run_id = m.run_id;
    ++u.messages;
    if (m.topic == "step") {
        digest_step(u, m);
    } else if (m.topic == "memory") {
        digest_memory(u, m);
    } else if (m.topic == "eval") {
        const ipc::EvalRecord e = m.body.get<ipc::EvalRecord>();
        add_point(u, SeriesId::ValLoss, static_cast<double>(e.iteration), e.lm_loss);
        if (std::isfinite(e.lm_loss)) u.last_eval = e.lm_loss;
        u.events.push_back(describe(m));
    } else if (m.topic == "run.start") {
        ipc::RunStartRecord r = m.body.get<ipc::RunStartRecord>();
        RunStart s;
        s.run_id = m.run_id;
        s.config = std::move(r.config);
        s.derived = std::move(r.derived);
        s.topology = std::move(r.topology);
        s.hosts = std::move(r.hosts);
        s.iteration = r.iteration;
        s.time = m.time;
        u.start = std::move(s);
        u.end.reset();  // a resumed run is running again
        u.events.push_back(describe(m));
    } else if (m.topic == "run.end") {
        const ipc::RunEndRecord r = m.body.get<ipc::RunEndRecord>();
        RunEnd e;
        e.status = r.status;
        e.reason = r.reason;
        e.iteration = r.totals ? r.totals->iteration : -1;
        e.time = m.time;
        u.end = e;
        u.events.push_back(describe(m));
    } else if (m.topic == "event") {
        u.events.push_back(describe(m));
    } else if (m.topic == "sample") {
        std::string why;
        if (auto s = store::parse_sample(m.body, &why)) {
            u.samples.push_back(std::move(*s));
        } else {  // shown, not dropped silently (the store keeps it whole)
            EventItem e = describe(m);
            e.detail = why;
            e.severity = 1;
            u.events.push_back(std::move(e));
        }
    }
    // other topics: future additions, ignored here (the store keeps them)
}

}  // namespace mwb::app
