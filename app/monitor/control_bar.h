#pragma once
// Pause / resume / checkpoint now / stop over the run's control channel (ipc::ControlClient with the
// run's token). A request is answered at the trainer's next iteration boundary, so it runs off the GUI
// thread (QtConcurrent) and its reply comes back as a signal; one request at a time.
#include <QFutureWatcher>
#include <QWidget>

#include "mwb/ipc/curve.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>

class QPushButton;
class QLabel;

namespace mwb::app {

/// Where a run takes control requests: its run directory (telemetry.json + control.token), or an
/// endpoint with the token read from a file.
struct ControlTarget {
    std::filesystem::path run_dir;  ///< set when attached to a run directory
    std::string endpoint;           ///< the control endpoint (from the heartbeats) otherwise
    std::filesystem::path token_file;
    std::optional<ipc::ClientCurve> curve;  ///< runs off loopback (CURVE instead of the token)
    bool valid() const { return !run_dir.empty() || !endpoint.empty(); }
};

class ControlBar : public QWidget {
    Q_OBJECT
public:
    explicit ControlBar(QWidget* parent = nullptr);

    void setTarget(const ControlTarget& target);
    /// The run ended (or no run): buttons off.
    void setRunning(bool running, bool paused = false);
    /// Ask before stopping (default on; tests turn it off).
    void setConfirmStop(bool on) { confirm_stop_ = on; }
    bool busy() const { return watcher_.isRunning(); }
    /// The trainer said it is paused (its reply to pause or status).
    bool paused() const { return running_ && paused_; }
    QLabel* stateLabel() const { return state_; }
    QPushButton* button(const QString& action) const;

    /// Sends `action` (pause, resume, checkpoint, stop, status); false when no run or one is in flight.
    bool send(const QString& action);

signals:
    /// The trainer's reply (`ok` false and `error` when refused or unreachable).
    void replied(const QString& action, bool ok, const QString& text);

private:
    void updateButtons();
    void setState(const QString& text, bool error);
    struct Reply {
        QString action;
        nlohmann::json body;
        QString error;
    };
    ControlTarget target_;
    bool running_ = false, paused_ = false, confirm_stop_ = true;
    QPushButton *pause_ = nullptr, *resume_ = nullptr, *checkpoint_ = nullptr, *stop_ = nullptr;
    QLabel* state_ = nullptr;
    QFutureWatcher<Reply> watcher_;
};

}  // namespace mwb::app
