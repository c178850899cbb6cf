#include "app/monitor/event_log_model.h"

#include "app/core/format.h"
#include "app/core/theme.h"

#include <QDateTime>

namespace mwb::app {

EventLogModel::EventLogModel(const RunTraces& traces, QObject* parent) : QAbstractTableModel(parent), traces_(traces) {
    rows_ = static_cast<int>(traces_.events.size());
}

void EventLogModel::sync(std::size_t added, bool reset) {
    const int now = static_cast<int>(traces_.events.size());
    if (reset || now < rows_ || static_cast<std::size_t>(now - rows_) != added) {
        beginResetModel();
        rows_ = now;
        endResetModel();
        return;
    }
    if (now == rows_) return;
    // the rows are in the traces already; announcing them afterwards is enough for views
    beginInsertRows({}, rows_, now - 1);
    rows_ = now;
    endInsertRows();
}

int EventLogModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : rows_;
}

int EventLogModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant EventLogModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= rows_ || index.row() >= static_cast<int>(traces_.events.size())) return {};
    const EventItem& e = traces_.events[static_cast<std::size_t>(index.row())];
    if (role == Qt::DisplayRole || role == Qt::ToolTipRole) {
        switch (index.column()) {
            case Time:
                return e.time > 0 ? QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(e.time * 1000))
                                        .toString(QStringLiteral("HH:mm:ss"))
                                  : QString();
            case Iteration:
                return e.iteration >= 0 ? QVariant(static_cast<qlonglong>(e.iteration)) : QVariant();
            case Kind:
                return QString::fromStdString(e.kind);
            case Detail:
                return QString::fromStdString(e.detail);
            default:
                return {};
        }
    }
    if (role == Qt::ForegroundRole && e.severity > 0) return e.severity >= 2 ? error_color() : warning_color();
    if (role == Qt::TextAlignmentRole && index.column() == Iteration)
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    return {};
}

QVariant EventLogModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    switch (section) {
        case Time:
            return tr("Time");
        case Iteration:
            return tr("Iteration");
        case Kind:
            return tr("Event");
        case Detail:
            return tr("Detail");
        default:
            return {};
    }
}

}  // namespace mwb::app
