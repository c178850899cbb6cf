#include "plot/plot_view.h"

#include "core/format.h"
#include "core/theme.h"

#include <QApplication>
#include <QAreaSeries>
#include <QElapsedTimer>
#include <QLegendMarker>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QMouseEvent>
#include <QRubberBand>
#include <QToolTip>
#include <QValueAxis>

#include <algorithm>
#include <cmath>
#include <limits>

namespace mwb::app {

PlotView::PlotView(const QString& title, QWidget* parent) : QChartView(new QChart, parent) {
    setRenderHint(QPainter::Antialiasing);
    setRubberBand(QChartView::NoRubberBand);
    setMouseTracking(true);
    setMinimumSize(220, 160);
    QChart* c = chart();
    style_chart(c);
    c->setTitle(title);
    c->legend()->setVisible(false);
    c->legend()->setAlignment(Qt::AlignTop);
    x_axis_ = new QValueAxis;
    x_axis_->setLabelFormat(QStringLiteral("%.0f"));
    x_axis_->setTickCount(5);
    c->addAxis(x_axis_, Qt::AlignBottom);
    y_left_ = makeYAxis(false, Qt::AlignLeft, {}, y_format_);
    restyle();
}

QAbstractAxis* PlotView::makeYAxis(bool log, Qt::Alignment side, const QString& title, const QString& format) {
    QAbstractAxis* axis = nullptr;
    if (log) {
        auto* a = new QLogValueAxis;
        a->setBase(10);
        a->setLabelFormat(QStringLiteral("%.3g"));
        a->setMinorTickCount(-1);
        axis = a;
    } else {
        auto* a = new QValueAxis;
        a->setLabelFormat(format);
        a->setTickCount(5);
        axis = a;
    }
    axis->setTitleText(title);
    chart()->addAxis(axis, side);
    return axis;
}

void PlotView::replaceAxis(QAbstractAxis*& axis, bool log, Qt::Alignment side) {
    const bool left = side == Qt::AlignLeft;
    QAbstractAxis* fresh = makeYAxis(log, side, left ? y_title_ : right_title_, left ? y_format_ : right_format_);
    for (auto& l : lines_) {
        if ((l.style.axis == Axis::Left) != left) continue;
        QAbstractSeries* s = l.area ? static_cast<QAbstractSeries*>(l.area) : l.series;
        if (axis) s->detachAxis(axis);
        s->attachAxis(fresh);
    }
    if (axis) {
        chart()->removeAxis(axis);
        delete axis;
    }
    axis = fresh;
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
    QAbstractAxis* y = style.axis == Axis::Right && y_right_ ? y_right_ : y_left_;
    l.series->attachAxis(y);
    applyStyle(l);
    lines_.push_back(l);
    updateLegend();
    return static_cast<int>(lines_.size()) - 1;
}

void PlotView::updateLegend() {
    int shown = 0;
    for (const auto& line : lines_) shown += line.area ? 2 : line.style.in_legend;
    chart()->legend()->setVisible(shown > 1);
    for (auto& line : lines_)
        if (!line.area)
            for (QLegendMarker* m : chart()->legend()->markers(line.series)) m->setVisible(line.style.in_legend);
}

int PlotView::addArea(const QString& name, const QColor& color) {
    Line l;
    l.series = new QLineSeries(this);
    l.lower = new QLineSeries(this);
    l.area = new QAreaSeries(l.series, l.lower);
    l.area->setName(name);
    l.style.color = color;
    l.name = name;
    chart()->addSeries(l.area);
    l.area->attachAxis(x_axis_);
    l.area->attachAxis(y_left_);
    applyStyle(l);
    lines_.push_back(l);
    updateLegend();
    return static_cast<int>(lines_.size()) - 1;
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
    l.series->setPen(pen);
    l.series->setPointsVisible(l.style.markers);
    if (l.style.markers) l.series->setMarkerSize(6);
}

void PlotView::setTrace(int line, const Trace* trace) {
    lines_.at(static_cast<std::size_t>(line)).trace = trace;
}

void PlotView::setLineVisible(int line, bool visible) {
    auto& l = lines_.at(static_cast<std::size_t>(line));
    l.visible = visible;
    if (l.area) {
        l.area->setVisible(visible);
    } else {
        l.series->setVisible(visible);
    }
}

void PlotView::setLineColor(int line, const QColor& color) {
    auto& l = lines_.at(static_cast<std::size_t>(line));
    l.style.color = color;
    applyStyle(l);
}

void PlotView::clearLines() {
    for (auto& l : lines_) {
        if (l.area) {
            chart()->removeSeries(l.area);
            delete l.area;
        } else {
            chart()->removeSeries(l.series);
        }
        delete l.series;
        delete l.lower;
    }
    lines_.clear();
    chart()->legend()->setVisible(false);
}

void PlotView::setLogY(bool on) {
    if (on == log_y_) return;
    log_y_ = on;
    replaceAxis(y_left_, on, Qt::AlignLeft);
    refresh();
}

void PlotView::setXTitle(const QString& title) {
    x_axis_->setTitleText(title);
}

void PlotView::setYTitle(const QString& title) {
    y_title_ = title;
    y_left_->setTitleText(title);
}

void PlotView::setXLabelFormat(const QString& format) {
    x_axis_->setLabelFormat(format);
}

void PlotView::setYLabelFormat(const QString& format) {
    y_format_ = format;
    if (auto* a = qobject_cast<QValueAxis*>(y_left_)) a->setLabelFormat(format);
}

void PlotView::setRightAxis(const QString& title, bool log) {
    right_title_ = title;
    right_mirror_ = false;
    log_right_ = log;
    replaceAxis(y_right_, log, Qt::AlignRight);
}

void PlotView::setRightMirror(const QString& title, double factor, const QString& format) {
    right_title_ = title;
    right_format_ = format;
    right_mirror_ = true;
    mirror_factor_ = factor;
    replaceAxis(y_right_, false, Qt::AlignRight);
}

void PlotView::setRightMirrorFactor(double factor) {
    mirror_factor_ = factor;
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
    return std::make_pair(lo, hi);
}

namespace {

/// 1, 2, 5 or 10 times a power of ten near `x` (Heckbert's nice numbers, as QValueAxis uses them).
double nice_number(double x, bool ceiling) {
    const double z = std::pow(10.0, std::floor(std::log10(x)));
    const double q = x / z;
    if (ceiling) return (q <= 1 ? 1 : q <= 2 ? 2 : q <= 5 ? 5 : 10) * z;
    return (q < 1.5 ? 1 : q < 3 ? 2 : q < 7 ? 5 : 10) * z;
}

}  // namespace

void PlotView::setYRange(QAbstractAxis* axis, double lo, double hi, bool log, bool nice) {
    // Every range change makes QtCharts map all of the axis' series again (milliseconds per chart):
    // ranges are rounded to nice numbers and set only when they change, so a growing run whose
    // values stay within the axis costs nothing here.
    if (!axis) return;
    if (!(lo <= hi)) {
        lo = log ? 0.1 : 0;
        hi = 1;
    }
    if (log) {
        lo = std::max(lo, 1e-30);
        hi = std::max(hi, lo);
        const double pad = std::pow(hi / lo, 0.05);
        // whole or half decades, so the range changes only when the data leaves it
        const double a = std::pow(10.0, std::floor(2 * std::log10(lo / std::max(pad, 1.05))) / 2);
        const double b = std::pow(10.0, std::ceil(2 * std::log10(hi * std::max(pad, 1.05))) / 2);
        auto* l = static_cast<QLogValueAxis*>(axis);
        if (l->min() != a || l->max() != b) l->setRange(a, b);
        return;
    }
    double span = hi - lo;
    if (span <= 0) span = std::max(std::abs(hi) * 0.1, 1e-12);
    double a = lo - 0.06 * span, b = hi + 0.06 * span;
    if (lo >= 0 && a < 0) a = 0;  // non-negative quantities keep 0 as the floor
    auto* v = static_cast<QValueAxis*>(axis);
    int ticks = v->tickCount();
    if (nice && b > a) {
        const double step = nice_number(nice_number(b - a, true) / 4, false);  // about 5 ticks
        a = std::floor(a / step) * step;
        b = std::ceil(b / step) * step;
        ticks = std::clamp(static_cast<int>(std::lround((b - a) / step)) + 1, 2, 12);
    }
    if (v->min() != a || v->max() != b) v->setRange(a, b);
    if (v->tickCount() != ticks) v->setTickCount(ticks);
}

void PlotView::refresh() {
    QElapsedTimer timer;
    timer.start();
    if (follow_) {
        if (const auto r = dataXRange()) {
            x0_ = r->first;
            x1_ = r->second;
        }
    }
    double a = x0_, b = x1_;
    if (b <= a) {
        a -= 0.5;
        b += 0.5;
    }
    if (x_axis_->min() != a || x_axis_->max() != b) x_axis_->setRange(a, b);
    const int columns = std::max(50, static_cast<int>(chart()->plotArea().width()));
    double lo[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
    double hi[2] = {-lo[0], -lo[0]};
    points_drawn_ = 0;
    QList<QPointF> pts, lower;
    stack_.clear();
    for (auto& l : lines_) {
        if (!l.trace || !l.visible) {
            if (l.series->count()) l.series->clear();
            if (l.lower && l.lower->count()) l.lower->clear();
            continue;
        }
        if (l.area) {  // stacked: per-column means added onto the areas below
            decimate_mean(*l.trace, a, b, columns, scratch_);
            if (stack_.size() != scratch_.size()) stack_.assign(scratch_.size(), 0.0);
            pts.clear();
            lower.clear();
            for (std::size_t i = 0; i < scratch_.size(); ++i) {
                lower.append(QPointF(scratch_[i].x, stack_[i]));
                stack_[i] += scratch_[i].y;
                pts.append(QPointF(scratch_[i].x, stack_[i]));
                lo[0] = std::min(lo[0], 0.0);
                hi[0] = std::max(hi[0], stack_[i]);
            }
            points_drawn_ += static_cast<int>(2 * pts.size());
            l.lower->replace(lower);
            l.series->replace(pts);
            continue;
        }
        decimate_minmax(*l.trace, a, b, columns, scratch_);
        const bool log = l.style.axis == Axis::Left ? log_y_ : log_right_;
        const int side = l.style.axis == Axis::Right && y_right_ && !right_mirror_ ? 1 : 0;
        pts.clear();
        pts.reserve(static_cast<qsizetype>(scratch_.size()));
        for (const PlotPoint& p : scratch_) {
            if (log && p.y <= 0) continue;
            pts.append(QPointF(p.x, p.y));
            if (p.x >= a && p.x <= b) {
                lo[side] = std::min(lo[side], p.y);
                hi[side] = std::max(hi[side], p.y);
            }
        }
        points_drawn_ += static_cast<int>(pts.size());
        l.series->replace(pts);
    }
    setYRange(y_left_, lo[0], hi[0], log_y_, true);
    if (y_right_) {
        if (right_mirror_) {
            auto* r = static_cast<QValueAxis*>(y_right_);
            if (auto* left = qobject_cast<QValueAxis*>(y_left_)) {
                const double lo_r = left->min() * mirror_factor_, hi_r = left->max() * mirror_factor_;
                if (r->min() != lo_r || r->max() != hi_r) r->setRange(lo_r, hi_r);
                if (r->tickCount() != left->tickCount()) r->setTickCount(left->tickCount());  // shared grid
            }
        } else {
            setYRange(y_right_, lo[1], hi[1], log_right_);
        }
    }
    last_ms_ = static_cast<double>(timer.nsecsElapsed()) / 1e6;
    viewport()->update();
}

void PlotView::setXRange(double x0, double x1) {
    if (!(x1 > x0)) return;
    follow_ = false;
    x0_ = x0;
    x1_ = x1;
    refresh();
}

void PlotView::followAll() {
    follow_ = true;
    refresh();
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
        followAll();
        emit userFollow();
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
    if (!hasData()) return;
    const double x = xAt(e->pos());
    QString tip;
    for (const auto& l : lines_) {
        if (!l.visible || !l.trace || l.trace->empty()) continue;
        const auto& xs = l.trace->x;
        auto it = std::lower_bound(xs.begin(), xs.end(), x);
        if (it == xs.end()) --it;
        if (it != xs.begin() && std::abs(*(it - 1) - x) < std::abs(*it - x)) --it;
        const auto i = static_cast<std::size_t>(it - xs.begin());
        tip += QStringLiteral("<span style='color:%1'>■</span> %2: <b>%3</b> <small>(x %4)</small><br>")
                   .arg(l.style.color.name(), l.name.toHtmlEscaped(), format_value(l.trace->y[i]), format_value(xs[i]));
    }
    if (!tip.isEmpty()) QToolTip::showText(e->globalPosition().toPoint(), tip, this);
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

void PlotView::resizeEvent(QResizeEvent* e) {
    QChartView::resizeEvent(e);
    refresh();
}

void PlotView::drawForeground(QPainter* painter, const QRectF& rect) {
    QChartView::drawForeground(painter, rect);
    if (hasData() || empty_text_.isEmpty()) return;
    const QRectF area = chart()->mapToScene(chart()->plotArea()).boundingRect();
    painter->save();
    painter->setPen(QApplication::palette().color(QPalette::PlaceholderText));
    painter->drawText(area, Qt::AlignCenter | Qt::TextWordWrap, empty_text_);
    painter->restore();
}

}  // namespace mwb::app
