// Downsampled metric series. Steps are grouped into blocks of block_iters iterations whose
// count/min/max/sum per metric live in step_blocks (kept current on every commit). A query splits
// [x_from, x_to] into equal-width buckets; a block that falls inside one bucket contributes its
// aggregate, a block cut by a bucket edge contributes its points. For N points in B buckets that reads
// about N/32 block rows plus at most 32 points per edge: exact min/max/count, milliseconds for 1M points.
#include "mwb/store/error.h"
#include "mwb/store/schema.h"
#include "mwb/store/store.h"
#include "statements.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mwb::store {

namespace {

constexpr int64_t kPointsPerBlock = 32;

/// Equal-width buckets over the integer iterations [lo, hi]: bucket k holds x with
/// floor((x - lo) * B / (hi - lo + 1)) == k.
class Bucketer {
public:
    Bucketer(int64_t lo, int64_t hi, int buckets)
        : lo_(lo), span_(hi - lo + 1), b_(buckets), acc_(static_cast<std::size_t>(buckets)) {}

    int index(int64_t x) const {
        return static_cast<int>((x - lo_) * b_ / span_);  // < 2^63: iterations < 1e12, buckets <= 2^20
    }
    void add_point(int64_t x, double y) { add(index(x), x, x, 1, y, y, y); }
    void add_block(int64_t x_min, int64_t x_max, int64_t n, double y_min, double y_max, double y_sum) {
        add(index(x_min), x_min, x_max, n, y_min, y_max, y_sum);
    }
    /// The non-empty buckets, in order.
    std::vector<Bucket> result(int64_t& points) const {
        std::vector<Bucket> out;
        points = 0;
        for (const Acc& a : acc_) {
            if (a.n == 0) continue;
            points += a.n;
            out.push_back({a.x_min, a.x_max, a.n, a.y_min, a.y_max, a.y_sum / static_cast<double>(a.n)});
        }
        return out;
    }

private:
    struct Acc {
        int64_t x_min = std::numeric_limits<int64_t>::max(), x_max = std::numeric_limits<int64_t>::min(), n = 0;
        double y_min = INFINITY, y_max = -INFINITY, y_sum = 0;
    };
    void add(int k, int64_t x_min, int64_t x_max, int64_t n, double y_min, double y_max, double y_sum) {
        Acc& a = acc_[static_cast<std::size_t>(k)];
        a.x_min = std::min(a.x_min, x_min);
        a.x_max = std::max(a.x_max, x_max);
        a.n += n;
        a.y_min = std::min(a.y_min, y_min);
        a.y_max = std::max(a.y_max, y_max);
        a.y_sum += y_sum;
    }
    int64_t lo_, span_;
    int b_;
    std::vector<Acc> acc_;
};

bool known_metric(const std::string& m) {
    const auto ms = step_metrics();
    return std::find(ms.begin(), ms.end(), m) != ms.end();
}

/// The SQL expression of a metric: a column of steps, or a field of step_details.body (name checked:
/// [a-z0-9_]).
std::string metric_expression(const std::string& metric, const std::string& file) {
    if (known_metric(metric)) return metric;
    const bool plain = !metric.empty() && metric.size() <= 64 && std::all_of(metric.begin(), metric.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    });
    if (!plain) throw Error("store " + file + ": '" + metric + "' is not a metric name ([a-z0-9_])");
    return "json_extract(body, '$." + metric + "')";
}

int clamp_buckets(int b) {
    return std::clamp(b, 1, 1 << 20);
}

}  // namespace

int64_t Store::block_iters(int64_t run) {
    if (const auto it = block_iters_.find(run); it != block_iters_.end()) return it->second;
    auto& g = st_->get_block_iters;
    g.bind(1, run);
    int64_t w = 0, log_interval = 0;
    if (g.step()) {
        w = g.int64(0);
        log_interval = g.is_null(1) ? 0 : g.int64(1);
    }
    g.reset();
    if (w <= 0) {
        // About kPointsPerBlock step records per block: records come every log_interval iterations.
        w = kPointsPerBlock * std::max<int64_t>(1, log_interval);
        st_->set_block_iters.bind(1, w).bind(2, run).run();
    }
    block_iters_[run] = w;
    return w;
}

void Store::refresh_blocks() {
    auto& agg = st_->block_aggregates;
    const auto metrics = step_metrics();
    for (const auto& [run, block] : dirty_) {
        const int64_t w = block_iters(run);
        agg.bind(1, run).bind(2, block * w).bind(3, (block + 1) * w);
        if (!agg.step()) {
            agg.reset();
            continue;
        }
        for (std::size_t i = 0; i < metrics.size(); ++i) {
            const int c = static_cast<int>(6 * i);
            const std::string name(metrics[i]);
            if (agg.int64(c) == 0) {
                st_->delete_block.bind(1, run).bind(2, name).bind(3, block).run();
                continue;
            }
            st_->upsert_block.bind(1, run).bind(2, name).bind(3, block).bind(4, agg.int64(c));
            st_->upsert_block.bind(5, agg.real(c + 1)).bind(6, agg.real(c + 2)).bind(7, agg.real(c + 3));
            st_->upsert_block.bind(8, agg.int64(c + 4)).bind(9, agg.int64(c + 5)).run();
        }
        agg.reset();
    }
    dirty_.clear();
}

