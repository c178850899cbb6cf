#pragma once
// Several stored runs' curves of one metric overlaid, against iteration, trained tokens or wall time.
// Series come from the store already downsampled (store::Store::series: min/max per bucket), so a
// comparison of 1M-point runs reads and draws a few thousand points. Exports the chart as PNG and the
// series (at full resolution) as CSV.
//
// Tokens and wall time are per step record in the store (steps.consumed_tokens, steps.time): each
// run's iteration -> tokens / seconds-since-start map is read at up to 2,000 anchor iterations and
// interpolated linearly in between (exact at the anchors; wall time includes pauses and restarts).
#include "mwb/store/store.h"
#include "app/plot/plot_view.h"

#include <QWidget>

#include <string>
#include <vector>

class QCheckBox;
class QComboBox;
class QLabel;
class QSlider;

namespace mwb::app {

enum class CompareX { Iteration, Tokens, WallTime };

/// A monotone map from iteration to another x (tokens, seconds), from anchor points.
class XMap {
public:
    void add(double iteration, double x);  ///< anchors in increasing iteration
    bool empty() const { return it_.empty(); }
    /// Linear between anchors; before the first / after the last anchor, that anchor's x.
    double operator()(double iteration) const;

private:
    std::vector<double> it_, x_;
};

/// Run `uid`'s iteration -> consumed_tokens map (from the downsampled consumed_tokens series).
XMap tokens_map(store::Store& store, const std::string& uid);
/// Run `uid`'s iteration -> seconds since the run was created (steps.time at up to `anchors` iterations).
XMap wall_time_map(store::Store& store, const std::string& uid, int anchors = 2000);

struct CompareRun {
    std::string uid;
    QString title;
    int color = -1;  ///< the theme's series colour slot (-1: by position; History's grouping sets it)
};

/// Every step metric of the store (store::step_metrics()) of `runs` at full resolution, one row per
/// step record: "run,name,iteration,lm_loss,lr,...", empty where a record lacks the metric.
QString all_metrics_csv(store::Store& store, const std::vector<CompareRun>& runs);

class ComparePlot : public QWidget {
    Q_OBJECT
public:
    explicit ComparePlot(QWidget* parent = nullptr);

    void setStore(store::Store* store);
    void setRuns(std::vector<CompareRun> runs);
    /// A step metric of the store ("lm_loss", "tokens_per_sec", ...) or "val_loss" (the evaluations).
    void setMetric(const QString& metric);
    QString metric() const;
    void setXAxis(CompareX x);
    CompareX xAxis() const { return x_; }
    void setLogY(bool on);
    QSlider* smoothingSlider() const { return smoothing_; }
    /// Re-reads the series from the store.
    void reloadData();

    PlotView* plot() const { return plot_; }
    int runCount() const { return static_cast<int>(runs_.size()); }
    const Trace& trace(int i) const { return traces_.at(static_cast<std::size_t>(i)); }
    const std::vector<CompareRun>& runs() const { return runs_; }

    /// The selected runs' series at full resolution: "run,name,iteration[,tokens|wall_time_s],<metric>".
    QString csv() const;
    bool exportCsv(const QString& file, QString* error = nullptr) const;
    bool exportPng(const QString& file, QString* error = nullptr);

signals:
    void message(const QString& text);

private:
    /// The (iteration, value) points of run `uid` with at most `buckets` buckets.
    std::vector<PlotPoint> points(const std::string& uid, int buckets, bool* raw = nullptr) const;
    QString xColumn() const;
    void updateTitles();
    store::Store* store_ = nullptr;
    std::vector<CompareRun> runs_;
    std::vector<Trace> traces_;
    CompareX x_ = CompareX::Iteration;
    double time_unit_ = 1;  // seconds per unit of the wall-time axis
    PlotView* plot_ = nullptr;
    QComboBox* metric_ = nullptr;
    QComboBox* x_combo_ = nullptr;
    QCheckBox* log_ = nullptr;
    QSlider* smoothing_ = nullptr;
    QLabel* note_ = nullptr;
};

}  // namespace mwb::app
