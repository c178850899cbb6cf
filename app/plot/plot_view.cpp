#include "app/plot/plot_view.h"

#include "app/core/format.h"
#include "app/core/theme.h"
#include "app/plot/ticks.h"

#include <QAction>
#include <QApplication>
#include <QAreaSeries>
#include <QCategoryAxis>
#include <QElapsedTimer>
#include <QKeyEvent>
#include <QLegendMarker>
#include <QLineSeries>
#include <QMenu>
#include <QMouseEvent>
#include <QRubberBand>

#include <algorithm>
#include <cmath>
#include <limits>

namespace mwb::app {

namespace {

QCategoryAxis* make_axis(QChart* chart, Qt::Alignment side) {
    auto* a = new QCategoryAxis;
    a->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
    chart->addAxis(a, side);
    return a;
}

/// Linear interpolation in a monotone trace: y at x (clamped to its ends).
double interpolate(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
    if (xs.empty()) return x;
    if (x <= xs.front()) return ys.front();
    if (x >= xs.back()) return ys.back();
    const auto it = std::upper_bound(xs.begin(), xs.end(), x);
    const std::size_t i = static_cast<std::size_t>(it - xs.begin());
    const double x0 = xs[i - 1], x1 = xs[i];
    return x1 > x0 ? ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0) : ys[i];
}

}  // namespace

PlotView::PlotView(const QString& title, QWidget* parent) : QChartView(new QChart, parent) {
    setRenderHint(QPainter::Antialiasing);
    setRubberBand(QChartView::NoRubberBand);
    setMouseTracking(true);
    setFocusPolicy(Qt::ClickFocus);
    setMinimumSize(220, 160);
    QChart* c = chart();
    style_chart(c);
    c->setTitle(title);
    c->legend()->setVisible(false);
    c->legend()->setAlignment(Qt::AlignTop);
    x_axis_ = make_axis(c, Qt::AlignBottom);
    y_axis_ = make_axis(c, Qt::AlignLeft);
    log_action_ = new QAction(tr("&Log scale"), this);
    log_action_->setCheckable(true);
    log_action_->setShortcut(QKeySequence(Qt::Key_L));
    log_action_->setShortcutContext(Qt::WidgetShortcut);
    addAction(log_action_);
    connect(log_action_, &QAction::toggled, this, [this](bool on) {
        setLogY(on);
        emit logToggled(on);
    });
    restyle();
}

int PlotView::addLine(const QString& name, const LineStyle& style) {
    Line l;
    l.series = new QLineSeries;
    l.series->setName(name);
    l.style = style;
    l.name = name;
    chart()->addSeries(l.series);
    l.series->attachAxis(x_axis_);
    l.series->attachAxis(y_axis_);
    applyStyle(l);
    lines_.push_back(std::move(l));
    updateLegend();
    dirty_ = true;
    return static_cast<int>(lines_.size()) - 1;
}

int PlotView::addArea(const QString& name, const QColor& color) {
    Line l;
    l.series = new QLineSeries(this);
    l.lower = new QLineSeries(this);
    l.area = new QAreaSeries(l.series, l.lower);
    l.area->setName(name);
    l.style.color = color;
    l.style.smooth = false;
    l.name = name;
    chart()->addSeries(l.area);
    l.area->attachAxis(x_axis_);
    l.area->attachAxis(y_axis_);
    applyStyle(l);
    lines_.push_back(std::move(l));
    updateLegend();
    dirty_ = true;
    return static_cast<int>(lines_.size()) - 1;
}

void PlotView::updateLegend() {
    int shown = 0;
    for (const auto& line : lines_) shown += line.area ? 2 : line.style.in_legend;
    chart()->legend()->setVisible(shown > 1 || (legend_always_ && shown > 0));
    for (auto& line : lines_) {
        if (line.area) continue;
        for (QLegendMarker* m : chart()->legend()->markers(line.series)) m->setVisible(line.style.in_legend);
    }
}

void PlotView::setLegendAlways(bool on) {
    legend_always_ = on;
    updateLegend();
}

PlotView::LineStyle themed_line(int slot, qreal width, int light_alpha, int dark_alpha) {
    PlotView::LineStyle style;
    style.width = width;
    style.themed_color = [=] {
        QColor c = series_color(slot);
        c.setAlpha(dark_theme() ? dark_alpha : light_alpha);
        return c;
    };
    style.color = style.themed_color();
    return style;
}