void Store::rebuild_missing_blocks() {
    // Runs whose steps have no blocks yet (a store migrated from version 1).
    Statement s = db_.prepare(
        "SELECT r.id FROM runs r WHERE EXISTS (SELECT 1 FROM steps WHERE run = r.id) "
        "AND NOT EXISTS (SELECT 1 FROM step_blocks WHERE run = r.id)");
    std::vector<int64_t> runs;
    while (s.step()) runs.push_back(s.int64(0));
    if (runs.empty()) return;
    Transaction t(*this);
    for (int64_t run : runs) {
        const int64_t w = block_iters(run);
        Statement its = db_.prepare("SELECT DISTINCT iteration / ? FROM steps WHERE run = ?");
        its.bind(1, w).bind(2, run);
        while (its.step()) dirty_.insert({run, its.int64(0)});
    }
    t.commit();
}

Series Store::series_brute_force(const std::string& uid, const std::string& metric, const SeriesQuery& q) {
    const int64_t run = run_row_or_throw(uid);
    const std::string expr = metric_expression(metric, file());
    Series out{uid, metric, {}, 0, false};
    // Fields without a column live in step_details, beside the step with the same (run, seq).
    const std::string from = known_metric(metric) ? " FROM steps" : " FROM steps JOIN step_details USING (run, seq)";
    Statement range =
        db_.prepare("SELECT min(iteration), max(iteration)" + from + " WHERE run = ? AND " + expr + " IS NOT NULL");
    range.bind(1, run);
    if (!range.step() || range.is_null(0)) return out;
    const int64_t lo = q.x_from.value_or(range.int64(0)), hi = q.x_to.value_or(range.int64(1));
    if (hi < lo) return out;
    Statement pts =
        db_.prepare("SELECT iteration, " + expr + from + " WHERE run = ? AND iteration BETWEEN ? AND ? AND " + expr +
                    " IS NOT NULL ORDER BY iteration, seq");
    pts.bind(1, run).bind(2, lo).bind(3, hi);
    std::vector<std::pair<int64_t, double>> points;
    while (pts.step()) points.emplace_back(pts.int64(0), pts.real(1));
    const int b = clamp_buckets(q.buckets);
    out.points = static_cast<int64_t>(points.size());
    if (out.points <= b) {
        out.raw = true;
        for (const auto& [x, y] : points) out.buckets.push_back({x, x, 1, y, y, y});
        return out;
    }
    Bucketer bucketer(lo, hi, b);
    for (const auto& [x, y] : points) bucketer.add_point(x, y);
    out.buckets = bucketer.result(out.points);
    return out;
}

Series Store::series(const std::string& uid, const std::string& metric, const SeriesQuery& q) {
    if (!known_metric(metric)) return series_brute_force(uid, metric, q);  // no blocks for extra fields
    const int64_t run = run_row_or_throw(uid);
    const int64_t w = block_iters(run);
    Series out{uid, metric, {}, 0, false};
    Statement range = db_.prepare("SELECT min(x_min), max(x_max) FROM step_blocks WHERE run = ? AND metric = ?");
    range.bind(1, run).bind(2, metric);
    if (!range.step() || range.is_null(0)) return out;
    const int64_t lo = q.x_from.value_or(range.int64(0)), hi = q.x_to.value_or(range.int64(1));
    if (hi < lo) return out;
    const int b = clamp_buckets(q.buckets);
    const int64_t first_block = (lo >= 0 ? lo : lo - w + 1) / w, last_block = (hi >= 0 ? hi : hi - w + 1) / w;

    Statement blocks = db_.prepare(
        "SELECT n, y_min, y_max, y_sum, x_min, x_max FROM step_blocks "
        "WHERE run = ? AND metric = ? AND block BETWEEN ? AND ? ORDER BY block");
    Statement points =
        db_.prepare("SELECT iteration, " + metric + " FROM steps WHERE run = ? AND iteration BETWEEN ? AND ? AND " +
                    metric + " IS NOT NULL ORDER BY iteration, seq");
    auto read_points = [&](int64_t from, int64_t to, auto&& f) {
        points.bind(1, run).bind(2, from).bind(3, to);
        while (points.step()) f(points.int64(0), points.real(1));
        points.reset();
    };

    Bucketer bucketer(lo, hi, b);
    blocks.bind(1, run).bind(2, metric).bind(3, first_block).bind(4, last_block);
    while (blocks.step()) {
        const int64_t x_min = blocks.int64(4), x_max = blocks.int64(5);
        if (x_max < lo || x_min > hi) continue;
        if (x_min >= lo && x_max <= hi && bucketer.index(x_min) == bucketer.index(x_max)) {
            bucketer.add_block(x_min, x_max, blocks.int64(0), blocks.real(1), blocks.real(2), blocks.real(3));
        } else {  // cut by a bucket edge or by the range: its points one by one
            read_points(std::max(lo, x_min), std::min(hi, x_max),
                        [&](int64_t x, double y) { bucketer.add_point(x, y); });
        }
    }
    out.buckets = bucketer.result(out.points);
    if (out.points <= b) {  // few enough to return every point
        out.raw = true;
        out.buckets.clear();
        std::vector<std::pair<int64_t, double>> all;
        read_points(lo, hi, [&](int64_t x, double y) { all.emplace_back(x, y); });
        for (const auto& [x, y] : all) out.buckets.push_back({x, x, 1, y, y, y});
    }
    return out;
}

std::vector<Series> Store::series(const std::vector<std::string>& uids, const std::string& metric,
                                  const SeriesQuery& q) {
    std::vector<Series> out;
    out.reserve(uids.size());
    for (const auto& uid : uids) out.push_back(series(uid, metric, q));
    return out;
}

}  // namespace mwb::store
