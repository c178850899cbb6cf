#pragma once
// The final loss of every run in the table against one setting (learning rate, TP, hidden size, ...):
// the sweep view W&B users reach for. One marker per run that has both; numbers only.
#include "app/history/run_rows.h"
#include "app/plot/plot_view.h"

#include <QWidget>

class QComboBox;

namespace mwb::app {

class ScatterPlot : public QWidget {
    Q_OBJECT
public:
    explicit ScatterPlot(QWidget* parent = nullptr);

    /// The runs to show (the table's filtered rows); the key choices are their numeric settings
    /// whose values differ.
    void setRows(const std::vector<const RunRow*>& rows);
    void setKey(const QString& key);
    QString key() const;
    PlotView* plot() const { return plot_; }
    /// The (setting, final loss) points drawn, in setting order.
    const Trace& points() const { return points_; }

private:
    void rebuild();
    std::vector<RunRow> rows_;
    Trace points_;
    QComboBox* key_ = nullptr;
    PlotView* plot_ = nullptr;
};

}  // namespace mwb::app
