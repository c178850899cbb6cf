#include "app/live/live_run.h"

#include <QThread>

namespace mwb::app {

LiveRun::LiveRun(QObject* parent) : QObject(parent) {
    timer_.setSingleShot(true);
    timer_.setInterval(33);
    connect(&timer_, &QTimer::timeout, this, &LiveRun::flush);
}

LiveRun::~LiveRun() {
    detach();
}

void LiveRun::attach(const AttachOptions& options) {
    detach();
    options_ = options;
    traces_.clear();
    buffer_ = std::make_shared<SeriesBuffer>();
    thread_ = new QThread;
    thread_->setObjectName(QStringLiteral("mwb-telemetry"));
    worker_ = new TelemetryWorker(options, buffer_);
    worker_->moveToThread(thread_);
    connect(thread_, &QThread::started, worker_, &TelemetryWorker::run);
    connect(worker_, &TelemetryWorker::finished, thread_, &QThread::quit);
    connect(thread_, &QThread::finished, worker_, &QObject::deleteLater);
    connect(worker_, &TelemetryWorker::dataArrived, this, &LiveRun::onDataArrived, Qt::QueuedConnection);
    connect(worker_, &TelemetryWorker::failed, this, &LiveRun::attachFailed, Qt::QueuedConnection);
    thread_->start();
}

void LiveRun::detach() {
    if (!thread_) return;
    worker_->requestStop();
    thread_->quit();
    thread_->wait();
    delete thread_;  // the worker went with the thread (finished -> deleteLater)
    thread_ = nullptr;
    worker_ = nullptr;
    flush();  // keep what arrived before the stop
}

void LiveRun::onDataArrived() {
    if (!timer_.isActive()) timer_.start();
}

void LiveRun::flush() {
    if (!buffer_) return;
    Update u = buffer_->take();
    // the receiver wakes us for link changes too (four times a second): nothing new, nothing to
    // redraw; the Monitor reads the link from its own slow timer
    if (u.empty()) return;
    bool reset = false;
    const std::size_t events = traces_.apply(std::move(u), &reset);
    emit updated(events, reset);
}

void LiveRun::noteEnded(const RunEnd& end) {
    if (traces_.end) return;
    traces_.end = end;
    EventItem e;
    e.time = end.time;
    e.iteration = end.iteration;
    e.kind = "run.end";
    e.detail = "run " + end.status + (end.reason.empty() ? std::string() : ": " + end.reason);
    e.severity = 2;
    traces_.events.push_back(e);
    emit updated(1, false);
}

}  // namespace mwb::app
