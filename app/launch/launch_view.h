#pragma once
// Launch: runs the Designer's design on this machine (mwb-train, or mpirun -np N for a multi-rank
// layout) with its console output in a pane, writes the Slurm batch script and the connection details
// for a cluster, and attaches to any running job (AttachPanel). Local runs get a fresh run directory
// under runs_root(); the main window switches the Monitor to it (runStarted).
#include "backend/config/config.h"
#include "app/launch/commands.h"
#include "app/live/telemetry_worker.h"
#include "mwb/planner/plan.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;

namespace mwb::app {

class AttachPanel;
class LocalRun;

/// Where a generated Slurm script's run saves checkpoints, read from the script itself (its --save,
/// the embedded config's "save", else $RUN_DIR/checkpoints/).
QString checkpoint_location(const QString& script);

class LaunchView : public QWidget {
    Q_OBJECT
public:
    explicit LaunchView(QWidget* parent = nullptr);

    /// The design to launch (the Designer's config, cluster and plan); refreshes the command and script.
    void setDesign(const Config& config, const planner::Cluster& cluster, const planner::Plan& plan);
    const Config& design() const { return config_; }
    const planner::Plan& plan() const { return plan_; }

    /// The local command for the design with `run_dir` and `config_file` (what Start runs).
    bool localCommand(const QString& run_dir, const QString& config_file, LocalLaunch& out, QString* error) const;
    /// Saves the design to <new run dir>/config.json and starts it. False (error set) when it cannot.
    bool startLocal(QString* error = nullptr);
    /// Starts mwb-train on its embedded demo defaults (one CPU process) in a fresh run directory.
    bool startDemo(QString* error = nullptr);
    void stop();
    void kill();
    bool running() const;
    LocalRun* localRun() const { return run_; }
    QString runDir() const { return run_dir_; }

    SlurmOptions slurmOptions() const;
    QString slurmScript() const;
    QString connectionDetails() const;
    QString console() const;
    QString status() const;
    AttachPanel* attachPanel() const { return attach_; }

public slots:
    void saveSlurmScript();

signals:
    /// A local run started: its run directory and number of ranks.
    void runStarted(const QString& run_dir, int world);
    /// The local process ended (description: describe_exit()).
    void runEnded(int exit_code, bool crashed, const QString& description);
    void attachRequested(const mwb::app::AttachOptions& options);
    void message(const QString& text);

private:
    bool start(const LocalLaunch& launch, QString* error);
    void refresh();
    void setStatus(const QString& text, const QColor& color);
    QWidget* buildLocal();
    QWidget* buildSlurm();
    Config config_;
    planner::Cluster cluster_;
    planner::Plan plan_;
    LocalRun* run_ = nullptr;
    QString run_dir_;
    QLabel* design_ = nullptr;
    QLineEdit* name_ = nullptr;
    QComboBox* device_ = nullptr;
    QSpinBox* threads_ = nullptr;
    QLineEdit* extra_ = nullptr;
    QLabel* command_ = nullptr;
    QPushButton* start_ = nullptr;
    QPushButton* stop_ = nullptr;
    QPushButton* kill_ = nullptr;
    QLabel* status_ = nullptr;
    QPlainTextEdit* console_ = nullptr;
    QLineEdit* job_ = nullptr;
    QLineEdit* partition_ = nullptr;
    QLineEdit* account_ = nullptr;
    QLineEdit* time_ = nullptr;
    QLineEdit* trainer_ = nullptr;
    QLineEdit* run_root_ = nullptr;
    QLineEdit* key_dir_ = nullptr;
    QSpinBox* port_ = nullptr;
    QPlainTextEdit* script_ = nullptr;
    QLabel* checkpoints_ = nullptr;
    QPlainTextEdit* details_ = nullptr;
    AttachPanel* attach_ = nullptr;
};

}  // namespace mwb::app
