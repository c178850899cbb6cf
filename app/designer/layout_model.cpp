#include "app/designer/layout_model.h"

#include "app/core/format.h"
#include "app/core/theme.h"

namespace mwb::app {

LayoutModel::LayoutModel(QObject* parent) : QAbstractTableModel(parent) {}

void LayoutModel::setLayouts(std::vector<planner::RankedLayout> layouts, bool fitting) {
    beginResetModel();
    layouts_ = std::move(layouts);
    fitting_ = fitting;
    endResetModel();
}

int LayoutModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(layouts_.size());
}

int LayoutModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant LayoutModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= rowCount()) return {};
    const auto& r = layouts_[static_cast<std::size_t>(index.row())];
    const auto& p = r.plan;
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
            case Rank:
                return fitting_ ? QVariant(index.row() + 1) : QVariant(QStringLiteral("✘"));
            case Layout:
                return QString::fromStdString(r.summary);
            case IterationTime:
                return format_duration(p.time.iteration_s);
            case TokensPerSec:
                return format_count(p.time.tokens_per_s);
            case Mfu:
                return format_percent(p.time.mfu);
            case Memory:
                return p.estimated ? format_bytes(static_cast<double>(p.most_loaded().peak_total)) : QString();
            case Reason:
                return QString::fromStdString(r.reason);
            default:
                return {};
        }
    }
    if (role == Qt::ToolTipRole && index.column() == Reason) return QString::fromStdString(r.reason);
    if (role == Qt::ForegroundRole && !fitting_) return error_color();
    if (role == Qt::TextAlignmentRole && index.column() != Layout && index.column() != Reason)
        return int(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::UserRole) {  // sort keys
        switch (index.column()) {
            case IterationTime:
                return p.time.iteration_s;
            case TokensPerSec:
                return p.time.tokens_per_s;
            case Mfu:
                return p.time.mfu;
            case Memory:
                return p.estimated ? static_cast<double>(p.most_loaded().peak_total) : 0.0;
            default:
                return data(index, Qt::DisplayRole);
        }
    }
    return {};
}

QVariant LayoutModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
        case Rank:
            return tr("#");
        case Layout:
            return tr("Layout");
        case IterationTime:
            return tr("Iteration");
        case TokensPerSec:
            return tr("Tokens/s");
        case Mfu:
            return tr("MFU");
        case Memory:
            return tr("Memory/device");
        case Reason:
            return tr("Why");
        default:
            return {};
    }
}

}  // namespace mwb::app

namespace mwb::app {

void apply_layout(Config& t, const Config& f) {
    t.parallel.tensor_model_parallel_size = f.parallel.tensor_model_parallel_size;
    t.parallel.pipeline_model_parallel_size = f.parallel.pipeline_model_parallel_size;
    t.parallel.sequence_parallel = f.parallel.sequence_parallel;
    t.parallel.num_layers_per_virtual_pipeline_stage = f.parallel.num_layers_per_virtual_pipeline_stage;
    t.parallel.use_distributed_optimizer = f.parallel.use_distributed_optimizer;
    t.training.micro_batch_size = f.training.micro_batch_size;
    t.training.recompute_granularity = f.training.recompute_granularity;
    t.training.recompute_method = f.training.recompute_method;
    t.training.recompute_num_layers = f.training.recompute_num_layers;
}

}  // namespace mwb::app
