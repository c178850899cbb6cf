#pragma once
// What the Monitor takes from each telemetry message (docs/protocol.md): points for its series, the
// run's description and end, per-rank memory and step times, and readable event lines. Qt-free, so
// the receiver thread digests messages as they arrive and the GUI only appends the result.
#include "mwb/ipc/message.h"
#include "mwb/ipc/schema.h"
#include "mwb/store/types.h"
#include "app/plot/trace.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mwb::app {

/// The Monitor's series, x = iteration: the built-in series of ipc/metrics.h (each a row of the metric table).
using SeriesId = ipc::SeriesId;
using ipc::kSeriesCount;
constexpr std::size_t series_index(SeriesId s) {
    return static_cast<std::size_t>(s);
}

struct RankMemory {
    int rank = 0;
    double allocated = 0, peak = 0, reserved = 0;
    std::array<double, ipc::kMemoryCategoryCount> current{},
        peak_by_category{};  ///< bytes per category, ipc::kMemoryCategories order
};

struct RankTiming {
    int rank = 0, tp = 0, pp = 0, dp = 0;
    double compute = 0, communication = 0, bubble = 0, total = 0;  ///< seconds per iteration
};

struct EventItem {
    int64_t seq = -1;
    double time = 0;
    int64_t iteration = -1;
    std::string kind;    ///< "run.start", "checkpoint_saved", "eval", "run.end", ...
    std::string detail;  ///< one readable line
    int severity = 0;    ///< 0 info, 1 warning, 2 error
};

struct RunStart {
    std::string run_id;
    nlohmann::json config, derived, topology;
    std::vector<std::string> hosts;
    int64_t iteration = 0;  ///< non-zero when resumed
    double time = 0;
};

struct RunEnd {
    std::string status;  ///< finished | stopped | interrupted | failed, or the app's own: crashed, lost
    std::string reason;
    int64_t iteration = -1;
    double time = 0;
};

struct LastStep {
    int64_t iteration = -1, consumed_tokens = 0, consumed_samples = 0, skipped_iterations = 0;
    double time = 0, loss = NAN, lr = NAN, grad_norm = NAN, loss_scale = NAN, iteration_time_s = NAN,
           tokens_per_sec = NAN, tflops = NAN, mfu = NAN;
};

/// Everything received since the GUI last looked, in arrival order.
struct Update {
    bool reset = false;  ///< a different run: the GUI drops what it shows first
    std::string run_id;
    std::array<std::vector<PlotPoint>, kSeriesCount> points;
    std::vector<EventItem> events;
    std::optional<RunStart> start;
    std::optional<RunEnd> end;
    std::optional<LastStep> last_step;
    std::optional<double> last_eval;
    std::optional<std::vector<RankMemory>> memory;  ///< the newest memory message
    int64_t memory_iteration = -1;
    std::optional<std::vector<RankTiming>> timings;  ///< the newest step's ranks
    /// Every other numeric field of the step records, by name ("mem_peak_bytes", "skipped_iterations",
    /// per rank "rank3.forward_s", "rank3.mem.peak"): what the Monitor's metric picker charts.
    std::map<std::string, std::vector<PlotPoint>> metrics;
    std::vector<store::SampleRecord> samples;  ///< text samples (topic sample), in arrival order
    int64_t messages = 0;                      ///< series messages in this update
    int64_t history_messages = 0;              ///< of which reloaded from the store

    bool empty() const;
    /// Appends `later` (received after this one).
    void merge(Update&& later);
};

/// Adds one message's contribution to `u` (unknown topics and fields are ignored).
void digest(Update& u, const ipc::Message& m);

/// Whether a step record's field has a built-in chart (Update::points) rather than a picker entry.
bool is_charted_field(const std::string& field);
/// The metric picker's numbers of a step record's body at iteration `it` (Update::metrics' names):
/// top-level numbers without a built-in chart, nested objects' ("mem.peak"), per rank ("rank3.forward_s").
void add_picker_metrics(const nlohmann::json& body, double it, std::map<std::string, std::vector<PlotPoint>>& metrics);

/// One readable line for an event-like message, and its severity.
EventItem describe(const ipc::Message& m);

/// Compute / communication / bubble of one rank's `time` record (seconds per iteration).
RankTiming rank_timing(const ipc::RankRecord& rank);
/// One rank's memory as the views draw it (categories in ipc::kMemoryCategories' order).
RankMemory rank_memory(const ipc::RankMemoryRecord& rank);

}  // namespace mwb::app
