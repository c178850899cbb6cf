#pragma once
// The GUI thread's copy of a watched run: full series as Traces (with their min/max index) and the
// newest state (description, end, last step, memory and step time per rank,
// events). Only the GUI thread touches it; it grows from Updates taken off the SeriesBuffer.
#include "app/live/digest.h"
#include "app/plot/trace.h"

#include <array>
#include <map>
#include <optional>
#include <vector>

namespace mwb::app {

struct RunTraces {
    std::string run_id;
    std::array<Trace, kSeriesCount> series;
    /// Every other recorded metric by name (Update::metrics); std::map: references stay valid as it grows.
    std::map<std::string, Trace> metrics;
    std::optional<RunStart> start;
    std::optional<RunEnd> end;
    LastStep last_step;
    std::optional<double> last_eval;
    std::vector<RankMemory> memory;
    int64_t memory_iteration = -1;
    std::vector<RankTiming> timings;
    std::vector<EventItem> events;
    std::vector<store::SampleRecord> samples;  ///< in arrival order (the Samples panel sorts)
    int64_t messages = 0, history_messages = 0;

    const Trace& operator[](SeriesId s) const { return series[series_index(s)]; }
    Trace& operator[](SeriesId s) { return series[series_index(s)]; }

    /// Appends an Update (clearing first when it starts a different run). Returns the number of
    /// events appended (the event log's new rows) and whether it reset (`reset`).
    std::size_t apply(Update&& u, bool* reset = nullptr);
    void clear();
    /// Points over all series.
    std::size_t total_points() const;
};

}  // namespace mwb::app
