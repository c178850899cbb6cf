// The records' JSON: to_json writes the wire's fields exactly (docs/protocol.md), from_json reads
// leniently (unknown fields ignored, missing ones left at their defaults).
#include "mwb/ipc/schema.h"

#include "mwb/ipc/json_get.h"

namespace mwb::ipc {

using nlohmann::json;

namespace {

int64_t int_or(const json& j, const char* key, int64_t fallback) {
    return get_integral(j, key).value_or(fallback);
}
double number_or(const json& j, const char* key, double fallback = NAN) {
    return get_number(j, key).value_or(fallback);
}
std::string text_or(const json& j, const char* key, std::string fallback = {}) {
    return get_string(j, key).value_or(std::move(fallback));
}
/// A number, `null` when absent or not finite (JSON has no NaN).
json number_or_null(const std::optional<double>& v) {
    return v && std::isfinite(*v) ? json(*v) : json(nullptr);
}
const json& member(const json& j, const char* key) {
    static const json kNull;
    if (!j.is_object()) return kNull;
    const auto it = j.find(key);
    return it == j.end() ? kNull : *it;
}
template <typename T>
void array_from(const json& j, const char* key, std::vector<T>& out) {
    out.clear();
    const json& a = member(j, key);
    if (!a.is_array()) return;
    for (const json& x : a)
        if (x.is_object()) out.push_back(x.get<T>());
}

}  // namespace

// ---- memory ----

void to_json(json& j, const MemoryStats& r) {
    json by_category = json::object();
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c)
        by_category[std::string(kMemoryCategories[c])] = {{"current", r.by_category[c].current},
                                                          {"peak", r.by_category[c].peak}};
    j = {{"allocated", r.allocated}, {"peak", r.peak}, {"reserved", r.reserved}, {"by_category", by_category}};
}

void from_json(const json& j, MemoryStats& r) {
    r.allocated = int_or(j, "allocated", 0);
    r.peak = int_or(j, "peak", 0);
    r.reserved = int_or(j, "reserved", 0);
    const json& bc = member(j, "by_category");
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
        const json& x = member(bc, std::string(kMemoryCategories[c]).c_str());
        r.by_category[c] = {int_or(x, "current", 0), int_or(x, "peak", 0)};
    }
}

void to_json(json& j, const RankMemoryRecord& r) {
    to_json(j, r.mem);
    j["rank"] = r.rank;
    if (r.device_free) j["device_free"] = *r.device_free;
    if (r.device_total) j["device_total"] = *r.device_total;
}

void from_json(const json& j, RankMemoryRecord& r) {
    r.rank = static_cast<int>(int_or(j, "rank", 0));
    from_json(j, r.mem);
    r.device_free = get_integral(j, "device_free");
    r.device_total = get_integral(j, "device_total");
}

void to_json(json& j, const MemoryRecord& r) {
    j = {{"iteration", r.iteration}, {"ranks", r.ranks}};
}

void from_json(const json& j, MemoryRecord& r) {
    r.iteration = int_or(j, "iteration", -1);
    array_from(j, "ranks", r.ranks);
}

// ---- step ----

TimeSplit PhaseTimes::split() const {
    double work = 0, communication = 0, bubble = 0;
    for (std::size_t p = 0; p < kPhaseCount; ++p) {
        switch (phase_metric(static_cast<Phase>(p)).phase) {
            case PhaseRole::Work:
                work += seconds[p];
                break;
            case PhaseRole::Communication:
                communication += seconds[p];
                break;
            case PhaseRole::Bubble:
                bubble += seconds[p];
                break;
            case PhaseRole::None:
                break;
        }
    }
    return split_time(work, communication, bubble);
}

void to_json(json& j, const PhaseTimes& r) {
    j = json::object();
    for (std::size_t p = 0; p < kPhaseCount; ++p)
        j[std::string(phase_metric(static_cast<Phase>(p)).key)] = r.seconds[p];
}

void from_json(const json& j, PhaseTimes& r) {
    for (std::size_t p = 0; p < kPhaseCount; ++p)
        r.seconds[p] = number_or(j, std::string(phase_metric(static_cast<Phase>(p)).key).c_str(), 0);
}

void to_json(json& j, const RankRecord& r) {
    json comm = json::object();
    for (const CommRecord& c : r.comm)
        comm[c.group] = {{"bytes_per_iteration", c.bytes_per_iteration},
                         {"seconds_per_iteration", c.seconds_per_iteration}};
    j = {{"rank", r.rank}, {"tp", r.tp}, {"pp", r.pp}, {"dp", r.dp}, {"comm", comm}, {"time", r.time}};
}

