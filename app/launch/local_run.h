#pragma once
// A run started on this machine: the QProcess of mwb-train (or mpirun), its console output as it
// comes, and how it ended. Stopping sends SIGTERM (mwb-train checkpoints and exits 130), killing
// follows if it does not end within 15 s; the same happens when the object is destroyed with the run going.
#include "app/launch/commands.h"

#include <QObject>
#include <QProcess>
#include <QTimer>

#include <string>

namespace mwb::app {

/// What the store and the Monitor call a process that ended without its run saying how (no run.end):
/// status "interrupted" when a signal meant to stop it ended it (SIGKILL, SIGTERM, SIGINT, SIGHUP),
/// "failed" for other signals and non-zero exits, "finished" for exit 0; reason: describe_exit().
struct ProcessEnd {
    std::string status;
    std::string reason;
};
ProcessEnd process_end(int exit_code, bool crashed);

class LocalRun : public QObject {
    Q_OBJECT
public:
    explicit LocalRun(QObject* parent = nullptr);
    ~LocalRun() override;

    bool start(const LocalLaunch& launch, QString* error);
    void stop();
    void kill();
    bool running() const { return process_.state() != QProcess::NotRunning; }
    const LocalLaunch& launch() const { return launch_; }
    qint64 pid() const { return process_.processId(); }

signals:
    void output(const QString& text);
    void finished(int exit_code, bool crashed, const QString& description);

private:
    QProcess process_;
    QTimer kill_timer_;
    LocalLaunch launch_;
};

}  // namespace mwb::app
