#pragma once
// A run as the store holds it, turned into the Update the Monitor would have built from its messages:
// what lets the app restart (or attach to a run it recorded before) and show the whole history at
// once, then continue live from the store's next_seq without a gap. Qt-free.
#include "app/live/digest.h"
#include "mwb/store/store.h"

namespace mwb::app {

/// Series (every point when the run has at most `max_points` per metric, else min/max per bucket),
/// the metric picker's series (Update::metrics), evaluations, events, the run's start and end, the
/// newest memory sample per rank, and the last step.
/// Sets `next_seq` to the first seq the store lacks.
/// The points of a stored series to draw: every point when raw, else each bucket's minimum and maximum
/// (at its first and last iteration), so no spike is lost.
std::vector<PlotPoint> series_points(const store::Series& series);

Update load_run_history(store::Store& store, const std::string& uid, int64_t& next_seq, int max_points = 1 << 20);

}  // namespace mwb::app