void PlotView::applyStyle(Line& l) {
    if (l.style.themed_color) l.style.color = l.style.themed_color();
    if (l.area) {
        QColor fill = l.style.color;
        fill.setAlpha(190);
        l.area->setBrush(fill);
        QPen pen(l.style.color.darker(dark_theme() ? 80 : 120));
        pen.setWidthF(1);
        pen.setCosmetic(true);
        l.area->setPen(pen);
        return;
    }
    QPen pen(l.style.color);
    pen.setWidthF(l.style.width);
    pen.setStyle(l.style.pen);
    pen.setCosmetic(true);
    l.series->setPen(pen);  // the legend's marker
}

void PlotView::setTrace(int line, const Trace* trace) {
    Line& l = lines_.at(static_cast<std::size_t>(line));
    l.trace = trace;
    l.ema.clear();
    l.ema_state.reset(smoothing_);
    l.drawn_size = 0;
    dirty_ = true;
}

void PlotView::setLineVisible(int line, bool visible) {
    auto& l = lines_.at(static_cast<std::size_t>(line));
    l.visible = visible;
    if (l.area) {
        l.area->setVisible(visible);
    } else {
        l.series->setVisible(visible);
    }
    updateLegend();
    dirty_ = true;
}

void PlotView::clearLines() {
    for (auto& l : lines_) {
        if (l.area) {
            chart()->removeSeries(l.area);
            delete l.area;
            delete l.series;
            delete l.lower;
        } else {
            chart()->removeSeries(l.series);
            delete l.series;
        }
    }
    lines_.clear();
    chart()->legend()->setVisible(false);
    dirty_ = true;
}

void PlotView::setLogY(bool on) {
    if (on != log_action_->isChecked()) {
        const QSignalBlocker block(log_action_);
        log_action_->setChecked(on);
    }
    if (on == log_y_) return;
    log_y_ = on;
    dirty_ = true;
    refresh();
}

void PlotView::setSmoothing(double weight) {
    weight = std::clamp(weight, 0.0, 0.999);
    if (weight == smoothing_) return;
    smoothing_ = weight;
    for (auto& l : lines_) {
        l.ema.clear();
        l.ema_state.reset(weight);
    }
    dirty_ = true;
}

void PlotView::extendEma(Line& l) {
    const Trace& t = *l.trace;
    // a run resumed from an older checkpoint truncates the trace: smooth again from the start
    if (l.ema.size() > t.size() || (!l.ema.empty() && l.ema.x[l.ema.size() - 1] != t.x[l.ema.size() - 1])) {
        l.ema.clear();
        l.ema_state.reset(smoothing_);
    }
    for (std::size_t i = l.ema.size(); i < t.size(); ++i) l.ema.append(t.x[i], l.ema_state.add(t.y[i]));
}

const Trace& PlotView::drawnTrace(int line) const {
    const Line& l = lines_.at(static_cast<std::size_t>(line));
    static const Trace kEmpty;
    if (!l.trace) return kEmpty;
    return smoothed(l) ? l.ema : *l.trace;
}

void PlotView::setXTitle(const QString& title) {
    x_axis_->setTitleText(title);
}

QString PlotView::xTitle() const {
    return x_axis_->titleText();
}

void PlotView::setYTitle(const QString& title) {
    y_axis_->setTitleText(title);
}

QString PlotView::yTitle() const {
    return y_axis_->titleText();
}

void PlotView::setXMap(const Trace* map, double offset) {
    if (map == x_map_ && (map ? offset : 0) == x_offset_) return;
    x_map_ = map;
    x_offset_ = map ? offset : 0;
    follow_ = true;
    dirty_ = true;
}

void PlotView::setXScale(double scale) {
    scale = scale > 0 ? scale : 1;
    if (scale == x_scale_) return;
    if (!follow_) {  // keep the zoomed range where it was
        x0_ *= x_scale_ / scale;
        x1_ *= x_scale_ / scale;
    }
    x_scale_ = scale;
    dirty_ = true;
}

double PlotView::shownX(double iteration) const {
    const double x = x_map_ && !x_map_->empty() ? interpolate(x_map_->x, x_map_->y, iteration) - x_offset_ : iteration;
    return x / x_scale_;
}

