#pragma once
// Designer: the configuration form (presets, load/save as mwb-train's JSON) and the cluster on the
// left; the planner's prediction on the right, recomputed on every edit (plan() takes microseconds);
// "Auto-configure" searches the layouts and applies one.
#include "backend/config/config.h"
#include "mwb/planner/plan.h"

#include <QTimer>
#include <QWidget>

class QComboBox;
class QLabel;
class QPushButton;

namespace mwb::app {

class ConfigForm;
class ClusterForm;
class PlanPanel;

/// The cluster a preset comes with: the CPU for the tiny demo, else whole 8-GPU A100 nodes enough
/// for its model parallelism.
struct PresetCluster {
    std::string device;
    int per_node = 1, nodes = 1;
};
PresetCluster preset_cluster(const std::string& name, const Config& config);
/// The preset's parameter count by the planner (0 when it cannot be planned): the presets' order.
int64_t preset_parameters(const std::string& name);

class DesignerView : public QWidget {
    Q_OBJECT
public:
    explicit DesignerView(QWidget* parent = nullptr);

    /// The configuration as the form holds it (the last valid values for unparsable text boxes).
    Config config() const;
    planner::Cluster cluster() const;
    void setConfig(const Config& config);
    void setCluster(const QString& device, int per_node, int nodes);
    /// Loads a preset by name and a cluster it runs on.
    bool loadPreset(const QString& name, QString* error = nullptr);
    bool openFile(const QString& path, QString* error = nullptr);
    bool saveFile(const QString& path, QString* error = nullptr);
    QString currentFile() const { return file_; }
    bool modified() const { return modified_; }
    /// With unsaved edits, asks whether to save them, discard them or cancel; true to go on.
    bool confirmDiscard();
    /// Replans now (otherwise it happens on the next event-loop turn after an edit).
    void replan();
    const planner::Plan& plan() const { return plan_; }
    /// Microseconds the last plan() call took.
    double lastPlanMicroseconds() const { return plan_us_; }

    ConfigForm* form() const { return form_; }
    ClusterForm* clusterForm() const { return cluster_; }
    PlanPanel* planPanel() const { return panel_; }

public slots:
    void openDialog();
    void save();
    void saveAs();
    void autoConfigure();

signals:
    /// After every replan (Launch shows the command for the current design).
    void designChanged();
    /// A file was opened or saved (recent files).
    void fileUsed(const QString& path);
    void message(const QString& text);

private:
    void edited();
    void updateTitle();
    QComboBox* presets_ = nullptr;
    ConfigForm* form_ = nullptr;
    ClusterForm* cluster_ = nullptr;
    PlanPanel* panel_ = nullptr;
    QLabel* file_label_ = nullptr;
    QTimer replan_timer_;
    Config config_;  // the last valid form contents
    planner::Plan plan_;
    double plan_us_ = 0;
    QString file_;
    bool modified_ = false;
    QString shown_preset_;
    QWidget* resize_banner_ = nullptr;
    QLabel* resize_text_ = nullptr;
    QPushButton* resize_button_ = nullptr;
    int resize_to_ = 0;  ///< the preset the design came from ("" for a file)
    bool loading_ = false;
};

}  // namespace mwb::app
