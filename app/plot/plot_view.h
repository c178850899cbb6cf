#pragma once
// A chart over Traces that only ever draws what fits its pixels: refresh() decimates each trace's
// visible range to min/max per pixel column (plot/trace.h) — and does nothing when no trace, range or
// size changed, so an idle chart costs nothing. The owner decides when to refresh (the Monitor's
// coalescing timer). QtCharts lays out the title, axes, grid and legend; the lines, areas and markers
// are painted here (drawForeground, one polyline per line): QtCharts re-maps every point of a series
// and builds its hit-test shape on each change, which cost ~10 ms per 1,000 points with 20 lines.
//
// What a TensorBoard / W&B user expects of a chart: round-number ticks with SI prefixes and a log
// scale labelled between decades (plot/ticks.h; log scale draws log10(y) on a linear axis), EMA
// smoothing of the lines marked `smooth` with the raw line faint behind, a crosshair with every
// line's value at that x (synced across charts by the owner: hovered() -> setCrosshair()), a legend
// with each line's name and colour, and an optional x map (iteration -> tokens or wall time).
//
// Interaction: drag to zoom into an x range, wheel to zoom around the cursor, double-click to follow
// all the data again; right-click for a menu (follow all, log scale); L toggles the log scale.
#include "app/plot/trace.h"

#include <QChartView>
#include <QPointer>
#include <QPolygonF>

#include <functional>
#include <optional>
#include <vector>

class QAction;
class QAreaSeries;
class QCategoryAxis;
class QLineSeries;
class QRubberBand;

namespace mwb::app {

class PlotView : public QChartView {
    Q_OBJECT
public:
    struct LineStyle {
        QColor color;
        qreal width = 1.6;
        Qt::PenStyle pen = Qt::SolidLine;
        bool markers = false;  ///< draw the points (sparse series such as validation loss)
        bool in_legend = true;
        bool smooth = true;  ///< smoothed with the chart's EMA weight (raw line faint behind)
        /// When set, the colour is taken from it again at every restyle(), so a palette switch
        /// recolours the line (e.g. a theme's series colour).
        std::function<QColor()> themed_color = {};
    };

    explicit PlotView(const QString& title, QWidget* parent = nullptr);

    int addLine(const QString& name, const LineStyle& style);
    /// A filled area stacked on the areas added before it (drawn from per-column means, since
    /// minima and maxima of layers do not stack). Areas share their traces' x values.
    int addArea(const QString& name, const QColor& color);
    /// The trace line `line` draws (not owned; nullptr draws nothing). Call refresh() afterwards.
    void setTrace(int line, const Trace* trace);
    void setLineVisible(int line, bool visible);
    int lineCount() const { return static_cast<int>(lines_.size()); }
    QString lineName(int line) const { return lines_.at(static_cast<std::size_t>(line)).name; }
    QColor lineColor(int line) const { return lines_.at(static_cast<std::size_t>(line)).style.color; }
    /// Removes every line (the History overlay rebuilds them).
    void clearLines();
    /// While following, this share of the data's x span is added at both ends (scatter plots).
    void setXPadding(double fraction) { x_padding_ = fraction; }
    /// Shows the legend even for a single line (History: the run's name).
    void setLegendAlways(bool on);

    void setLogY(bool on);
    bool logY() const { return log_y_; }
    /// EMA weight for the lines with style.smooth (0 = none, < 1).
    void setSmoothing(double weight);
    double smoothing() const { return smoothing_; }
    /// The smoothed trace line `line` draws (its raw trace when not smoothed).
    const Trace& drawnTrace(int line) const;
    void setXTitle(const QString& title);
    void setYTitle(const QString& title);
    QString xTitle() const;
    QString yTitle() const;
    /// Maps iteration (the traces' x) to the shown x (tokens, seconds) through a monotone trace of
    /// (iteration, x), minus `offset`; nullptr shows iterations. Zoom ranges are in shown units.
    void setXMap(const Trace* map, double offset = 0);
    /// The shown x divided by `scale` on the axis (seconds shown as minutes: 60).
    void setXScale(double scale);
    /// A right axis showing the left one's values times `factor` (MFU next to TFLOP/s) with round
    /// ticks of its own (1-2-5 steps in its unit, labels ending in `suffix`, plain numbers then: "40%"); factor 0 removes it.
    void setRightMirror(const QString& title, double factor, const QString& suffix);
    bool hasRightAxis() const { return right_ != nullptr; }
    /// Shown in the plot area while no line has data.
    void setEmptyText(const QString& text);