double PlotView::iterationAt(double shown) const {
    const double x = shown * x_scale_;
    return x_map_ && !x_map_->empty() ? interpolate(x_map_->y, x_map_->x, x + x_offset_) : x;
}

void PlotView::setRightMirror(const QString& title, double factor, const QString& suffix) {
    if (factor <= 0) {
        if (right_) {
            chart()->removeAxis(right_);
            delete right_;
            right_ = nullptr;
        }
        mirror_factor_ = 0;
        return;
    }
    if (!right_) {
        right_ = make_axis(chart(), Qt::AlignRight);
        right_->setGridLineVisible(false);
        restyle();
    }
    right_->setTitleText(title);
    mirror_factor_ = factor;
    right_suffix_ = suffix;
    dirty_ = true;
}

void PlotView::setEmptyText(const QString& text) {
    empty_text_ = text;
    viewport()->update();
}

bool PlotView::hasData() const {
    return std::any_of(lines_.begin(), lines_.end(),
                       [](const Line& l) { return l.visible && l.trace && !l.trace->empty(); });
}

std::optional<std::pair<double, double>> PlotView::dataXRange() const {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const auto& l : lines_) {
        if (!l.visible || !l.trace || l.trace->empty()) continue;
        lo = std::min(lo, l.trace->x_first());
        hi = std::max(hi, l.trace->x_last());
    }
    if (!(lo <= hi)) return std::nullopt;
    return std::make_pair(shownX(lo), shownX(hi));
}

std::pair<double, double> PlotView::yRange() const {
    return {y_axis_->min(), y_axis_->max()};
}

QStringList PlotView::tickLabels(const QString& axis) const {
    QCategoryAxis* a = axis == QLatin1String("x") ? x_axis_ : axis == QLatin1String("right") ? right_ : y_axis_;
    return a ? a->categoriesLabels() : QStringList{};
}

QList<QPointF> PlotView::drawnPoints(int line) const {
    const Line& l = lines_.at(static_cast<std::size_t>(line));
    return QList<QPointF>(l.points.begin(), l.points.end());
}

QList<QPointF> PlotView::drawnRawPoints(int line) const {
    const Line& l = lines_.at(static_cast<std::size_t>(line));
    return QList<QPointF>(l.raw.begin(), l.raw.end());
}

void PlotView::setTicks(QCategoryAxis* axis, double lo, double hi, const std::vector<double>& at,
                        const std::function<QString(double)>& label) {
    QStringList labels;
    std::vector<double> values;
    for (double v : at) {
        if (v < lo - 1e-9 * (hi - lo) || v > hi + 1e-9 * (hi - lo)) continue;
        QString text = label(v);
        while (labels.contains(text)) text += QChar(0x200B);  // category labels must be unique
        labels.append(text);
        values.push_back(v);
    }
    if (axis->min() == lo && axis->max() == hi && axis->categoriesLabels() == labels) return;
    // every change of a category axis makes QtCharts lay out and map all its series again: make the
    // changes silently and let only the last one through (one re-map instead of a dozen)
    axis->blockSignals(true);
    for (const QString& c : axis->categoriesLabels()) axis->remove(c);
    axis->setStartValue(lo - 1e-7 * (hi - lo));  // a tick at lo needs a category ending there
    for (std::size_t i = 0; i + 1 < values.size(); ++i) axis->append(labels[static_cast<qsizetype>(i)], values[i]);
    axis->blockSignals(false);
    if (!values.empty()) axis->append(labels.back(), values.back());
    axis->setRange(lo, hi);
}