void from_json(const json& j, RankRecord& r) {
    r.rank = static_cast<int>(int_or(j, "rank", 0));
    r.tp = static_cast<int>(int_or(j, "tp", 0));
    r.pp = static_cast<int>(int_or(j, "pp", 0));
    r.dp = static_cast<int>(int_or(j, "dp", 0));
    r.comm.clear();
    if (const json& comm = member(j, "comm"); comm.is_object())
        for (const auto& [group, c] : comm.items())
            r.comm.push_back({group, int_or(c, "bytes_per_iteration", 0), number_or(c, "seconds_per_iteration", 0)});
    from_json(member(j, "time"), r.time);
}

void to_json(json& j, const StepRecord& r) {
    j = {{"iteration", r.iteration}, {"mem", r.mem}, {"ranks", r.ranks}};
    for (const Metric& m : metrics()) {
        const std::string key(m.key);
        if (const auto* i = std::get_if<int64_t StepRecord::*>(&m.field)) j[key] = r.**i;
        if (const auto* d = std::get_if<double StepRecord::*>(&m.field)) j[key] = r.**d;
        if (const auto* o = std::get_if<std::optional<double> StepRecord::*>(&m.field)) j[key] = number_or_null(r.**o);
    }
}

double step_value(const StepRecord& r, const Metric& m) {
    if (const auto* i = std::get_if<int64_t StepRecord::*>(&m.field)) return static_cast<double>(r.**i);
    if (const auto* d = std::get_if<double StepRecord::*>(&m.field)) return r.**d;
    if (const auto* o = std::get_if<std::optional<double> StepRecord::*>(&m.field)) return (r.**o).value_or(NAN);
    return NAN;
}

void from_json(const json& j, StepRecord& r) {
    r.iteration = int_or(j, "iteration", -1);
    for (const Metric& m : metrics()) {
        const std::string key(m.key);
        if (const auto* i = std::get_if<int64_t StepRecord::*>(&m.field)) r.** i = int_or(j, key.c_str(), 0);
        if (const auto* d = std::get_if<double StepRecord::*>(&m.field)) r.** d = number_or(j, key.c_str());
        if (const auto* o = std::get_if<std::optional<double> StepRecord::*>(&m.field))
            r.** o = get_number(j, key.c_str());
    }
    from_json(member(j, "mem"), r.mem);
    array_from(j, "ranks", r.ranks);
}

// ---- eval, run.start, run.end, sample ----

std::span<const EvalField> eval_fields() {
    // clang-format off
    static const EvalField kFields[] = {
        {"iteration",              &EvalRecord::iteration,              ""},
        {"consumed_tokens",        &EvalRecord::consumed_tokens,        "consumed_tokens"},
        {"consumed_samples",       &EvalRecord::consumed_samples,       ""},
        {"split",                  &EvalRecord::split,                  ""},
        {"consumed_valid_samples", &EvalRecord::consumed_valid_samples, ""},
        {"lm_loss",                &EvalRecord::lm_loss,                "lm_loss"},
        {"ppl",                    &EvalRecord::ppl,                    "ppl"},
        {"samples",                &EvalRecord::samples,                "samples"},
        {"time_s",                 &EvalRecord::time_s,                 "time_s"},
    };
    // clang-format on
    return kFields;
}

void to_json(json& j, const EvalRecord& r) {
    j = json::object();
    for (const EvalField& f : eval_fields())
        std::visit([&](auto member) { j[std::string(f.key)] = r.*member; }, f.member);
}

void from_json(const json& j, EvalRecord& r) {
    // a missing field keeps its default (-1 for iteration, NaN for numbers)
    r = EvalRecord{};
    for (const EvalField& f : eval_fields()) {
        const std::string key(f.key);
        if (const auto* i = std::get_if<int64_t EvalRecord::*>(&f.member)) r.** i = int_or(j, key.c_str(), r.**i);
        if (const auto* d = std::get_if<double EvalRecord::*>(&f.member)) r.** d = number_or(j, key.c_str(), r.**d);
        if (const auto* t = std::get_if<std::string EvalRecord::*>(&f.member)) r.** t = text_or(j, key.c_str());
    }
}

void to_json(json& j, const RunStartRecord& r) {
    j = {{"config", r.config},
         {"derived", r.derived},
         {"topology", r.topology},
         {"hosts", r.hosts},
         {"iteration", r.iteration}};
}

void from_json(const json& j, RunStartRecord& r) {
    const auto object = [&](const char* key) {
        const json& v = member(j, key);
        return v.is_object() ? v : json::object();
    };
    r.config = object("config");
    r.derived = object("derived");
    r.topology = object("topology");
    r.hosts.clear();
    if (const json& h = member(j, "hosts"); h.is_array())
        for (const json& x : h)
            if (x.is_string()) r.hosts.push_back(x.get<std::string>());
    r.iteration = int_or(j, "iteration", 0);
}

