#pragma once
// The Monitor tab: one watched run (LiveRun) drawn as charts (MetricCharts), memory per rank against
// the device and the planner's prediction (MemoryBars), a TP×PP×DP grid for finding the straggler
// (RankGrid), the event log, a status line, and the control buttons. Everything redraws when LiveRun
// emits updated() — at most ~30 times a second, whatever the message rate — and from a slow timer for
// the link state. The run ending, crashing or the app restarting only changes what the status says:
// the data stays, and a new attach reloads the history from the store before going live.
#include "app/live/live_run.h"

#include <QWidget>

#include <vector>

class QComboBox;
class QLabel;
class QTabWidget;
class QTableView;

namespace mwb::app {

class ControlBar;
class EventLogModel;
class MemoryBars;
class MetricCharts;
class RankGrid;
class SamplesPanel;
class StatusLine;

class MonitorView : public QWidget {
    Q_OBJECT
public:
    explicit MonitorView(QWidget* parent = nullptr);
    ~MonitorView() override;

    LiveRun* liveRun() const { return live_; }
    /// Follows a run (an endpoint or a run directory), detaching first.
    void attach(const AttachOptions& options);
    void detach();
    /// The planner's predicted peak bytes per global rank (drawn over the memory bars) and the device
    /// capacity in bytes; an empty vector removes the prediction.
    void setPrediction(std::vector<double> peak_bytes_per_rank, double capacity_bytes);
    /// How a local process ended when the run itself could not say (crash/kill).
    void noteEnded(const RunEnd& end);

    MetricCharts* charts() const { return charts_; }
    MemoryBars* memoryBars() const { return memory_; }
    RankGrid* rankGrid() const { return grid_; }
    EventLogModel* eventLog() const { return events_; }
    StatusLine* statusLine() const { return status_; }
    ControlBar* controls() const { return controls_; }
    SamplesPanel* samples() const { return samples_; }
    /// The tabs under the ranks: Events, Samples.
    QTabWidget* logTabs() const { return log_tabs_; }
    /// Redraws everything now from the traces (the LiveRun timer does this otherwise).
    void redraw();

signals:
    void message(const QString& text);

private:
    void onUpdated(std::size_t new_events, bool reset);
    void updateMemory();
    void updateLink();
    void syncSamples(bool reset);
    LiveRun* live_ = nullptr;
    MetricCharts* charts_ = nullptr;
    MemoryBars* memory_ = nullptr;
    RankGrid* grid_ = nullptr;
    QComboBox* grid_metric_ = nullptr;
    EventLogModel* events_ = nullptr;
    QTableView* event_view_ = nullptr;
    StatusLine* status_ = nullptr;
    ControlBar* controls_ = nullptr;
    SamplesPanel* samples_ = nullptr;
    QTabWidget* log_tabs_ = nullptr;
    std::vector<double> predicted_;
    double capacity_ = 0;
    bool ended_shown_ = false;
};

}  // namespace mwb::app