void PlotView::updateYAxis(double lo, double hi) {
    if (!(lo <= hi)) {
        lo = 0;
        hi = 1;
    }
    double span = hi - lo;
    if (span <= 0) span = std::max(std::abs(hi) * 0.1, log_y_ ? 0.05 : 1e-12);
    double a = lo - 0.06 * span, b = hi + 0.06 * span;
    if (!log_y_ && lo >= 0 && a < 0) a = 0;  // non-negative quantities keep 0 as the floor
    // round ends (a whole tick step) so the range changes only when the data leaves it: every range
    // change makes QtCharts map all of the axis' series again
    const double step = nice_step(a, b, 5);
    a = std::floor(a / step) * step;
    b = std::ceil(b / step) * step;
    y_lo_ = a;
    y_hi_ = b;
    if (!log_y_) {
        const double mag = std::max(std::abs(a), std::abs(b));  // one prefix for the whole axis
        setTicks(y_axis_, a, b, nice_ticks(a, b, 5),
                 [step, mag](double v) { return QString::fromStdString(format_tick(v, step, mag)); });
    } else {
        std::vector<double> values = log_ticks(std::pow(10.0, a), std::pow(10.0, b), 5), at;
        for (double v : values) at.push_back(std::log10(v));
        setTicks(y_axis_, a, b, at, [&values, &at](double p) {
            const auto i = static_cast<std::size_t>(std::find(at.begin(), at.end(), p) - at.begin());
            const double v = values[i];
            const double gap = values.size() > 1 ? (i > 0 ? v - values[i - 1] : values[1] - v) : v;
            return QString::fromStdString(format_tick(v, gap));
        });
    }
    if (right_) {
        // round numbers in the right axis' own unit, placed where its values fall on the left scale
        const double f = mirror_factor_;
        const QString suffix = right_suffix_;
        std::vector<double> values, at;
        if (!log_y_) {
            values = nice_ticks(a * f, b * f, 5);
            for (double v : values) at.push_back(v / f);
        } else {
            values = log_ticks(std::pow(10.0, a) * f, std::pow(10.0, b) * f, 5);
            for (double v : values) at.push_back(std::log10(v / f));
        }
        const double rstep = log_y_ ? 0 : nice_step(a * f, b * f, 5);
        const double rmag = log_y_ ? 0 : std::max(std::abs(a * f), std::abs(b * f));
        setTicks(right_, a, b, at, [&values, &at, rstep, rmag, suffix](double p) {
            const auto i = static_cast<std::size_t>(std::find(at.begin(), at.end(), p) - at.begin());
            const double v = values[i];
            const double gap = rstep > 0 ? rstep
                               : values.size() > 1 ? (i > 0 ? v - values[i - 1] : values[1] - v)
                                                   : v;
            // with a unit ("%") plain numbers: "40%", not "0.04k%"
            const double mag = suffix.isEmpty() ? (rmag > 0 ? rmag : -1) : 1;
            return QString::fromStdString(format_tick(v, gap, mag)) + suffix;
        });
    }
}

bool PlotView::changed() {
    const int columns = std::max(50, static_cast<int>(chart()->plotArea().width()));
    bool any = dirty_ || columns != drawn_columns_;
    for (const auto& l : lines_) {
        const std::size_t n = l.trace && l.visible ? l.trace->size() : 0;
        const double last = n ? l.trace->x_last() : 0;
        if (n != l.drawn_size || last != l.drawn_last) any = true;
    }
    return any;
}

void PlotView::drawLine(Line& l, double a, double b, int columns, double& lo, double& hi) {
    const double ia = iterationAt(a), ib = iterationAt(b);
    const auto to_points = [&](const Trace& t, bool range, int cols, std::vector<QPointF>& pts) {
        decimate_minmax(t, ia, ib, cols, scratch_);
        pts.clear();
        pts.reserve(scratch_.size());
        for (const PlotPoint& p : scratch_) {
            if (log_y_ && p.y <= 0) continue;
            const double y = log_y_ ? std::log10(p.y) : p.y;
            pts.emplace_back(shownX(p.x), y);
            if (range && p.x >= ia && p.x <= ib) {
                lo = std::min(lo, y);
                hi = std::max(hi, y);
            }
        }
        points_drawn_ += static_cast<int>(pts.size());
    };
    if (smoothed(l)) {
        extendEma(l);
        // the axis covers the raw extremes, as TensorBoard does; the faint line needs half the detail
        to_points(*l.trace, true, std::max(50, columns / 2), l.raw);
        to_points(l.ema, false, columns, l.points);
    } else {
        l.raw.clear();
        to_points(*l.trace, true, columns, l.points);
    }
}

