#include "app/monitor/rank_grid.h"

#include "app/core/format.h"
#include "app/core/theme.h"

#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <map>

namespace mwb::app {

namespace {

int topology_size(const RunTraces& t, const char* key) {
    if (!t.start || !t.start->topology.is_object()) return 1;
    const auto it = t.start->topology.find(key);
    return it != t.start->topology.end() && it->is_number_integer() ? std::max(1, it->get<int>()) : 1;
}

constexpr int kLegend = 22;  // the colour ramp's row under the grid

}  // namespace

std::vector<RankCell> rank_cells(const RunTraces& t) {
    std::map<int, RankCell> by_rank;
    for (const RankTiming& r : t.timings) {
        RankCell& c = by_rank[r.rank];
        c.rank = r.rank;
        c.tp = r.tp;
        c.pp = r.pp;
        c.dp = r.dp;
        c.step_time = r.compute + r.communication + r.bubble;
    }
    const int tp = topology_size(t, "tensor_model_parallel_size");
    const int dp = topology_size(t, "data_parallel_size");
    for (const RankMemory& m : t.memory) {
        auto [it, fresh] = by_rank.try_emplace(m.rank);
        RankCell& c = it->second;
        if (fresh) {  // no timing for this rank: Megatron's default order tp-dp-pp
            c.rank = m.rank;
            c.tp = m.rank % tp;
            c.dp = (m.rank / tp) % dp;
            c.pp = m.rank / (tp * dp);
        }
        c.memory = m.peak;
    }
    std::vector<RankCell> out;
    out.reserve(by_rank.size());
    for (auto& [rank, c] : by_rank) out.push_back(c);
    return out;
}

RankGrid::RankGrid(QWidget* parent) : QWidget(parent) {
    setMouseTracking(true);
    setMinimumHeight(110);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
}

void RankGrid::setCells(std::vector<RankCell> cells) {
    cells_ = std::move(cells);
    std::sort(cells_.begin(), cells_.end(), [](const RankCell& a, const RankCell& b) { return a.rank < b.rank; });
    updateGeometry();
    update();
}

void RankGrid::setMetric(Metric metric) {
    if (metric == metric_) return;
    metric_ = metric;
    update();
    emit metricChanged(metric);
}

void RankGrid::setCapacity(double bytes) {
    capacity_ = bytes;
    update();
}

double RankGrid::value(const RankCell& c) const {
    return metric_ == Metric::Memory ? c.memory : c.step_time;
}

std::vector<int> RankGrid::flagged() const {
    std::vector<double> values;
    for (const auto& c : cells_)
        if (value(c) >= 0) values.push_back(value(c));
    std::vector<int> out;
    if (values.empty()) return out;
    std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2), values.end());
    const double median = values[values.size() / 2];
    for (const auto& c : cells_) {
        const double v = value(c);
        if (v < 0) continue;
        const bool bad =
            metric_ == Metric::Memory ? capacity_ > 0 && v > 0.9 * capacity_ : cells_.size() > 1 && v > 1.15 * median;
        if (bad) out.push_back(c.rank);
    }
    return out;
}

RankGrid::Geometry RankGrid::geometry() const {
    Geometry g;
    for (const auto& c : cells_) {
        g.tp = std::max(g.tp, c.tp + 1);
        g.pp = std::max(g.pp, c.pp + 1);
        g.dp = std::max(g.dp, c.dp + 1);
    }
    g.left = fontMetrics().horizontalAdvance(QStringLiteral("PP 00 ")) + 4;
    g.top = 4;
    const int columns = g.tp * g.dp;
    const int avail_w = std::max(40, width() - g.left - 8 - (g.dp - 1) * g.gap);
    const int avail_h = std::max(20, height() - g.top - kLegend - 8);
    g.cell = std::clamp(std::min(avail_w / std::max(1, columns), avail_h / std::max(1, g.pp)), 3, 40);
    return g;
}

