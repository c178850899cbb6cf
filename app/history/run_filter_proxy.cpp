#include "history/run_filter_proxy.h"

#include "history/run_list_model.h"

#include <QRegularExpression>

namespace mwb::app {

RunFilterProxy::RunFilterProxy(QObject* parent) : QSortFilterProxyModel(parent) {
    setSortRole(RunListModel::SortRole);
    setSortCaseSensitivity(Qt::CaseInsensitive);
}

void RunFilterProxy::setText(const QString& text) {
    // words, or "a phrase" in quotes
    static const QRegularExpression word(QStringLiteral("\"([^\"]*)\"|(\\S+)"));
    QStringList words;
    for (auto it = word.globalMatch(text.simplified()); it.hasNext();) {
        const auto m = it.next();
        const QString w = m.hasCaptured(1) ? m.captured(1) : m.captured(2);
        if (!w.isEmpty()) words << w;
    }
    if (words == words_) return;
    words_ = words;
    invalidateFilter();
}

void RunFilterProxy::setStatus(const QString& status) {
    if (status == status_) return;
    status_ = status;
    invalidateFilter();
}

void RunFilterProxy::setTag(const QString& tag) {
    if (tag == tag_) return;
    tag_ = tag;
    invalidateFilter();
}

bool RunFilterProxy::filterAcceptsRow(int source_row, const QModelIndex& parent) const {
    const QAbstractItemModel* m = sourceModel();
    const QModelIndex first = m->index(source_row, 0, parent);
    if (!status_.isEmpty() && m->data(first, RunListModel::StatusRole).toString() != status_) return false;
    if (!tag_.isEmpty() && !m->data(first, RunListModel::TagsRole).toStringList().contains(tag_)) return false;
    if (words_.isEmpty()) return true;
    QString haystack = m->data(first, RunListModel::UidRole).toString();
    for (int c : {RunListModel::Name, RunListModel::Model, RunListModel::Layout, RunListModel::Status,
                  RunListModel::Tags, RunListModel::Notes})
        haystack += QLatin1Char('\n') + m->data(m->index(source_row, c, parent), Qt::EditRole).toString();
    for (const QString& w : words_)
        if (!haystack.contains(w, Qt::CaseInsensitive)) return false;
    return true;
}

}  // namespace mwb::app