void PlotView::refresh() {
    if (!changed()) return;
    QElapsedTimer timer;
    timer.start();
    dirty_ = false;
    ++redraws_;
    if (follow_) {
        if (const auto r = dataXRange()) {
            x0_ = r->first;
            x1_ = r->second;
        } else {  // nothing to show (a new run): not the last run's range
            x0_ = 0;
            x1_ = 1;
        }
    }
    double a = x0_, b = x1_;
    if (b <= a) {
        a -= 0.5;
        b += 0.5;
    }
    const int columns = std::max(50, static_cast<int>(chart()->plotArea().width()));
    if (follow_ && x_padding_ > 0) {  // markers at the ends stay inside the plot
        const double pad = (b - a) * x_padding_;
        a -= pad;
        b += pad;
    } else if (follow_) {
        // a growing run: the axis ends on the next fifth of a tick step, so it changes a few times a
        // second rather than every frame (each change makes QtCharts lay out its labels again)
        const double fine = nice_step(a, b, std::clamp(columns / 90, 3, 8)) / 5;
        b = std::max(b, std::ceil(b / fine - 1e-9) * fine);
    }
    drawn_columns_ = columns;
    const double xstep = nice_step(a, b, std::clamp(columns / 90, 3, 8));
    const double xmag = std::max(std::abs(a), std::abs(b));
    setTicks(x_axis_, a, b, nice_ticks(a, b, std::clamp(columns / 90, 3, 8)),
             [xstep, xmag](double v) { return QString::fromStdString(format_tick(v, xstep, xmag)); });
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    points_drawn_ = 0;
    stack_.clear();
    for (auto& l : lines_) {
        l.drawn_size = l.trace && l.visible ? l.trace->size() : 0;
        l.drawn_last = l.drawn_size ? l.trace->x_last() : 0;
        l.points.clear();
        l.raw.clear();
        l.bottom.clear();
        if (!l.trace || !l.visible) continue;
        if (l.area) {  // stacked: per-column means added onto the areas below
            decimate_mean(*l.trace, iterationAt(a), iterationAt(b), columns, scratch_);
            if (stack_.size() != scratch_.size()) stack_.assign(scratch_.size(), 0.0);
            for (std::size_t i = 0; i < scratch_.size(); ++i) {
                const double x = shownX(scratch_[i].x);
                l.bottom.emplace_back(x, stack_[i]);
                stack_[i] += scratch_[i].y;
                l.points.emplace_back(x, stack_[i]);
                lo = std::min(lo, 0.0);
                hi = std::max(hi, stack_[i]);
            }
            points_drawn_ += static_cast<int>(2 * l.points.size());
            continue;
        }
        drawLine(l, a, b, columns, lo, hi);
    }
    updateYAxis(lo, hi);
    last_ms_ = static_cast<double>(timer.nsecsElapsed()) / 1e6;
    viewport()->update();
}

void PlotView::setXRange(double x0, double x1) {
    if (!(x1 > x0)) return;
    follow_ = false;
    x0_ = x0;
    x1_ = x1;
    dirty_ = true;
    refresh();
}

void PlotView::followAll() {
    follow_ = true;
    dirty_ = true;
    refresh();
}

void PlotView::resetView() {
    follow_ = true;
    cross_.reset();
    setRightMirror({}, 0, {});
    dirty_ = true;
    refresh();
}

void PlotView::setCrosshair(std::optional<double> x) {
    if (x == cross_) return;
    cross_ = x;
    viewport()->update();
}

QStringList PlotView::crosshairValues() const {
    QStringList out;
    if (!cross_) return out;
    const double it = iterationAt(*cross_);
    for (int i = 0; i < lineCount(); ++i) {
        const Line& l = lines_[static_cast<std::size_t>(i)];
        if (!l.visible || !l.trace || l.trace->empty() || !l.style.in_legend) continue;
        const Trace& t = drawnTrace(i);
        if (t.empty() || it < t.x_first() - 1e-9) continue;
        auto pos = std::upper_bound(t.x.begin(), t.x.end(), it + 1e-9);
        const auto k = static_cast<std::size_t>(pos - t.x.begin()) - 1;
        out.append(QStringLiteral("%1: %2").arg(l.name, format_value(t.y[k])));
    }
    return out;
}

