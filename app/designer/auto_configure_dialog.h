#pragma once
// "Auto-configure": runs the planner's search (planner/search.h) off the GUI thread, lists the
// layouts that fit ranked by predicted throughput with the reason for each, the fastest that do not
// fit, and what was rejected; "Apply" hands the chosen layout back to the Designer.
#include "mwb/planner/search.h"

#include <QDialog>
#include <QFutureWatcher>

class QTableView;
class QLabel;
class QPushButton;
class QSpinBox;

namespace mwb::app {

class LayoutModel;

class AutoConfigureDialog : public QDialog {
    Q_OBJECT
public:
    AutoConfigureDialog(const Config& base, const planner::Cluster& cluster, QWidget* parent = nullptr);
    ~AutoConfigureDialog() override;

    /// Starts the search (again, e.g. after changing the options).
    void start();
    /// Blocks until the search is done (tests).
    void waitForResult();
    const planner::SearchResult& result() const { return result_; }
    LayoutModel* model() const { return model_; }
    /// The configuration with the selected layout applied (base unchanged when nothing is selected).
    Config chosen() const;
    void selectRow(int row);
    /// The share of usable device memory every ranked layout must leave free (default 0.05).
    void setHeadroom(double fraction);
    double headroom() const;
    /// Why the layouts within 2 % of the best one's throughput differ from it ("" when none is).
    QString nearTies() const;

private:
    void showResult();
    QString explainTies() const;
    Config base_;
    planner::Cluster cluster_;
    planner::SearchResult result_;
    QFutureWatcher<planner::SearchResult> watcher_;
    LayoutModel* model_ = nullptr;
    LayoutModel* too_big_ = nullptr;
    QTableView* table_ = nullptr;
    QTableView* too_big_table_ = nullptr;
    QLabel* summary_ = nullptr;
    QPushButton* apply_ = nullptr;
    QSpinBox* top_ = nullptr;
    QSpinBox* max_tp_ = nullptr;
    QSpinBox* headroom_ = nullptr;
    QLabel* ties_ = nullptr;
};

}  // namespace mwb::app