QRect RankGrid::rectOf(const RankCell& c, const Geometry& g) {
    const int x = g.left + (c.dp * g.tp + c.tp) * g.cell + c.dp * g.gap;
    const int y = g.top + c.pp * g.cell;
    return QRect(x, y, g.cell - 1, g.cell - 1);
}

QRect RankGrid::cellRect(int rank) const {
    for (const auto& c : cells_)
        if (c.rank == rank) return rectOf(c, geometry());
    return {};
}

QSize RankGrid::sizeHint() const {
    const Geometry g = geometry();
    return QSize(360, std::min(400, g.top + g.pp * 18 + kLegend + 12));
}

void RankGrid::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QPalette pal = palette();
    if (cells_.empty()) {
        p.setPen(pal.color(QPalette::PlaceholderText));
        p.drawText(rect(), Qt::AlignCenter, tr("No per-rank data yet"));
        return;
    }
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const auto& c : cells_)
        if (value(c) >= 0) {
            lo = std::min(lo, value(c));
            hi = std::max(hi, value(c));
        }
    const std::vector<int> bad = flagged();
    const Geometry g = geometry();
    p.setPen(pal.color(QPalette::WindowText));
    for (int s = 0; s < g.pp; ++s)
        p.drawText(QRect(0, g.top + s * g.cell, g.left - 4, g.cell), Qt::AlignRight | Qt::AlignVCenter,
                   QStringLiteral("PP %1").arg(s));
    std::vector<bool> is_bad(cells_.size());
    for (std::size_t i = 0; i < cells_.size(); ++i)
        is_bad[i] = std::binary_search(bad.begin(), bad.end(), cells_[i].rank);  // flagged() is in rank order
    for (std::size_t i = 0; i < cells_.size(); ++i) {
        const RankCell& c = cells_[i];
        const QRect r = rectOf(c, g);
        const double v = value(c);
        const QColor fill = v < 0 ? pal.color(QPalette::Mid) : ramp_color(hi > lo ? (v - lo) / (hi - lo) : 0.5);
        p.fillRect(r, fill);
        if (is_bad[i]) {
            p.setPen(QPen(error_color(), std::max(2, g.cell / 6)));
            p.drawRect(r.adjusted(1, 1, -1, -1));
        }
    }
    // the ramp's legend: smallest .. largest value
    const int y = g.top + g.pp * g.cell + 6;
    const int w = std::clamp(width() / 4, 40, 160);
    for (int i = 0; i < w; ++i)
        p.fillRect(QRect(g.left + i, y, 1, 8), ramp_color(static_cast<double>(i) / std::max(1, w - 1)));
    const auto fmt = [this](double v) { return metric_ == Metric::Memory ? format_bytes(v) : format_duration(v); };
    p.setPen(pal.color(QPalette::WindowText));
    QString text = std::isfinite(lo) ? QStringLiteral("%1 … %2").arg(fmt(lo), fmt(hi)) : tr("no data");
    if (!bad.empty()) text += tr(", %n flagged", nullptr, static_cast<int>(bad.size()));
    p.drawText(QRect(g.left + w + 8, y - 4, width() - g.left - w - 8, 16), Qt::AlignLeft | Qt::AlignVCenter,
               fontMetrics().elidedText(text, Qt::ElideRight, width() - g.left - w - 8));
}

void RankGrid::mouseMoveEvent(QMouseEvent* e) {
    const Geometry g = geometry();
    for (const auto& c : cells_) {
        if (!rectOf(c, g).contains(e->pos())) continue;
        QToolTip::showText(e->globalPosition().toPoint(),
                           tr("rank %1 (TP %2, PP %3, DP %4)\npeak memory %5\nstep time %6")
                               .arg(c.rank)
                               .arg(c.tp)
                               .arg(c.pp)
                               .arg(c.dp)
                               .arg(c.memory >= 0 ? format_bytes(c.memory) : tr("—"))
                               .arg(c.step_time >= 0 ? format_duration(c.step_time) : tr("—")),
                           this);
        return;
    }
    QToolTip::hideText();
}

}  // namespace mwb::app