void PlotView::restyle() {
    const QPalette pal = QApplication::palette();
    style_chart(chart());
    const QColor text = pal.color(QPalette::Text);
    QColor grid = pal.color(QPalette::Mid);
    grid.setAlpha(110);
    QFont f = QApplication::font();
    f.setPointSizeF(f.pointSizeF() * 0.85);
    for (QAbstractAxis* axis : chart()->axes()) {
        axis->setLabelsColor(text);
        axis->setLabelsFont(f);
        axis->setTitleBrush(text);
        axis->setTitleFont(f);
        axis->setGridLineColor(grid);
        axis->setMinorGridLineColor(grid);
        axis->setLinePenColor(pal.color(QPalette::Mid));
    }
    for (auto& l : lines_) applyStyle(l);
    updateLegend();  // a chart theme change shows or hides the legend on its own
    viewport()->update();
}

QImage PlotView::renderImage(const QSize& size) {
    QImage img(size, QImage::Format_ARGB32_Premultiplied);
    img.fill(QApplication::palette().color(QPalette::Base));
    QPainter p(&img);
    p.setRenderHint(QPainter::Antialiasing);
    render(&p);
    return img;
}

double PlotView::xAt(const QPoint& viewPos) const {
    const QPointF inChart = chart()->mapFromScene(mapToScene(viewPos));
    const QRectF area = chart()->plotArea();
    const double f = (inChart.x() - area.left()) / std::max(1.0, area.width());
    return x_axis_->min() + f * (x_axis_->max() - x_axis_->min());
}

void PlotView::mousePressEvent(QMouseEvent* e) {
    if (e->button() == Qt::LeftButton) {
        press_ = e->pos();
        dragging_ = true;
        if (!band_) band_ = new QRubberBand(QRubberBand::Rectangle, viewport());
        band_->setGeometry(QRect(press_, QSize()));
        band_->show();
        e->accept();
        return;
    }
    if (e->button() == Qt::RightButton) {
        QMenu menu(this);
        menu.addAction(tr("&Follow all the data"), this, [this] {
            followAll();
            emit userFollow();
        });
        menu.addAction(log_action_);
        if (!menu_actions_.isEmpty()) menu.addSeparator();
        menu.addActions(menu_actions_);
        menu.exec(e->globalPosition().toPoint());
        e->accept();
        return;
    }
    QChartView::mousePressEvent(e);
}

void PlotView::mouseMoveEvent(QMouseEvent* e) {
    if (dragging_ && band_) {
        const QRectF area = chart()->mapToScene(chart()->plotArea()).boundingRect();
        const QRect a = mapFromScene(area).boundingRect();
        band_->setGeometry(QRect(QPoint(std::min(press_.x(), e->pos().x()), a.top()),
                                 QPoint(std::max(press_.x(), e->pos().x()), a.bottom())));
        return;
    }
    const QRectF area = chart()->plotArea();
    const QPointF in_chart = chart()->mapFromScene(mapToScene(e->pos()));
    std::optional<double> x;
    if (hasData() && in_chart.x() >= area.left() && in_chart.x() <= area.right()) x = xAt(e->pos());
    setCrosshair(x);
    emit hovered(x);
}

void PlotView::leaveEvent(QEvent* e) {
    setCrosshair(std::nullopt);
    emit hovered(std::nullopt);
    QChartView::leaveEvent(e);
}

void PlotView::mouseReleaseEvent(QMouseEvent* e) {
    if (e->button() == Qt::LeftButton && dragging_) {
        dragging_ = false;
        if (band_) band_->hide();
        if (std::abs(e->pos().x() - press_.x()) > 6) {
            double a = xAt(press_), b = xAt(e->pos());
            if (a > b) std::swap(a, b);
            setXRange(a, b);
            emit userXRange(a, b);
        }
        e->accept();
        return;
    }
    QChartView::mouseReleaseEvent(e);
}

void PlotView::mouseDoubleClickEvent(QMouseEvent* e) {
    followAll();
    emit userFollow();
    e->accept();
}

void PlotView::wheelEvent(QWheelEvent* e) {
    const auto extent = dataXRange();
    if (!extent) return;
    const double x = xAt(e->position().toPoint());
    const double factor = e->angleDelta().y() > 0 ? 0.8 : 1.25;
    double a = x - (x - x_axis_->min()) * factor, b = x + (x_axis_->max() - x) * factor;
    if (a <= extent->first && b >= extent->second) {
        followAll();
        emit userFollow();
    } else {
        setXRange(a, b);
        emit userXRange(a, b);
    }
    e->accept();
}

