#pragma once
// The configuration as a form: every field of the field table, in sections a user thinks in (model,
// parallel layout, batch, recomputation and precision, optimizer and schedule, data, run, checkpoints and
// telemetry); fields the table gains later land in "Other" by themselves. Problems are shown under
// the field that causes them.
#include "backend/config/config.h"
#include "backend/config/config_io.h"

#include <QMap>
#include <QWidget>

#include <vector>

class QFormLayout;
class QLabel;
class QSpinBox;
class QToolBox;
class QGroupBox;

namespace mwb::app {

class FieldEditor;

class ConfigForm : public QWidget {
    Q_OBJECT
public:
    explicit ConfigForm(QWidget* parent = nullptr);

    void setConfig(const Config& config);
    /// The form's values over `base` (fields the form shows replace base's). False when a text box
    /// does not hold a number (`error` says which).
    bool config(Config& out, QString* error = nullptr) const;
    /// One issue per text box that does not hold a value, on that field ("\"1e-3x\" is not a number").
    std::vector<ConfigIssue> parseIssues() const;

    /// Shows each issue under its field; returns the issues whose field the form does not show.
    std::vector<ConfigIssue> showIssues(const std::vector<ConfigIssue>& issues);
    /// The data-parallel size shown next to TP and PP (derived from the cluster; editing it asks the
    /// cluster to grow or shrink: dataParallelEdited).
    void setDataParallel(int dp, int world);
    FieldEditor* editor(const QString& field) const;
    /// Scrolls to and focuses a field's editor (an issue clicked in the plan panel).
    void focusField(const QString& field);

signals:
    void edited();
    void dataParallelEdited(int dp);

private:
    QGroupBox* addSection(const QString& title, const std::vector<std::string_view>& fields, bool collapsed = false);
    QMap<QString, FieldEditor*> editors_;
    QSpinBox* dp_ = nullptr;
    QLabel* dp_note_ = nullptr;
    bool loading_ = false;
};

}  // namespace mwb::app
