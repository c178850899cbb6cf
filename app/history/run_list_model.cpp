#include "app/history/run_list_model.h"

#include "mwb/ipc/message.h"

#include "app/core/format.h"
#include "app/core/theme.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace mwb::app {

namespace {

QString q(const std::string& s) {
    return QString::fromStdString(s);
}

QStringList tag_list(const std::vector<std::string>& tags) {
    QStringList out;
    for (const auto& t : tags) out << q(t);
    return out;
}

}  // namespace

QStringList parse_tags(const QString& text) {
    QStringList out;
    for (const QString& part : text.split(QLatin1Char(','))) {
        const QString t = part.trimmed();
        if (!t.isEmpty() && !out.contains(t)) out << t;
    }
    return out;
}

RunListModel::RunListModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunListModel::reload() {
    if (!store_) {
        setRows({});
        return;
    }
    // runs silent past the gone-after time (killed while nobody watched) are no longer "running"
    store_->mark_silent_runs(ipc::unix_time(), gone_after_s_);
    setRows(load_run_rows(*store_));
}

void RunListModel::setGroupKey(const QString& key) {
    if (key == group_key_) return;
    group_key_ = key;
    if (!rows_.empty()) emit dataChanged(index(0, Group), index(rowCount() - 1, Group));
}

void RunListModel::setRows(std::vector<RunRow> rows) {
    beginResetModel();
    rows_ = std::move(rows);
    endResetModel();
}

const RunRow* RunListModel::row(int r) const {
    return r >= 0 && r < static_cast<int>(rows_.size()) ? &rows_[static_cast<std::size_t>(r)] : nullptr;
}

int RunListModel::rowOf(const std::string& uid) const {
    const auto it = std::find_if(rows_.begin(), rows_.end(), [&](const RunRow& r) { return r.uid == uid; });
    return it == rows_.end() ? -1 : static_cast<int>(it - rows_.begin());
}

