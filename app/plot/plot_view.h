#pragma once
// A QtCharts line chart over Traces that only ever draws what fits its pixels: refresh() decimates
// each trace's visible range to min/max per pixel column (plot/trace.h) and replaces the series'
// points in one call. The owner decides when to refresh (the Monitor's 33 ms coalescing timer).
//
// Interaction: drag to zoom into an x range, wheel to zoom around the cursor, double-click or
// right-click to follow all the data again; hovering shows the values under the cursor.
#include "plot/trace.h"

#include <QChartView>
#include <QPointer>

#include <functional>
#include <optional>
#include <vector>

class QLineSeries;
class QAreaSeries;
class QAbstractAxis;
class QValueAxis;
class QRubberBand;

namespace mwb::app {

class PlotView : public QChartView {
    Q_OBJECT
public:
    enum class Axis { Left, Right };
    struct LineStyle {
        QColor color;
        qreal width = 1.6;
        Qt::PenStyle pen = Qt::SolidLine;
        bool markers = false;  ///< draw the points (sparse series such as validation loss)
        Axis axis = Axis::Left;
        bool in_legend = true;
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
    void setLineColor(int line, const QColor& color);
    int lineCount() const { return static_cast<int>(lines_.size()); }
    /// Removes every line (the History overlay rebuilds them).
    void clearLines();

    void setLogY(bool on);
    bool logY() const { return log_y_; }
    void setXTitle(const QString& title);
    void setYTitle(const QString& title);
    void setXLabelFormat(const QString& format);
    void setYLabelFormat(const QString& format);
    /// A right axis with its own range for the lines added with Axis::Right.
    void setRightAxis(const QString& title, bool log = false);
    /// A right axis showing the left one's values times `factor` (MFU next to TFLOP/s).
    void setRightMirror(const QString& title, double factor, const QString& format);
    void setRightMirrorFactor(double factor);
    /// Shown in the plot area while no line has data.
    void setEmptyText(const QString& text);

    /// Decimates every visible trace for the current x range and width and hands the points over.
    void refresh();
    /// Shows [x0, x1] (stops following the data); followAll() goes back to showing everything.
    void setXRange(double x0, double x1);
    void followAll();
    bool following() const { return follow_; }
    /// The x extent of all traces, if any has data.
    std::optional<std::pair<double, double>> dataXRange() const;
    std::pair<double, double> visibleXRange() const { return {x0_, x1_}; }
    /// Points handed to QtCharts by the last refresh, and how long it took (milliseconds).
    int pointsDrawn() const { return points_drawn_; }
    double lastRefreshMs() const { return last_ms_; }
    /// Re-applies the palette after a theme change.
    void restyle();
    /// The chart as an image (export).
    QImage renderImage(const QSize& size);

signals:
    /// The user chose an x range (drag, wheel); std::nullopt-like reset is userFollow().
    void userXRange(double x0, double x1);
    void userFollow();

protected:
    void mousePressEvent(QMouseEvent* e) override;
    void mouseMoveEvent(QMouseEvent* e) override;
    void mouseReleaseEvent(QMouseEvent* e) override;
    void mouseDoubleClickEvent(QMouseEvent* e) override;
    void wheelEvent(QWheelEvent* e) override;
    void resizeEvent(QResizeEvent* e) override;
    void drawForeground(QPainter* painter, const QRectF& rect) override;

private:
    struct Line {
        QLineSeries* series = nullptr;  ///< the line, or an area's upper edge
        QAreaSeries* area = nullptr;
        QLineSeries* lower = nullptr;  ///< an area's lower edge (the areas below, summed)
        const Trace* trace = nullptr;
        LineStyle style;
        bool visible = true;
        QString name;
    };
    QAbstractAxis* makeYAxis(bool log, Qt::Alignment side, const QString& title, const QString& format);
    void replaceAxis(QAbstractAxis*& axis, bool log, Qt::Alignment side);
    void applyStyle(Line& l);
    void updateLegend();
    double xAt(const QPoint& viewPos) const;
    bool hasData() const;
    void setYRange(QAbstractAxis* axis, double lo, double hi, bool log, bool nice = false);

    std::vector<Line> lines_;
    QValueAxis* x_axis_ = nullptr;
    QAbstractAxis* y_left_ = nullptr;
    QAbstractAxis* y_right_ = nullptr;
    bool log_y_ = false, log_right_ = false, right_mirror_ = false;
    double mirror_factor_ = 1;
    QString y_title_, right_title_, y_format_ = QStringLiteral("%.4g"), right_format_ = QStringLiteral("%.3g");
    QString empty_text_;
    bool follow_ = true;
    double x0_ = 0, x1_ = 1;
    QPointer<QRubberBand> band_;
    QPoint press_;
    bool dragging_ = false;
    int points_drawn_ = 0;
    double last_ms_ = 0;
    std::vector<PlotPoint> scratch_;
    std::vector<double> stack_;
};

/// A line in the theme's series colour `slot` (core/theme.h), with its alpha in the light and the dark
/// palette, recoloured by restyle() when the palette switches.
PlotView::LineStyle themed_line(int slot, qreal width, int light_alpha = 255, int dark_alpha = 255);

}  // namespace mwb::app
