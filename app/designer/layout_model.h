#pragma once
// The auto-configurator's ranked layouts as a table (QAbstractTableModel over planner::RankedLayout):
// rank, layout, iteration time, tokens/s, MFU, memory per device, why.
#include "mwb/planner/search.h"

#include <QAbstractTableModel>

#include <vector>

namespace mwb::app {

class LayoutModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Rank, Layout, IterationTime, TokensPerSec, Mfu, Memory, Reason, ColumnCount };

    explicit LayoutModel(QObject* parent = nullptr);
    void setLayouts(std::vector<planner::RankedLayout> layouts, bool fitting);
    const planner::RankedLayout& layout(int row) const { return layouts_.at(static_cast<std::size_t>(row)); }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::vector<planner::RankedLayout> layouts_;
    bool fitting_ = true;
};

}  // namespace mwb::app

namespace mwb::app {

/// Copies the layout a search chose (TP, PP, SP, virtual stages, distributed optimizer, micro-batch,
/// recomputation) from `from` onto `target`, leaving the model, batch and everything else as they are.
void apply_layout(Config& target, const Config& from);

}  // namespace mwb::app
