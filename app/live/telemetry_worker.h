#pragma once
// The receiver thread: follows one run with ipc::Follower (late join, gaps, reconnects, restarts: the
// clone pattern, docs/protocol.md), records every message into the store (one transaction per batch,
// as mwb-record does), digests it into the SeriesBuffer and emits dataArrived() only when the GUI has
// nothing pending. Lives on its own QThread; run() loops until requestStop().
#include "app/live/series_buffer.h"
#include "mwb/ipc/curve.h"
#include "mwb/store/store.h"

#include <QObject>

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>

namespace mwb::app {

struct AttachOptions {
    /// tcp://HOST:PORT of the run's PUB socket, ipc://PATH, or a run directory on this machine.
    std::string endpoint;
    std::optional<ipc::ClientCurve> curve;  ///< for runs off loopback
    /// The store to record into and to reload history from; empty: neither.
    std::filesystem::path store_file;
    /// A token file for control requests when attaching by endpoint (run directories have their own).
    std::filesystem::path token_file;
    /// Silent this long (no message, no heartbeat) and the run is marked interrupted in the store.
    double gone_after_s = store::Store::kDefaultGoneAfterS;
};

class TelemetryWorker : public QObject {
    Q_OBJECT
public:
    TelemetryWorker(AttachOptions options, std::shared_ptr<SeriesBuffer> buffer);
    /// Thread-safe: run() returns within about 50 ms.
    void requestStop() { stop_.store(true); }

public slots:
    void run();

signals:
    void dataArrived();
    void failed(const QString& message);
    void finished();

private:
    void notify();
    AttachOptions options_;
    std::shared_ptr<SeriesBuffer> buffer_;
    std::atomic<bool> stop_{false};
    std::set<std::string> loaded_;  // runs whose stored history was handed over
};

}  // namespace mwb::app