void PlotView::keyPressEvent(QKeyEvent* e) {
    if (e->key() == Qt::Key_L && e->modifiers() == Qt::NoModifier) {
        log_action_->toggle();
        e->accept();
        return;
    }
    QChartView::keyPressEvent(e);
}

void PlotView::paintEvent(QPaintEvent* e) {
    QElapsedTimer timer;
    timer.start();
    QChartView::paintEvent(e);
    last_paint_ms_ = static_cast<double>(timer.nsecsElapsed()) / 1e6;
}

void PlotView::resizeEvent(QResizeEvent* e) {
    QChartView::resizeEvent(e);
    refresh();
}

void PlotView::paintLines(QPainter* painter, const QRectF& area) {
    const double xa = x_axis_->min(), xb = x_axis_->max(), ya = y_axis_->min(), yb = y_axis_->max();
    if (!(xb > xa) || !(yb > ya)) return;
    const double sx = area.width() / (xb - xa), sy = area.height() / (yb - ya);
    const double left = area.left(), bottom = area.bottom();
    // to pixels in place (one pass, no allocation once polygon_ has grown)
    const auto map = [&](const std::vector<QPointF>& pts, bool append = false) {
        if (!append) polygon_.resize(0);
        for (const QPointF& p : pts) polygon_.append(QPointF(left + (p.x() - xa) * sx, bottom - (p.y() - ya) * sy));
    };
    painter->save();
    painter->setClipRect(area.adjusted(-1, -3, 1, 3));
    // antialiased wide lines dominate with many of them (10 overlaid runs): crisp pixels instead
    constexpr int kAntialiasPoints = 12000;
    const bool crisp = points_drawn_ > kAntialiasPoints;
    painter->setRenderHint(QPainter::Antialiasing, !crisp);
    const bool dark = dark_theme();
    for (const Line& l : lines_) {
        if (!l.visible || l.points.empty()) continue;
        if (l.area) {  // the top edge left to right, the lower edge back
            map(l.points);
            for (auto it = l.bottom.rbegin(); it != l.bottom.rend(); ++it)
                polygon_.append(QPointF(left + (it->x() - xa) * sx, bottom - (it->y() - ya) * sy));
            QColor fill = l.style.color;
            fill.setAlpha(190);
            QPen pen(l.style.color.darker(dark ? 80 : 120));
            pen.setWidthF(1);
            pen.setCosmetic(true);
            painter->setPen(pen);
            painter->setBrush(fill);
            // an antialiased fill of a polygon with thousands of corners costs tens of ms a frame
            painter->setRenderHint(QPainter::Antialiasing, false);
            painter->drawPolygon(polygon_);
            painter->setRenderHint(QPainter::Antialiasing, !crisp);
            continue;
        }
        if (!l.raw.empty()) {  // the raw line faint behind the smoothed one (TensorBoard's look)
            QColor faint = l.style.color;
            faint.setAlphaF(faint.alphaF() * (dark ? 0.45 : 0.3));
            QPen raw_pen(faint);
            raw_pen.setWidthF(1);
            raw_pen.setCosmetic(true);
            painter->setPen(raw_pen);
            map(l.raw);
            painter->drawPolyline(polygon_);
        }
        QPen pen(l.style.color);
        pen.setStyle(l.style.pen);
        pen.setCosmetic(true);
        map(l.points);
        if (l.style.width >= 1.5) {
            // Qt strokes a wide pen as a path: the Monitor's charts took ~250 ms a frame antialiased,
            // 20 overlaid runs ~40 ms crisp. Its 1-pixel cosmetic stroker takes a few ms for all of
            // them: a wide line as three 1-pixel passes, shifted right and down by the extra width
            pen.setWidthF(1);
            painter->setPen(pen);
            const double d = crisp ? std::max(1.0, std::round(l.style.width - 1)) : l.style.width - 1;
            for (const QPointF shift : {QPointF(0, 0), QPointF(d, 0), QPointF(0, d)}) {
                polygon_.translate(shift);
                painter->drawPolyline(polygon_);
                polygon_.translate(-shift);
            }
        } else {
            pen.setWidthF(l.style.width);
            painter->setPen(pen);
            painter->drawPolyline(polygon_);
        }
        if (l.style.markers) {
            painter->setBrush(l.style.color);
            for (const QPointF& p : polygon_) painter->drawEllipse(p, 3.0, 3.0);
            painter->setBrush(Qt::NoBrush);
        }
    }
    painter->restore();
}