void to_json(json& j, const RunEndRecord& r) {
    j = {{"status", r.status}, {"reason", r.reason}};
    if (!r.totals) return;
    j["iteration"] = r.totals->iteration;
    j["consumed_samples"] = r.totals->consumed_samples;
    j["skipped_iterations"] = r.totals->skipped_iterations;
    j["mem_peak_bytes"] = r.totals->mem.peak;
    j["mem"] = r.totals->mem;
}

void from_json(const json& j, RunEndRecord& r) {
    r.status = text_or(j, "status", "unknown");
    r.reason = text_or(j, "reason");
    r.totals.reset();
    if (!j.is_object() || !j.contains("iteration")) return;
    RunTotals t;
    t.iteration = int_or(j, "iteration", -1);
    t.consumed_samples = int_or(j, "consumed_samples", 0);
    t.skipped_iterations = int_or(j, "skipped_iterations", 0);
    from_json(member(j, "mem"), t.mem);
    r.totals = t;
}

void to_json(json& j, const SampleMessage& r) {
    j = {{"iteration", r.iteration},
         {"consumed_tokens", r.consumed_tokens},
         {"prompt_index", r.prompt_index},
         {"prompt", r.prompt},
         {"completion", r.completion},
         {"prompt_tokens", r.prompt_tokens},
         {"completion_tokens", r.completion_tokens},
         {"finish_reason", r.finish_reason},
         {"greedy", r.greedy},
         {"temperature", r.temperature},
         {"top_k", r.top_k},
         {"top_p", r.top_p},
         {"seed", r.seed},
         {"time_s", r.time_s}};
}

void from_json(const json& j, SampleMessage& r) {
    r.iteration = int_or(j, "iteration", 0);
    r.consumed_tokens = int_or(j, "consumed_tokens", 0);
    r.prompt_index = int_or(j, "prompt_index", 0);
    r.prompt = text_or(j, "prompt");
    r.completion = text_or(j, "completion");
    r.prompt_tokens = int_or(j, "prompt_tokens", 0);
    r.completion_tokens = int_or(j, "completion_tokens", 0);
    r.finish_reason = text_or(j, "finish_reason");
    const json& g = member(j, "greedy");
    r.greedy = g.is_boolean() ? g.get<bool>() : SampleMessage{}.greedy;
    r.temperature = number_or(j, "temperature", 0);
    r.top_k = int_or(j, "top_k", 0);
    r.top_p = number_or(j, "top_p", SampleMessage{}.top_p);
    const json& seed = member(j, "seed");
    r.seed = seed.is_number_unsigned() ? seed.get<uint64_t>() : static_cast<uint64_t>(int_or(j, "seed", 0));
    r.time_s = number_or(j, "time_s", 0);
}

// ---- events ----

void to_json(json& j, const SkippedIterationEvent& r) {
    j = {{"iteration", r.iteration}, {"loss_scale", r.loss_scale}, {"reason", r.reason}};
}
void from_json(const json& j, SkippedIterationEvent& r) {
    r.iteration = int_or(j, "iteration", -1);
    r.loss_scale = number_or(j, "loss_scale");
    r.reason = text_or(j, "reason");
}
void to_json(json& j, const NanLossEvent& r) {
    j = {{"iteration", r.iteration}, {"loss", nullptr}};
}
void from_json(const json& j, NanLossEvent& r) {
    r.iteration = int_or(j, "iteration", -1);
}
void to_json(json& j, const CheckpointSavedEvent& r) {
    j = {{"iteration", r.iteration}, {"path", r.path}, {"time_s", r.time_s}};
}
void from_json(const json& j, CheckpointSavedEvent& r) {
    r.iteration = int_or(j, "iteration", -1);
    r.path = text_or(j, "path");
    r.time_s = number_or(j, "time_s");
}
void to_json(json& j, const CheckpointLoadedEvent& r) {
    j = {{"iteration", r.iteration}, {"path", r.path}};
}
void from_json(const json& j, CheckpointLoadedEvent& r) {
    r.iteration = int_or(j, "iteration", -1);
    r.path = text_or(j, "path");
}
void to_json(json& j, const CheckpointNotFoundEvent& r) {
    j = {{"path", r.path}};
}
void from_json(const json& j, CheckpointNotFoundEvent& r) {
    r.path = text_or(j, "path");
}
void to_json(json& j, const ControlAppliedEvent& r) {
    j = {{"action", r.action}, {"iteration", r.iteration}, {"request_id", r.request_id}};
}
void from_json(const json& j, ControlAppliedEvent& r) {
    r.action = text_or(j, "action");
    r.iteration = int_or(j, "iteration", -1);
    r.request_id = text_or(j, "request_id");
}
void to_json(json& j, const SamplingSkippedEvent& r) {
    j = {{"reason", r.reason}};
}
void from_json(const json& j, SamplingSkippedEvent& r) {
    r.reason = text_or(j, "reason");
}

}  // namespace mwb::ipc
