#pragma once
// The Monitor's charts over one run's RunTraces: training and validation loss, learning rate, gradient norm, loss scale, tokens/s, TFLOP/s per
// device with MFU on a mirrored right axis, iteration time, and the step time split into compute / communication /
// bubble (stacked over iterations, and the newest step as one bar). One smoothing slider (EMA, raw
// line faint behind) for every chart, the x-axis by iteration, trained tokens or wall time, a
// crosshair synced across the charts, log scale per chart (L or the chart's menu). The owner calls
// refresh() from its coalescing timer; nothing here redraws per message.
#include "app/live/run_traces.h"
#include "app/plot/plot_view.h"

#include <QWidget>

class QCheckBox;
class QGridLayout;
class QMenu;
class QComboBox;
class QLabel;
class QSlider;

namespace mwb::app {

class StackedBar;

class MetricCharts : public QWidget {
    Q_OBJECT
public:
    enum Chart {
        LossChart,
        LrChart,
        GradNormChart,
        LossScaleChart,
        ThroughputChart,
        TflopsChart,
        StepTimeChart,
        IterationTimeChart,
        ChartCount
    };

    enum class XAxis { Iteration, Tokens, WallTime };

    explicit MetricCharts(RunTraces& traces, QWidget* parent = nullptr);

    /// Decimates and redraws every chart from the traces (after they grew or were replaced).
    void refresh();
    /// A new run: every chart follows all its data again, no crosshair, no MFU axis until the run
    /// reports a peak.
    void resetView();
    /// The EMA weight of every chart (0 = none, 0.99 = heavy).
    void setSmoothing(double weight);
    double smoothing() const;
    void setXAxis(XAxis x);
    XAxis xAxis() const { return x_; }
    void setLogLoss(bool on);
    bool logLoss() const;
    PlotView* chart(Chart c) const { return charts_[c]; }
    /// The metric table's series chart `c` draws, in legend order (its title, value axis and line
    /// names are those rows': ipc::chart_title, ChartText::axis, ipc::chart_line).
    static const std::vector<SeriesId>& seriesOf(Chart c);
    /// The charts' last paints together (ms): the owner paces its redraws by it.
    double lastPaintMs() const;

    // ---- the metric picker: any recorded metric as a chart of its own, below the built-in grid ----
    /// Every metric the run has recorded beyond the built-in charts (RunTraces::metrics), sorted.
    QStringList availableMetrics() const;
    /// Adds a chart of `metric` at the end (it fills in when the run records it).
    void addChart(const QString& metric);
    void removeChart(int index);
    /// Moves chart `index` by `delta` places (−1: left/up, +1: right/down).
    void moveChart(int index, int delta);
    /// The picked charts in order (what the settings remember); setCustomCharts() rebuilds them.
    QStringList customCharts() const;
    void setCustomCharts(const QStringList& metrics);
    PlotView* customChart(int index) const;
    QMenu* addMenu() const { return add_menu_; }
    StackedBar* stepBar() const { return step_bar_; }
    void restyle();

signals:
    /// The picked charts changed (added, removed, moved): the owner remembers customCharts().
    void arrangementChanged();

private:
    PlotView* add(Chart c);  // titled from the metric table's row of its first series
    void applyXAxis();
    void layoutCustom();
    void bindCustom();
    struct Custom {
        QString metric;
        PlotView* view = nullptr;
        const Trace* bound = nullptr;
    };
    std::vector<Custom> custom_;
    QGridLayout* custom_grid_ = nullptr;
    QMenu* add_menu_ = nullptr;
    RunTraces& traces_;
    XAxis x_ = XAxis::Iteration;
    QComboBox* x_combo_ = nullptr;
    PlotView* charts_[ChartCount] = {};
    QSlider* smoothing_ = nullptr;
    QLabel* smoothing_label_ = nullptr;
    QCheckBox* log_loss_ = nullptr;
    StackedBar* step_bar_ = nullptr;
    double mfu_factor_ = 0;  // MFU per TFLOP/s (1 / peak), 0 while unknown
};

/// The run's peak TFLOP/s per device (config peak_tflops_per_device, else mfu / tflops of the
/// newest step), 0 when the run reports no MFU.
double peak_tflops(const RunTraces& traces);

}  // namespace mwb::app
