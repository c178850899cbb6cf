#include "app/history/run_filter_proxy.h"

#include "app/history/run_list_model.h"

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
    const auto* runs = qobject_cast<const RunListModel*>(m);
    const RunRow* row = runs ? runs->row(source_row) : nullptr;
    QStringList text_words;
    for (const QString& w : words_) {
        // a setting: key=value, key!=value, key<value, key>value (numbers compare as numbers)
        static const QRegularExpression cmp(QStringLiteral("^([A-Za-z_.][A-Za-z0-9_.]*)(!=|<=|>=|=|<|>)(.*)$"));
        const auto c = cmp.match(w);
        if (!c.hasMatch() || !row) {
            text_words << w;
            continue;
        }
        const std::string key = c.captured(1).toStdString(), op = c.captured(2).toStdString();
        const QString want = c.captured(3);
        const std::string* have = setting(*row, key);
        if (!have) return false;
        bool numeric = false;
        const double want_n = want.toDouble(&numeric);
        const auto have_n = setting_number(*row, key);
        int order;  // have compared to want
        if (numeric && have_n) {
            order = *have_n < want_n ? -1 : *have_n > want_n ? 1 : 0;
        } else {
            order = QString::fromStdString(*have).compare(want, Qt::CaseInsensitive);
            order = order < 0 ? -1 : order > 0 ? 1 : 0;
        }
        const bool ok = op == "=" ? order == 0 : op == "!=" ? order != 0 : op == "<" ? order < 0 : op == ">" ? order > 0
                        : op == "<=" ? order <= 0 : order >= 0;
        if (!ok) return false;
    }
    if (text_words.isEmpty()) return true;
    QString haystack = m->data(first, RunListModel::UidRole).toString();
    for (int c : {RunListModel::Name, RunListModel::Model, RunListModel::Layout, RunListModel::Status,
                  RunListModel::Tags, RunListModel::Notes})
        haystack += QLatin1Char('\n') + m->data(m->index(source_row, c, parent), Qt::EditRole).toString();
    for (const QString& w : text_words)
        if (!haystack.contains(w, Qt::CaseInsensitive)) return false;
    return true;
}

}  // namespace mwb::app