    /// Decimates every visible trace for the current x range and width and hands the points over
    /// (unless nothing changed since the last time).
    void refresh();
    /// Shows [x0, x1] (stops following the data); followAll() goes back to showing everything.
    void setXRange(double x0, double x1);
    void followAll();
    /// A new run: follow all, no crosshair, no right axis.
    void resetView();
    bool following() const { return follow_; }
    /// The x extent (shown units) of all traces, if any has data.
    std::optional<std::pair<double, double>> dataXRange() const;
    std::pair<double, double> visibleXRange() const { return {x0_, x1_}; }
    /// The shown y range of the left axis (log10 of the values with the log scale).
    std::pair<double, double> yRange() const;
    /// Tick labels as drawn: "x", "y" or "right".
    QStringList tickLabels(const QString& axis) const;
    /// Points the last refresh prepared for drawing, how long it took (ms), refreshes that drew.
    int pointsDrawn() const { return points_drawn_; }
    double lastRefreshMs() const { return last_ms_; }
    /// How long the last paint took (ms): what a frame costs beyond refresh().
    double lastPaintMs() const { return last_paint_ms_; }
    int redraws() const { return redraws_; }
    /// The points line `line` draws (shown coordinates; log10 y on a log scale): the smoothed line
    /// when smoothing, an area's upper edge.
    QList<QPointF> drawnPoints(int line) const;
    /// The faint raw line behind a smoothed one (empty when not smoothed).
    QList<QPointF> drawnRawPoints(int line) const;
    /// The crosshair at shown x (nullopt hides it); the values it lists.
    void setCrosshair(std::optional<double> x);
    std::optional<double> crosshair() const { return cross_; }
    /// "name: value" per line with data at the crosshair (nearest point at or before x).
    QStringList crosshairValues() const;
    QAction* logAction() const { return log_action_; }
    /// Adds an owner's action to the chart's right-click menu (remove, move).
    void addMenuAction(QAction* action) { menu_actions_.append(action); }
    /// Re-applies the palette after a theme change.
    void restyle();
    /// The chart as an image (export).
    QImage renderImage(const QSize& size);

signals:
    /// The user chose an x range (drag, wheel); userFollow(): back to all of it.
    void userXRange(double x0, double x1);
    void userFollow();
    /// The mouse is over shown x (nullopt: it left the plot) — for syncing crosshairs.
    void hovered(std::optional<double> x);
    void logToggled(bool on);

protected:
    void mousePressEvent(QMouseEvent* e) override;
    void mouseMoveEvent(QMouseEvent* e) override;
    void mouseReleaseEvent(QMouseEvent* e) override;
    void mouseDoubleClickEvent(QMouseEvent* e) override;
    void wheelEvent(QWheelEvent* e) override;
    void keyPressEvent(QKeyEvent* e) override;
    void leaveEvent(QEvent* e) override;
    void resizeEvent(QResizeEvent* e) override;
    void paintEvent(QPaintEvent* e) override;
    void drawForeground(QPainter* painter, const QRectF& rect) override;

private:
    struct Line {
        // the series hold no points: they give the legend its marker (and the axes a series)
        QLineSeries* series = nullptr;  ///< a line's legend entry, or an area's (empty) upper edge
        QAreaSeries* area = nullptr;
        QLineSeries* lower = nullptr;
        std::vector<QPointF> points;  ///< drawn (shown coordinates): the line, smoothed when smoothing; an area's top
        std::vector<QPointF> raw;     ///< the unsmoothed line, faint, while smoothing
        std::vector<QPointF> bottom;  ///< an area's lower edge (the areas below, summed)
        const Trace* trace = nullptr;
        Trace ema;  ///< the smoothed trace, extended as the trace grows
        Ema ema_state;
        LineStyle style;
        bool visible = true;
        QString name;
        std::size_t drawn_size = 0;  ///< trace size at the last refresh
        double drawn_last = 0;
    };
    bool smoothed(const Line& l) const { return smoothing_ > 0 && l.style.smooth && !l.area; }
    void extendEma(Line& l);
    void applyStyle(Line& l);
    void updateLegend();
    double xAt(const QPoint& viewPos) const;
    double shownX(double iteration) const;
    double iterationAt(double shown) const;
    bool hasData() const;
    bool changed();
    void setTicks(QCategoryAxis* axis, double lo, double hi, const std::vector<double>& at,
                  const std::function<QString(double)>& label);
    void updateYAxis(double lo, double hi);
    void drawLine(Line& l, double a, double b, int columns, double& lo, double& hi);
    /// Paints every line and area into the scene rect `area` of the plot.
    void paintLines(QPainter* painter, const QRectF& area);

    std::vector<Line> lines_;
    QCategoryAxis* x_axis_ = nullptr;
    QCategoryAxis* y_axis_ = nullptr;
    QCategoryAxis* right_ = nullptr;
    bool log_y_ = false, legend_always_ = false;
    double smoothing_ = 0;
    double mirror_factor_ = 0;
    QString right_suffix_;
    const Trace* x_map_ = nullptr;
    double x_offset_ = 0, x_scale_ = 1, x_padding_ = 0;
    QString empty_text_;
    bool follow_ = true;
    double x0_ = 0, x1_ = 1;
    double y_lo_ = 0, y_hi_ = 1;
    bool dirty_ = true;
    int drawn_columns_ = 0;
    std::optional<double> cross_;
    QAction* log_action_ = nullptr;
    QList<QAction*> menu_actions_;
    QPointer<QRubberBand> band_;
    QPoint press_;
    bool dragging_ = false;
    int points_drawn_ = 0, redraws_ = 0;
    double last_ms_ = 0, last_paint_ms_ = 0;
    std::vector<PlotPoint> scratch_;
    std::vector<double> stack_;
    QPolygonF polygon_;  // paintLines' pixel coordinates, reused
};

/// A line in the theme's series colour `slot` (core/theme.h), with its alpha in the light and the dark
/// palette, recoloured by restyle() when the palette switches.
PlotView::LineStyle themed_line(int slot, qreal width, int light_alpha = 255, int dark_alpha = 255);

}  // namespace mwb::app
