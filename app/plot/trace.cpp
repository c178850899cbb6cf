#include "app/plot/trace.h"

#include <algorithm>
#include <cmath>

namespace mwb::app {

// ---- MinMaxIndex --------------------------------------------------------------------------------

void MinMaxIndex::clear() {
    levels_.clear();
    n_ = 0;
}

void MinMaxIndex::merge(Block& into, const Block& b) const {
    if (b.min < into.min || (b.min == into.min && b.imin < into.imin)) {
        into.min = b.min;
        into.imin = b.imin;
    }
    if (b.max > into.max || (b.max == into.max && b.imax < into.imax)) {
        into.max = b.max;
        into.imax = b.imax;
    }
}

void MinMaxIndex::append(std::span<const double> y) {
    const std::size_t i = n_++;
    const Block point{y[i], y[i], i, i};
    // Level k (blocks of kFanout^(k+1) points) exists once there are more than kFanout^k points.
    std::size_t size = kFanout;
    for (std::size_t k = 0; n_ > size / kFanout; ++k, size *= kFanout) {
        if (k == levels_.size()) {
            // its first block starts with the points before i: the previous level's first block
            levels_.emplace_back();
            levels_[k].push_back(k == 0 ? Block{y[0], y[0], 0, 0} : levels_[k - 1][0]);
        }
        auto& level = levels_[k];
        const std::size_t b = i / size;
        if (b == level.size()) {
            level.push_back(point);
        } else {
            merge(level[b], point);
        }
    }
}

void MinMaxIndex::rebuild(std::span<const double> y) {
    clear();
    for (std::size_t i = 0; i < y.size(); ++i) append(y.first(i + 1));
}

std::pair<std::size_t, std::size_t> MinMaxIndex::argminmax(std::span<const double> y, std::size_t i0,
                                                           std::size_t i1) const {
    Block best{y[i0], y[i0], i0, i0};
    std::size_t i = i0 + 1;
    while (i < i1) {
        // the largest aligned block starting at i that ends within [i, i1)
        std::size_t k = 0, size = 1;
        while (k < levels_.size() && i % (size * kFanout) == 0 && i + size * kFanout <= i1) {
            size *= kFanout;
            ++k;
        }
        if (k == 0) {
            merge(best, Block{y[i], y[i], i, i});
        } else {
            merge(best, levels_[k - 1][i / size]);
        }
        i += size;
    }
    return {best.imin, best.imax};
}

// ---- Trace ----------------------------------------------------------------------------------------

void Trace::append(double px, double py) {
    if (!std::isfinite(py) || !std::isfinite(px)) return;
    if (!x.empty() && px < x.back()) {
        const auto keep = static_cast<std::size_t>(std::upper_bound(x.begin(), x.end(), px) - x.begin());
        x.resize(keep);
        y.resize(keep);
        index.rebuild(y);
    }
    x.push_back(px);
    y.push_back(py);
    index.append(y);
}

void Trace::clear() {
    x.clear();
    y.clear();
    index.clear();
}

// ---- decimation -----------------------------------------------------------------------------------

void decimate_minmax(const Trace& t, double x0, double x1, int columns, std::vector<PlotPoint>& out) {
    out.clear();
    if (t.empty() || columns <= 0 || !(x1 >= x0)) return;
    const auto& xs = t.x;
    const auto lower = [&](double v) {
        return static_cast<std::size_t>(std::lower_bound(xs.begin(), xs.end(), v) - xs.begin());
    };
    std::size_t begin = lower(x0);
    const std::size_t end = static_cast<std::size_t>(std::upper_bound(xs.begin(), xs.end(), x1) - xs.begin());
    if (begin > 0) out.push_back({xs[begin - 1], t.y[begin - 1]});  // reaches the left edge
    const double width = (x1 - x0) / columns;
    std::size_t i = begin;
    for (int c = 0; c < columns && i < end; ++c) {
        const double right = c + 1 == columns ? x1 : x0 + width * (c + 1);
        std::size_t j = i;
        if (c + 1 == columns) {
            j = end;
        } else {
            j = std::min(
                end, static_cast<std::size_t>(std::lower_bound(xs.begin() + static_cast<std::ptrdiff_t>(i),
                                                               xs.begin() + static_cast<std::ptrdiff_t>(end), right) -
                                              xs.begin()));
        }
        if (j <= i) continue;
        if (j - i <= 2) {
            for (std::size_t k = i; k < j; ++k) out.push_back({xs[k], t.y[k]});
        } else {
            auto [lo, hi] = t.index.argminmax(t.y, i, j);
            if (lo > hi) std::swap(lo, hi);
            out.push_back({xs[lo], t.y[lo]});
            if (hi != lo) out.push_back({xs[hi], t.y[hi]});
        }
        i = j;
    }
    if (end < xs.size()) out.push_back({xs[end], t.y[end]});  // reaches the right edge
}

void decimate_mean(const Trace& t, double x0, double x1, int columns, std::vector<PlotPoint>& out) {
    out.clear();
    if (t.empty() || columns <= 0 || !(x1 >= x0)) return;
    const auto& xs = t.x;
    std::size_t i = static_cast<std::size_t>(std::lower_bound(xs.begin(), xs.end(), x0) - xs.begin());
    const std::size_t end = static_cast<std::size_t>(std::upper_bound(xs.begin(), xs.end(), x1) - xs.begin());
    const double width = (x1 - x0) / columns;
    for (int c = 0; c < columns && i < end; ++c) {
        const double right = c + 1 == columns ? x1 : x0 + width * (c + 1);
        double sx = 0, sy = 0;
        std::size_t n = 0;
        while (i < end && (xs[i] < right || c + 1 == columns)) {
            sx += xs[i];
            sy += t.y[i];
            ++n;
            ++i;
        }
        if (n) out.push_back({sx / static_cast<double>(n), sy / static_cast<double>(n)});
    }
}

// ---- Ema ------------------------------------------------------------------------------------------

void Ema::reset(double weight) {
    w_ = std::clamp(weight, 0.0, 0.999);
    acc_ = 0;
    pow_ = 1;
}

double Ema::add(double y) {
    acc_ = w_ * acc_ + (1 - w_) * y;
    pow_ *= w_;
    return pow_ < 1 ? acc_ / (1 - pow_) : y;
}

}  // namespace mwb::app
