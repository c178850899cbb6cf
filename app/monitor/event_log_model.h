#pragma once
// The run's events (start, evaluations, checkpoints, skipped iterations, control, end) as a table over
// RunTraces::events: rows are only ever appended (or all reset for a new run), so the view keeps its
// scroll position and selection while the run goes on.
#include "app/live/run_traces.h"

#include <QAbstractTableModel>

namespace mwb::app {

class EventLogModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Time, Iteration, Kind, Detail, ColumnCount };
    explicit EventLogModel(const RunTraces& traces, QObject* parent = nullptr);

    /// The traces' events grew by `added` rows (or were replaced, `reset`).
    void sync(std::size_t added, bool reset);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    const RunTraces& traces_;
    int rows_ = 0;  // rows announced to views
};

}  // namespace mwb::app
