#include "app/live/run_traces.h"

namespace mwb::app {

void RunTraces::clear() {
    *this = RunTraces{};
}

std::size_t RunTraces::apply(Update&& u, bool* reset) {
    if (reset) *reset = u.reset;
    if (u.reset) clear();
    if (!u.run_id.empty()) run_id = u.run_id;
    for (int s = 0; s < kSeriesCount; ++s) {
        Trace& t = series[static_cast<std::size_t>(s)];
        for (const PlotPoint& p : u.points[static_cast<std::size_t>(s)]) t.append(p.x, p.y);
    }
    for (auto& [k, pts] : u.metrics) {
        Trace& t = metrics[k];
        for (const PlotPoint& p : pts) t.append(p.x, p.y);
    }
    if (u.start) {
        start = std::move(u.start);
        if (!u.end) end.reset();
    }
    if (u.end) end = std::move(u.end);
    if (u.last_step) last_step = *u.last_step;
    if (u.last_eval) last_eval = u.last_eval;
    if (u.memory) {
        memory = std::move(*u.memory);
        memory_iteration = u.memory_iteration;
    }
    if (u.timings) timings = std::move(*u.timings);
    const std::size_t added = u.events.size();
    events.insert(events.end(), std::make_move_iterator(u.events.begin()), std::make_move_iterator(u.events.end()));
    samples.insert(samples.end(), std::make_move_iterator(u.samples.begin()), std::make_move_iterator(u.samples.end()));
    messages += u.messages;
    history_messages += u.history_messages;
    return added;
}

std::size_t RunTraces::total_points() const {
    std::size_t n = 0;
    for (const auto& t : series) n += t.size();
    for (const auto& [k, t] : metrics) n += t.size();
    return n;
}

}  // namespace mwb::app
