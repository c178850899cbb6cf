#pragma once
// The planner's answer beside the form, redrawn on every edit: does it fit, memory per pipeline stage
// stacked by category against the device, parameters, FLOPs, iteration time and its parts, tokens/s,
// MFU, days to train N tokens, bytes per process group, and every problem (clicking one focuses its
// field).
#include "mwb/planner/plan.h"

#include <QWidget>

class QLabel;
class QListWidget;
class QDoubleSpinBox;
class QGridLayout;

namespace mwb::app {

class MemoryBars;
class StackedBar;

class PlanPanel : public QWidget {
    Q_OBJECT
public:
    explicit PlanPanel(QWidget* parent = nullptr);
    /// Shows a plan; `extra` are problems of fields the form does not show (listed here too).
    void showPlan(const planner::Plan& plan);
    /// Tokens for "days to train" (0: train_iters × global batch × sequence).
    double trainTokens() const;
    /// The value shown for a figure ("parameters", "iteration_time", "tokens_per_s", "mfu", "days", ...).
    QString figure(const QString& key) const;
    QString headline() const;
    int issueCount() const;
    const MemoryBars* memoryBars() const { return memory_; }

signals:
    void issueActivated(const QString& field);
    void trainTokensChanged();

private:
    void addFigure(const QString& key, const QString& label, int row, int col);
    void setFigure(const QString& key, const QString& value, const QString& tip = {});
    QLabel* headline_ = nullptr;
    QGridLayout* grid_ = nullptr;
    QMap<QString, QLabel*> figures_;
    MemoryBars* memory_ = nullptr;
    StackedBar* time_ = nullptr;
    QLabel* comm_ = nullptr;
    QListWidget* issues_ = nullptr;
    QLabel* notes_ = nullptr;
    QDoubleSpinBox* tokens_ = nullptr;
    int issue_count_ = 0;
};

}  // namespace mwb::app