void PlotView::drawForeground(QPainter* painter, const QRectF& rect) {
    QChartView::drawForeground(painter, rect);
    const QRectF area = chart()->mapToScene(chart()->plotArea()).boundingRect();
    paintLines(painter, area);
    if (!hasData()) {
        if (empty_text_.isEmpty()) return;
        painter->save();
        painter->setPen(QApplication::palette().color(QPalette::PlaceholderText));
        painter->drawText(area, Qt::AlignCenter | Qt::TextWordWrap, empty_text_);
        painter->restore();
        return;
    }
    if (!cross_ || x_axis_->max() <= x_axis_->min()) return;
    const double f = (*cross_ - x_axis_->min()) / (x_axis_->max() - x_axis_->min());
    if (f < 0 || f > 1) return;
    const double px = area.left() + f * area.width();
    const QPalette pal = QApplication::palette();
    painter->save();
    QPen pen(pal.color(QPalette::Text));
    pen.setStyle(Qt::DashLine);
    pen.setCosmetic(true);
    painter->setPen(pen);
    painter->drawLine(QPointF(px, area.top()), QPointF(px, area.bottom()));
    // each line's value at the crosshair: a dot on the line, the values in a box
    const double it = iterationAt(*cross_);
    QStringList rows;
    std::vector<QColor> colours;
    for (int i = 0; i < lineCount(); ++i) {
        const Line& l = lines_[static_cast<std::size_t>(i)];
        if (!l.visible || !l.trace || !l.style.in_legend) continue;
        const Trace& t = drawnTrace(i);
        if (t.empty() || it < t.x_first() - 1e-9) continue;
        const auto k = static_cast<std::size_t>(std::upper_bound(t.x.begin(), t.x.end(), it + 1e-9) - t.x.begin()) - 1;
        double y = t.y[k];
        rows.append(QStringLiteral("%1: %2").arg(l.name, format_value(y)));
        colours.push_back(l.style.color);
        if (log_y_) {
            if (y <= 0) continue;
            y = std::log10(y);
        }
        const double fy = (y - y_axis_->min()) / std::max(1e-300, y_axis_->max() - y_axis_->min());
        const double fx = (shownX(t.x[k]) - x_axis_->min()) / (x_axis_->max() - x_axis_->min());
        if (fy < 0 || fy > 1 || fx < 0 || fx > 1) continue;
        painter->setPen(Qt::NoPen);
        painter->setBrush(l.style.color);
        painter->drawEllipse(QPointF(area.left() + fx * area.width(), area.bottom() - fy * area.height()), 3.5, 3.5);
    }
    if (!rows.isEmpty()) {
        QFont font = QApplication::font();
        font.setPointSizeF(font.pointSizeF() * 0.85);
        painter->setFont(font);
        const QFontMetrics fm(font);
        const QString head = QStringLiteral("x = %1").arg(format_value(*cross_));
        int w = fm.horizontalAdvance(head);
        for (const QString& r : rows) w = std::max(w, fm.horizontalAdvance(r) + 14);
        const int h = fm.height() * (static_cast<int>(rows.size()) + 1) + 6;
        QRectF box(px + 8, area.top() + 4, w + 10, h);
        if (box.right() > area.right()) box.moveRight(px - 8);
        QColor bg = pal.color(QPalette::ToolTipBase);
        bg.setAlpha(225);
        painter->setBrush(bg);
        painter->setPen(pal.color(QPalette::Mid));
        painter->drawRect(box);
        painter->setPen(pal.color(QPalette::ToolTipText));
        double y = box.top() + 3 + fm.ascent();
        painter->drawText(QPointF(box.left() + 5, y), head);
        for (int r = 0; r < rows.size(); ++r) {
            y += fm.height();
            painter->fillRect(QRectF(box.left() + 5, y - fm.ascent() + 2, 8, 8), colours[static_cast<std::size_t>(r)]);
            painter->drawText(QPointF(box.left() + 19, y), rows[r]);
        }
    }
    painter->restore();
}

}  // namespace mwb::app
