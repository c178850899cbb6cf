#pragma once
// The typed records of mwb.telemetry/1.x (docs/protocol.md): what the trainer fills and publishes,
// what readers take from a message body. to_json writes exactly the wire's fields (the envelope is
// RunDir's); from_json reads what a body has, ignoring unknown fields and leaving missing ones at
// their defaults (-1 for iterations, NaN or empty for numbers). The step record's scalar fields come
// from the metric table (metrics.h). Qt-free.
#include "mwb/ipc/memory_categories.h"
#include "mwb/ipc/metrics.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace mwb::ipc {

// ---- memory ----

struct CategoryBytes {
    int64_t current = 0, peak = 0;
};

/// One process's memory: `mem` of step and run.end, and each rank of the memory record.
struct MemoryStats {
    int64_t allocated = 0, peak = 0, reserved = 0;
    std::array<CategoryBytes, kMemoryCategoryCount> by_category{};
};

struct RankMemoryRecord {
    int rank = 0;
    MemoryStats mem;
    std::optional<int64_t> device_free, device_total;  ///< GPU runs (cudaMemGetInfo)
};

/// Topic `memory`: every rank's memory, gathered to rank 0.
struct MemoryRecord {
    static constexpr std::string_view kTopic = "memory";
    int64_t iteration = -1;
    std::vector<RankMemoryRecord> ranks;
};

// ---- step ----

/// Traffic of one process group type per iteration.
struct CommRecord {
    std::string group;  ///< tp, sp, pp, dp, embedding, model
    int64_t bytes_per_iteration = 0;
    double seconds_per_iteration = 0;
};

/// Seconds per iteration in each phase (Phase order).
struct PhaseTimes {
    std::array<double, kPhaseCount> seconds{};
    double& operator[](Phase p) { return seconds[static_cast<std::size_t>(p)]; }
    double operator[](Phase p) const { return seconds[static_cast<std::size_t>(p)]; }
    /// This rank's compute / communication / bubble (split_time over the phase roles).
    TimeSplit split() const;
};

/// One rank of the step record.
struct RankRecord {
    int rank = 0, tp = 0, pp = 0, dp = 0;
    std::vector<CommRecord> comm;
    PhaseTimes time;
};

/// Topic `step`: one log interval's figures. The scalar members are the metric table's Step rows.
struct StepRecord {
    static constexpr std::string_view kTopic = "step";
    int64_t iteration = -1, consumed_samples = 0, consumed_tokens = 0, global_batch_size = 0, skipped_iterations = 0,
            iterations_in_interval = 0, mem_allocated_bytes = 0, mem_peak_bytes = 0, mem_peak_bytes_max_rank = 0;
    std::optional<double> lm_loss, grad_norm, mfu;  ///< null: no finite loss / gradient norm, no configured peak
    double lr = NAN, loss_scale = NAN, iteration_time_s = NAN, tokens_per_sec = NAN, tflops_per_device = NAN,
           hardware_tflops_per_device = NAN;
    MemoryStats mem;  ///< rank 0's
    std::vector<RankRecord> ranks;
};

/// A Step row's value in `r` (an empty optional and a non-Step row: NaN).
double step_value(const StepRecord& r, const Metric& m);

// ---- eval, run.start, run.end, sample ----

struct EvalRecord {
    static constexpr std::string_view kTopic = "eval";
    int64_t iteration = -1, consumed_tokens = 0, consumed_samples = 0, consumed_valid_samples = 0, samples = 0;
    std::string split;  ///< valid | test
    double lm_loss = NAN, ppl = NAN, time_s = NAN;
};

/// A field of the eval record: its JSON key, its EvalRecord member, and its column in the store's
/// evals table ("" when the store keeps it in the row's `extra`). eval_fields() lists every field
/// once: EvalRecord's JSON writer and reader and the store's eval ingest iterate it (a new field is a
/// member and a row; a column also needs a store migration).
using EvalMember = std::variant<int64_t EvalRecord::*, double EvalRecord::*, std::string EvalRecord::*>;
struct EvalField {
    std::string_view key;
    EvalMember member;
    std::string_view column;
};
/// In the wire's order; `iteration` first (the store's row key, not one of its value columns).
std::span<const EvalField> eval_fields();

struct RunStartRecord {
    static constexpr std::string_view kTopic = "run.start";
    nlohmann::json config = nlohmann::json::object(), derived = nlohmann::json::object(),
                   topology = nlohmann::json::object();
    std::vector<std::string> hosts;
    int64_t iteration = 0;  ///< non-zero when resumed
};

/// What a run ending normally also says (a run that failed before training may have none).
struct RunTotals {
    int64_t iteration = 0, consumed_samples = 0, skipped_iterations = 0;
    MemoryStats mem;  ///< `mem_peak_bytes` is mem.peak
};

