#include "live/digest.h"

#include "mwb/store/sample.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace mwb::app {

namespace {

double num(const nlohmann::json& o, const char* key, double fallback = NAN) {
    const auto it = o.find(key);
    return it != o.end() && it->is_number() ? it->get<double>() : fallback;
}

int64_t integer(const nlohmann::json& o, const char* key, int64_t fallback = -1) {
    const auto it = o.find(key);
    if (it == o.end() || !it->is_number()) return fallback;
    return it->is_number_integer() ? it->get<int64_t>() : static_cast<int64_t>(it->get<double>());
}

std::string text(const nlohmann::json& o, const char* key, const std::string& fallback = {}) {
    const auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : fallback;
}

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

void add_point(Update& u, SeriesId s, double x, double y) {
    if (std::isfinite(x) && std::isfinite(y)) u.points[series_index(s)].push_back({x, y});
}

std::array<double, 6> categories(const nlohmann::json& by_category, const char* which) {
    static constexpr const char* keys[6] = {"weights", "gradients", "optimizer", "activations", "workspace", "data"};
    std::array<double, 6> out{};
    if (!by_category.is_object()) return out;
    for (int c = 0; c < 6; ++c) {
        const auto it = by_category.find(keys[c]);
        if (it != by_category.end() && it->is_object()) out[static_cast<std::size_t>(c)] = num(*it, which, 0);
    }
    return out;
}

void digest_step(Update& u, const ipc::Message& m) {
    const auto& b = m.body;
    const double it = static_cast<double>(integer(b, "iteration", -1));
    if (it < 0) return;
    LastStep s;
    s.iteration = static_cast<int64_t>(it);
    s.time = m.time;
    s.consumed_tokens = integer(b, "consumed_tokens", 0);
    s.consumed_samples = integer(b, "consumed_samples", 0);
    s.skipped_iterations = integer(b, "skipped_iterations", 0);
    s.loss = num(b, "lm_loss");
    s.lr = num(b, "lr");
    s.grad_norm = num(b, "grad_norm");
    s.loss_scale = num(b, "loss_scale");
    s.iteration_time_s = num(b, "iteration_time_s");
    s.tokens_per_sec = num(b, "tokens_per_sec");
    s.tflops = num(b, "tflops_per_device");
    s.mfu = num(b, "mfu");
    add_point(u, SeriesId::Loss, it, s.loss);
    add_point(u, SeriesId::Lr, it, s.lr);
    add_point(u, SeriesId::GradNorm, it, s.grad_norm);
    add_point(u, SeriesId::LossScale, it, s.loss_scale);
    add_point(u, SeriesId::TokensPerSec, it, s.tokens_per_sec);
    add_point(u, SeriesId::Tflops, it, s.tflops);
    add_point(u, SeriesId::Mfu, it, s.mfu);
    add_point(u, SeriesId::IterationTime, it, s.iteration_time_s);
    add_point(u, SeriesId::Tokens, it, static_cast<double>(s.consumed_tokens));
    if (m.time > 0) add_point(u, SeriesId::Time, it, m.time);
    u.last_step = s;
    add_picker_metrics(b, it, u.metrics);
    const auto ranks = b.find("ranks");
    if (ranks != b.end() && ranks->is_array() && !ranks->empty()) {
        std::vector<RankTiming> t;
        t.reserve(ranks->size());
        RankTiming worst;  // per component, the slowest rank (as the store keeps it)
        for (const auto& r : *ranks) {
            if (!r.is_object()) continue;
            t.push_back(rank_timing(r));
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
        RankMemory x;
        x.rank = static_cast<int>(integer(r, "rank", static_cast<int64_t>(out.size())));
        x.allocated = num(r, "allocated", 0);
        x.peak = num(r, "peak", 0);
        x.reserved = num(r, "reserved", 0);
        const auto bc = r.find("by_category");
        if (bc != r.end()) {
            x.current = categories(*bc, "current");
            x.peak_by_category = categories(*bc, "peak");
        }
        out.push_back(x);
    }
    std::sort(out.begin(), out.end(), [](const RankMemory& a, const RankMemory& b) { return a.rank < b.rank; });
    u.memory = std::move(out);
    u.memory_iteration = integer(m.body, "iteration", -1);
}

}  // namespace

RankTiming rank_timing(const nlohmann::json& r) {
    RankTiming t;
    t.rank = static_cast<int>(integer(r, "rank", 0));
    t.tp = static_cast<int>(integer(r, "tp", 0));
    t.pp = static_cast<int>(integer(r, "pp", 0));
    t.dp = static_cast<int>(integer(r, "dp", 0));
    const auto tm = r.find("time");
    if (tm == r.end() || !tm->is_object()) return t;
    const double work = num(*tm, "forward_s", 0) + num(*tm, "backward_s", 0) + num(*tm, "gradient_reduce_s", 0) +
                        num(*tm, "optimizer_s", 0) + num(*tm, "data_s", 0);
    t.communication = std::max(0.0, num(*tm, "communication_s", 0));
    t.bubble = std::max(0.0, num(*tm, "pipeline_bubble_s", 0));
    t.compute = std::max(0.0, work - t.communication - t.bubble);
    t.total = std::max(work, t.compute + t.communication + t.bubble);
    return t;
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
    // the built-in charts' fields (Update::points), everything else goes to the metric picker
    static const std::set<std::string> kCharted = {"iteration", "lm_loss", "lr", "grad_norm", "loss_scale",
                                                   "tokens_per_sec", "tflops_per_device", "mfu", "iteration_time_s",
                                                   "consumed_tokens"};
    return kCharted.count(field) > 0;
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
        const double it = static_cast<double>(integer(m.body, "iteration", -1));
        const double loss = num(m.body, "lm_loss");
        add_point(u, SeriesId::ValLoss, it, loss);
        if (std::isfinite(loss)) u.last_eval = loss;
        u.events.push_back(describe(m));
    } else if (m.topic == "run.start") {
        RunStart s;
        s.run_id = m.run_id;
        s.config = m.body.value("config", nlohmann::json::object());
        s.derived = m.body.value("derived", nlohmann::json::object());
        s.topology = m.body.value("topology", nlohmann::json::object());
        if (const auto h = m.body.find("hosts"); h != m.body.end() && h->is_array())
            for (const auto& x : *h)
                if (x.is_string()) s.hosts.push_back(x.get<std::string>());
        s.iteration = integer(m.body, "iteration", 0);
        s.time = m.time;
        u.start = std::move(s);
        u.end.reset();  // a resumed run is running again
        u.events.push_back(describe(m));
    } else if (m.topic == "run.end") {
        RunEnd e;
        e.status = text(m.body, "status", "unknown");
        e.reason = text(m.body, "reason");
        e.iteration = integer(m.body, "iteration", -1);
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