bool RunListModel::edit(int r, const std::function<void(store::Store&, RunRow&)>& change, QString* error) {
    if (!row(r) || !store_) {
        if (error) *error = store_ ? tr("no run in row %1").arg(r) : tr("no store is open");
        return false;
    }
    try {
        change(*store_, rows_[static_cast<std::size_t>(r)]);
    } catch (const std::exception& e) {
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
    emit dataChanged(index(r, 0), index(r, ColumnCount - 1));
    return true;
}

bool RunListModel::rename(int r, const QString& name, QString* error) {
    return edit(
        r,
        [&](store::Store& st, RunRow& row) {
            st.set_name(row.uid, name.trimmed().toStdString());
            row.name = name.trimmed().toStdString();
        },
        error);
}

bool RunListModel::setNotes(int r, const QString& notes, QString* error) {
    return edit(
        r,
        [&](store::Store& st, RunRow& row) {
            st.set_notes(row.uid, notes.toStdString());
            row.notes = notes.toStdString();
        },
        error);
}

bool RunListModel::setTags(int r, const QStringList& tags, QString* error) {
    return edit(
        r,
        [&](store::Store& st, RunRow& row) {
            std::vector<std::string> wanted;
            for (const QString& t : tags) wanted.push_back(t.toStdString());
            store::Store::Transaction tx(st);
            for (const auto& old : row.tags)
                if (std::find(wanted.begin(), wanted.end(), old) == wanted.end()) st.remove_tag(row.uid, old);
            for (const auto& t : wanted)
                if (std::find(row.tags.begin(), row.tags.end(), t) == row.tags.end()) st.add_tag(row.uid, t);
            tx.commit();
            row.tags = wanted;
        },
        error);
}

bool RunListModel::removeRun(int r, QString* error) {
    if (!row(r) || !store_) {
        if (error) *error = store_ ? tr("no run in row %1").arg(r) : tr("no store is open");
        return false;
    }
    try {
        store_->delete_run(rows_[static_cast<std::size_t>(r)].uid);
    } catch (const std::exception& e) {
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
    beginRemoveRows({}, r, r);
    rows_.erase(rows_.begin() + r);
    endRemoveRows();
    return true;
}

int RunListModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int RunListModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunListModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const RunRow& r = rows_[static_cast<std::size_t>(index.row())];
    const int c = index.column();
    switch (role) {
        case UidRole:
            return q(r.uid);
        case StatusRole:
            return q(r.status);
        case RunDirRole:
            return q(r.run_dir);
        case TagsRole:
            return tag_list(r.tags);
        case SortRole:
            switch (c) {
                case Name:
                    return q(r.title()).toLower();
                case Group:
                    if (const auto n = setting_number(r, group_key_.toStdString())) return *n;
                    return data(index, Qt::DisplayRole).toString().toLower();
                case Date:
                    return r.created.value_or(0.0);
                case Model:
                    return r.parameters.value_or(0.0);
                case Iteration:
                    return static_cast<qlonglong>(r.iteration);
                case FinalLoss:
                    return r.final_loss.value_or(std::numeric_limits<double>::infinity());
                case TokensPerSec:
                    return r.tokens_per_sec.value_or(-1.0);
                default:
                    return data(index, Qt::DisplayRole).toString().toLower();
            }
        case Qt::EditRole:
            switch (c) {
                case Name:
                    return q(r.name);
                case Tags:
                    return tag_list(r.tags).join(QStringLiteral(", "));
                case Notes:
                    return q(r.notes);
                default:
                    return data(index, Qt::DisplayRole);
            }
        case Qt::DisplayRole:
            switch (c) {
                case Name:
                    return q(r.title());
                case Group: {
                    const std::string* v = group_key_.isEmpty() ? nullptr : setting(r, group_key_.toStdString());
                    return v ? QStringLiteral("%1 = %2").arg(group_key_, q(*v)) : QString();
                }
                case Date:
                    return r.created ? format_time(*r.created) : QString();
                case Model:
                    return r.parameters ? QStringLiteral("%1 (%2)").arg(q(r.model), format_count(*r.parameters))
                                        : q(r.model);
                case Layout:
                    return q(r.layout);
                case Status:
                    return q(r.status);
                case Iteration:
                    return r.train_iters
                               ? QStringLiteral("%1 / %2").arg(format_int(r.iteration), format_int(*r.train_iters))
                               : format_int(r.iteration);
                case FinalLoss:
                    return r.final_loss ? format_value(*r.final_loss) : QString();
                case TokensPerSec:
                    return r.tokens_per_sec ? format_count(*r.tokens_per_sec) : QString();
                case Tags:
                    return tag_list(r.tags).join(QStringLiteral(", "));
                case Notes:
                    return q(r.notes).section(QLatin1Char('\n'), 0, 0);
                default:
                    return {};
            }
        case Qt::ToolTipRole:
            if (c == Name) return tr("%1\n%2").arg(q(r.uid), r.run_dir.empty() ? QString() : q(r.run_dir));
            if (c == Status && !r.reason.empty()) return q(r.reason);
            if (c == Notes) return q(r.notes);
            return {};
        case Qt::ForegroundRole:
            if (c != Status) return {};
            if (r.status == "failed") return error_color();
            if (r.status == "running") return ok_color();
            if (r.status == "stopped" || r.status == "interrupted") return warning_color();
            return {};
        case Qt::TextAlignmentRole:
            if (c == Iteration || c == FinalLoss || c == TokensPerSec)
                return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
            return {};
        default:
            return {};
    }
}

QVariant RunListModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    switch (section) {
        case Name:
            return tr("Name");
        case Group:
            return tr("Group");
        case Date:
            return tr("Date");
        case Model:
            return tr("Model");
        case Layout:
            return tr("Layout");
        case Status:
            return tr("Status");
        case Iteration:
            return tr("Iteration");
        case FinalLoss:
            return tr("Final loss");
        case TokensPerSec:
            return tr("Tokens/s");
        case Tags:
            return tr("Tags");
        case Notes:
            return tr("Notes");
        default:
            return {};
    }
}

Qt::ItemFlags RunListModel::flags(const QModelIndex& index) const {
    if (!index.isValid()) return Qt::NoItemFlags;
    Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemNeverHasChildren;
    const int c = index.column();
    if (store_ && (c == Name || c == Tags || c == Notes)) f |= Qt::ItemIsEditable;
    return f;
}

bool RunListModel::setData(const QModelIndex& index, const QVariant& value, int role) {
    if (role != Qt::EditRole || !checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return false;
    switch (index.column()) {
        case Name:
            return rename(index.row(), value.toString());
        case Tags:
            return setTags(index.row(), parse_tags(value.toString()));
        case Notes:
            return setNotes(index.row(), value.toString());
        default:
            return false;
    }
}

}  // namespace mwb::app