struct RunEndRecord {
    static constexpr std::string_view kTopic = "run.end";
    std::string status;  ///< finished | stopped | interrupted | failed
    std::string reason;
    std::optional<RunTotals> totals;
};

/// Topic `sample` (1.1): one prompt's completion at a sampling point. store/sample.h checks a
/// received one field by field (limits, ranges) into the store's SampleRecord, which is this record
/// with its row identity. A missing setting reads as no-op sampling (greedy, top_p 1).
struct SampleMessage {
    static constexpr std::string_view kTopic = "sample";
    int64_t iteration = 0, consumed_tokens = 0, prompt_index = 0, prompt_tokens = 0, completion_tokens = 0, top_k = 0;
    uint64_t seed = 0;
    std::string prompt, completion, finish_reason;  ///< finish_reason: eos | length
    bool greedy = true;
    double temperature = 0, top_p = 1, time_s = 0;
};

// ---- events (topic `event`, told apart by `kind`) ----

struct SkippedIterationEvent {
    static constexpr std::string_view kKind = "skipped_iteration";
    int64_t iteration = -1;
    double loss_scale = NAN;
    std::string reason;
};
struct NanLossEvent {
    static constexpr std::string_view kKind = "nan_loss";
    int64_t iteration = -1;  ///< the record also says "loss": null
};
struct CheckpointSavedEvent {
    static constexpr std::string_view kKind = "checkpoint_saved";
    int64_t iteration = -1;
    std::string path;
    double time_s = NAN;
};
struct CheckpointLoadedEvent {
    static constexpr std::string_view kKind = "checkpoint_loaded";
    int64_t iteration = -1;
    std::string path;
};
struct CheckpointNotFoundEvent {
    static constexpr std::string_view kKind = "checkpoint_not_found";
    std::string path;
};
struct ControlAppliedEvent {
    static constexpr std::string_view kKind = "control_applied";
    std::string action, request_id;
    int64_t iteration = -1;
};
/// A run with --sample-interval that cannot sample (no prompts file, a GPU run): published once.
struct SamplingSkippedEvent {
    static constexpr std::string_view kKind = "sampling_skipped";
    std::string reason;
};
inline constexpr std::string_view kEventTopic = "event";

// ---- JSON (nlohmann's ADL hooks: `json j = record;`, `j.get<StepRecord>()`) ----

void to_json(nlohmann::json& j, const MemoryStats& r);
void from_json(const nlohmann::json& j, MemoryStats& r);
void to_json(nlohmann::json& j, const RankMemoryRecord& r);
void from_json(const nlohmann::json& j, RankMemoryRecord& r);
void to_json(nlohmann::json& j, const MemoryRecord& r);
void from_json(const nlohmann::json& j, MemoryRecord& r);
void to_json(nlohmann::json& j, const PhaseTimes& r);
void from_json(const nlohmann::json& j, PhaseTimes& r);
void to_json(nlohmann::json& j, const RankRecord& r);
void from_json(const nlohmann::json& j, RankRecord& r);
void to_json(nlohmann::json& j, const StepRecord& r);
void from_json(const nlohmann::json& j, StepRecord& r);
void to_json(nlohmann::json& j, const EvalRecord& r);
void from_json(const nlohmann::json& j, EvalRecord& r);
void to_json(nlohmann::json& j, const RunStartRecord& r);
void from_json(const nlohmann::json& j, RunStartRecord& r);
void to_json(nlohmann::json& j, const RunEndRecord& r);
void from_json(const nlohmann::json& j, RunEndRecord& r);
void to_json(nlohmann::json& j, const SampleMessage& r);
void from_json(const nlohmann::json& j, SampleMessage& r);
void to_json(nlohmann::json& j, const SkippedIterationEvent& r);
void from_json(const nlohmann::json& j, SkippedIterationEvent& r);
void to_json(nlohmann::json& j, const NanLossEvent& r);
void from_json(const nlohmann::json& j, NanLossEvent& r);
void to_json(nlohmann::json& j, const CheckpointSavedEvent& r);
void from_json(const nlohmann::json& j, CheckpointSavedEvent& r);
void to_json(nlohmann::json& j, const CheckpointLoadedEvent& r);
void from_json(const nlohmann::json& j, CheckpointLoadedEvent& r);
void to_json(nlohmann::json& j, const CheckpointNotFoundEvent& r);
void from_json(const nlohmann::json& j, CheckpointNotFoundEvent& r);
void to_json(nlohmann::json& j, const ControlAppliedEvent& r);
void from_json(const nlohmann::json& j, ControlAppliedEvent& r);
void to_json(nlohmann::json& j, const SamplingSkippedEvent& r);
void from_json(const nlohmann::json& j, SamplingSkippedEvent& r);

/// The wire body of an event (its `kind` first among its fields).
template <typename Event>
nlohmann::json event_json(const Event& e) {
    nlohmann::json j = e;
    j["kind"] = Event::kKind;
    return j;
}

}  // namespace mwb::ipc
