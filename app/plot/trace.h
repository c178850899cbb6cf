#pragma once
// A series as the app keeps it in memory (x ascending, y finite) with a min/max index, and the
// decimation that turns any number of points into at most two per pixel column before they reach
// QtCharts (PlotJuggler's rule: never hand a chart more points than it has pixels). Qt-free.
//
// MinMaxIndex is a pyramid of blocks of 16, 256, 4096, ... points holding each block's smallest and
// largest value and where they are; the extremes of any index range come from O(16 · levels) entries,
// so decimating 1M points to 1,000 columns reads ~100k entries instead of 1M points (and appending a
// point updates one entry per level).
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace mwb::app {

class MinMaxIndex {
public:
    static constexpr std::size_t kFanout = 16;

    void clear();
    /// Appends the value of point size(); `y` holds every value so far (y.back() is the new one).
    void append(std::span<const double> y);
    void rebuild(std::span<const double> y);
    /// Indices of the smallest and the largest value in [i0, i1), i0 < i1 <= y.size().
    std::pair<std::size_t, std::size_t> argminmax(std::span<const double> y, std::size_t i0, std::size_t i1) const;
    std::size_t size() const { return n_; }

private:
    struct Block {
        double min, max;
        std::size_t imin, imax;
    };
    void merge(Block& into, const Block& b) const;
    std::vector<std::vector<Block>> levels_;  // levels_[k]: blocks of kFanout^(k+1) points
    std::size_t n_ = 0;
};

struct Trace {
    std::vector<double> x, y;
    MinMaxIndex index;

    /// Adds a point; non-finite y is skipped. An x below the last one (a run resumed from an older
    /// checkpoint repeats iterations) first drops the points beyond it: the newer values replace them.
    void append(double x, double y);
    void clear();
    std::size_t size() const { return x.size(); }
    bool empty() const { return x.empty(); }
    double x_first() const { return x.front(); }
    double x_last() const { return x.back(); }
};

struct PlotPoint {
    double x, y;
};

/// The points of `t` to draw for x in [x0, x1] on `columns` pixel columns: each column's first point
/// when it has at most two, else its minimum and maximum in the order they occur; plus the nearest
/// point outside each end so the line reaches the edges. Appends to `out` (cleared first).
void decimate_minmax(const Trace& t, double x0, double x1, int columns, std::vector<PlotPoint>& out);

/// The mean of `t` per pixel column for x in [x0, x1] (stacked areas, where min/max of each layer
/// would not stack). Columns without points are left out.
void decimate_mean(const Trace& t, double x0, double x1, int columns, std::vector<PlotPoint>& out);

/// Exponential moving average as TensorBoard smooths: s_k = w·s_{k-1} + (1 − w)·y_k, debiased by
/// 1 − w^k. Incremental: feed points in order.
class Ema {
public:
    explicit Ema(double weight = 0.9) : w_(weight) {}
    void reset(double weight);
    double add(double y);
    double weight() const { return w_; }

private:
    double w_, acc_ = 0, pow_ = 1;
};

}  // namespace mwb::app
