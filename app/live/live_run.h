#pragma once
// One watched run on the GUI side: starts the receiver thread (TelemetryWorker), and on its signal
// arms a single-shot ~33 ms timer; when the timer fires it takes everything pending from the
// SeriesBuffer at once, appends it to the RunTraces and emits updated() — so the views redraw at most
// 30 times a second however fast messages come (PlotJuggler's coalescing redraw).
#include "app/live/run_traces.h"
#include "app/live/series_buffer.h"
#include "app/live/telemetry_worker.h"

#include <QObject>
#include <QTimer>

#include <memory>

class QThread;

namespace mwb::app {

class LiveRun : public QObject {
    Q_OBJECT
public:
    explicit LiveRun(QObject* parent = nullptr);
    ~LiveRun() override;

    /// Follows a run (detaching from the previous one first).
    void attach(const AttachOptions& options);
    /// Stops the receiver (waits for its thread); the traces stay as they are.
    void detach();
    bool attached() const { return thread_ != nullptr; }
    const AttachOptions& options() const { return options_; }

    RunTraces& traces() { return traces_; }
    const RunTraces& traces() const { return traces_; }
    LinkState link() const { return buffer_ ? buffer_->link() : LinkState{}; }
    int64_t seqBreaks() const { return buffer_ ? buffer_->seq_breaks() : 0; }
    /// The coalescing interval (default 33 ms).
    void setRedrawInterval(int ms) { timer_.setInterval(ms); }
    /// Takes what is pending now (tests; the timer does it otherwise).
    void flush();

    /// The app's own knowledge of how a run ended when the run could not say (a local process that
    /// crashed or was killed): shown unless the run published run.end.
    void noteEnded(const RunEnd& end);

signals:
    /// New data was appended; `newEvents` rows were added to traces().events; `reset`: a new run.
    void updated(std::size_t newEvents, bool reset);
    void attachFailed(const QString& message);

private:
    void onDataArrived();
    AttachOptions options_;
    std::shared_ptr<SeriesBuffer> buffer_;
    TelemetryWorker* worker_ = nullptr;
    QThread* thread_ = nullptr;
    QTimer timer_;
    RunTraces traces_;
};

}  // namespace mwb::app
