#include "app/live/history_loader.h"

#include "mwb/ipc/json_get.h"
#include "mwb/ipc/metrics.h"
#include "mwb/store/schema.h"

#include <algorithm>
#include <map>
#include <string_view>

namespace mwb::app {

std::vector<PlotPoint> series_points(const store::Series& s) {
    std::vector<PlotPoint> out;
    out.reserve(s.buckets.size() * (s.raw ? 1 : 2));
    for (const auto& b : s.buckets) {
        if (s.raw || b.n == 1 || b.x_min == b.x_max) {
            out.push_back({static_cast<double>(b.x_min), b.y_mean});
        } else {
            out.push_back({static_cast<double>(b.x_min), b.y_min});
            out.push_back({static_cast<double>(b.x_max), b.y_max});
        }
    }
    return out;
}

namespace {

std::vector<PlotPoint> series(store::Store& st, const std::string& uid, const char* metric, int max_points) {
    store::SeriesQuery q;
    q.buckets = max_points;
    return series_points(st.series(uid, metric, q));
}

ipc::Message as_message(const std::string& uid, const store::EventRecord& e) {
    ipc::Message m;
    m.topic = e.topic;
    m.run_id = uid;
    m.seq = e.seq;
    m.time = e.time.value_or(0);
    m.body = e.body.is_object() ? e.body : nlohmann::json::object();
    if (!e.kind.empty() && !m.body.contains("kind")) m.body["kind"] = e.kind;
    if (e.iteration && !m.body.contains("iteration")) m.body["iteration"] = *e.iteration;
    return m;
}

/// The metric picker's series (Update::metrics, named as the live digest names them): the store's
/// columns without a built-in chart (min/max buckets, as the built-in series), and what only the
/// records' step_details keep (per rank, nested, new fields), from at most kDetailRecords records
/// spread evenly over the run (every record of any run up to that size).
void load_picker_metrics(store::Store& st, const std::string& uid, int max_points,
                         std::map<std::string, std::vector<PlotPoint>>& metrics) {
    // the step time breakdown's columns are the slowest rank's: the picker has them per rank
    for (std::string_view m : store::step_metrics()) {
        const std::string name(m);
        const ipc::Metric* row = ipc::find_metric(m);
        if (is_charted_field(name) || (row && row->source == ipc::MetricSource::SlowestRank)) continue;
        auto pts = series(st, uid, name.c_str(), max_points);
        if (!pts.empty()) metrics[name] = std::move(pts);
    }
    // Store has no reader of step_details: read the table (its schema, store/src/schema.cpp) directly
    constexpr int64_t kDetailRecords = 1 << 16;
    const auto& db = st.database();
    store::Statement count =
        db.prepare("SELECT count(*) FROM step_details WHERE run = (SELECT id FROM runs WHERE uid = ?)");
    count.bind(1, uid);
    const int64_t n = count.step() ? count.int64(0) : 0;
    if (n == 0) return;
    const int64_t stride = (n + kDetailRecords - 1) / kDetailRecords;
    store::Statement rows = db.prepare(
        "SELECT s.iteration, d.body FROM step_details d JOIN steps s ON s.run = d.run AND s.seq = d.seq "
        "WHERE d.run = (SELECT id FROM runs WHERE uid = ?) ORDER BY d.seq");
    rows.bind(1, uid);
    for (int64_t k = 0; rows.step(); ++k) {
        if (k % stride) continue;
        const auto body = nlohmann::json::parse(rows.text(1), nullptr, false);
        if (body.is_object()) add_picker_metrics(body, static_cast<double>(rows.int64(0)), metrics);
    }
}

}  // namespace

Update load_run_history(store::Store& st, const std::string& uid, int64_t& next_seq, int max_points) {
    Update u;
    u.run_id = uid;
    next_seq = st.next_seq(uid);
    const auto record = st.run(uid);
    if (!record) return u;

    // the series stored as a column of their own, as the metric table lists them
    for (const ipc::Metric& m : ipc::metrics())
        if (m.source == ipc::MetricSource::Step && m.series != SeriesId::Count && !m.column.empty())
            u.points[series_index(m.series)] = series(st, uid, std::string(m.column).c_str(), max_points);
    for (const auto& w : st.wall_clock(uid, max_points))  // seconds since the run was created
        u.points[series_index(SeriesId::Time)].push_back(
            {static_cast<double>(w.iteration), record->created.value_or(0) + w.seconds});
    // mfu: the store keeps it only in the records' extra fields, so it is derived (the table's
    // derivation) from the tflops_per_device column and the configured peak
    const double peak = ipc::get_number(record->config, "peak_tflops_per_device").value_or(0.0);
    for (const PlotPoint& p : u.points[series_index(SeriesId::Tflops)])
        if (const auto mfu = ipc::mfu(p.y, peak)) u.points[series_index(SeriesId::Mfu)].push_back({p.x, *mfu});

    // the time breakdown from the store's per-phase columns (the slowest rank in each phase), split
    // into compute / communication / bubble the table's way
    std::vector<std::vector<PlotPoint>> work;
    std::vector<PlotPoint> comm, bubble;
    for (std::size_t p = 0; p < ipc::kPhaseCount; ++p) {
        const ipc::Metric& m = ipc::phase_metric(static_cast<ipc::Phase>(p));
        auto pts = series(st, uid, std::string(m.column).c_str(), max_points);
        if (m.phase == ipc::PhaseRole::Work)
            work.push_back(std::move(pts));
        else if (m.phase == ipc::PhaseRole::Communication)
            comm = std::move(pts);
        else if (m.phase == ipc::PhaseRole::Bubble)
            bubble = std::move(pts);
    }
    bool aligned = !comm.empty() && bubble.size() == comm.size();
    for (const auto& w : work) aligned = aligned && w.size() == comm.size();
    if (aligned) {
        auto& c = u.points[series_index(SeriesId::Compute)];
        for (std::size_t i = 0; i < comm.size(); ++i) {
            double total = 0;
            for (const auto& w : work) total += w[i].y;
            c.push_back({comm[i].x, ipc::split_time(total, comm[i].y, bubble[i].y).compute});
        }
        u.points[series_index(SeriesId::Communication)] = comm;
        u.points[series_index(SeriesId::Bubble)] = bubble;
    }

    load_picker_metrics(st, uid, max_points, u.metrics);

    // the run's description, then events and evaluations in seq order
    std::vector<ipc::Message> messages;
    for (const auto& e : st.events(uid)) messages.push_back(as_message(uid, e));
    for (const auto& e : st.evals(uid)) {
        ipc::Message m;
        m.topic = "eval";
        m.run_id = uid;
        m.seq = e.seq;
        m.time = e.time.value_or(0);
        m.body = e.body;
        messages.push_back(std::move(m));
    }
    std::sort(messages.begin(), messages.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
    Update described;
    for (const auto& m : messages) digest(described, m);
    u.points[series_index(SeriesId::ValLoss)] = std::move(described.points[series_index(SeriesId::ValLoss)]);
    u.events = std::move(described.events);
    u.last_eval = described.last_eval;
    u.end = described.end;
    if (!u.end && (record->status == "interrupted" || record->status == "failed")) {
        // the run never said it ended, but a follower (or the app) marked it gone: show it as over
        RunEnd e;
        e.status = record->status;
        e.reason = record->reason;
        e.iteration = record->iteration;
        e.time = record->finished.value_or(0);
        u.end = e;
    }
    u.start = described.start;
    if (!u.start) {
        RunStart s;
        s.run_id = uid;
        s.config = record->config.is_object() ? record->config : nlohmann::json::object();
        s.topology = record->topology.is_object() ? record->topology : nlohmann::json::object();
        s.derived = record->derived.is_object() ? record->derived : nlohmann::json::object();
        s.time = record->created.value_or(0);
        u.start = s;
    }

    // the newest memory sample of each rank
    std::map<int64_t, store::MemorySample> newest;
    for (auto& m : st.memory(uid)) {
        auto& slot = newest[m.rank];
        if (m.seq >= slot.seq) slot = std::move(m);
    }
    if (!newest.empty()) {
        std::vector<RankMemory> ranks;
        for (const auto& [rank, m] : newest) {
            ipc::RankMemoryRecord rec;
            rec.rank = static_cast<int>(rank);
            rec.mem.allocated = m.allocated.value_or(0);
            rec.mem.peak = m.peak.value_or(0);
            rec.mem.reserved = m.reserved.value_or(0);
            for (std::size_t c = 0; c < ipc::kMemoryCategoryCount; ++c) {
                const std::string key(ipc::kMemoryCategories[c]);
                if (!m.by_category.is_object() || !m.by_category.contains(key)) continue;
                const auto& v = m.by_category[key];
                rec.mem.by_category[c] = {ipc::get_integral(v, "current").value_or(0),
                                          ipc::get_integral(v, "peak").value_or(0)};
            }
            const RankMemory r = rank_memory(rec);
            ranks.push_back(r);
            u.memory_iteration = std::max<int64_t>(u.memory_iteration, m.iteration.value_or(-1));
        }
        u.memory = std::move(ranks);
    }

    // the last step, from the last points
    const auto last = [&](SeriesId id) {
        const auto& p = u.points[series_index(id)];
        return p.empty() ? NAN : p.back().y;
    };
    if (!u.points[series_index(SeriesId::Loss)].empty() || record->iteration > 0) {
        LastStep s;
        s.iteration = record->iteration;
        s.loss = last(SeriesId::Loss);
        s.lr = last(SeriesId::Lr);
        s.grad_norm = last(SeriesId::GradNorm);
        s.loss_scale = last(SeriesId::LossScale);
        s.tokens_per_sec = last(SeriesId::TokensPerSec);
        s.tflops = last(SeriesId::Tflops);
        s.mfu = last(SeriesId::Mfu);
        s.iteration_time_s = last(SeriesId::IterationTime);
        store::SeriesQuery q;
        q.buckets = 1;
        q.x_from = record->iteration;
        const auto tokens = st.series(uid, "consumed_tokens", q);
        if (!tokens.buckets.empty()) s.consumed_tokens = static_cast<int64_t>(tokens.buckets.back().y_max);
        u.last_step = s;
    }
    u.samples = st.samples(uid);
    std::reverse(u.samples.begin(), u.samples.end());  // oldest first, as they arrived
    u.history_messages = next_seq;
    return u;
}

}  // namespace mwb::app
