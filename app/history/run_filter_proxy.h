#pragma once
// Sorting and filtering of the run table: free text (every word, or "quoted phrase", must appear in
// the name, uid, model, layout, status, tags or notes, case-insensitive), settings (`tp=2`,
// `lr<3e-4`, `recompute_granularity=full`, any config key or topology.KEY), a status, a tag. Sorting reads
// RunListModel::SortRole so dates and numbers sort as values.
#include <QSortFilterProxyModel>
#include <QStringList>

namespace mwb::app {

class RunFilterProxy : public QSortFilterProxyModel {
    Q_OBJECT
public:
    explicit RunFilterProxy(QObject* parent = nullptr);

    void setText(const QString& text);
    /// "" = any status.
    void setStatus(const QString& status);
    /// "" = any tag.
    void setTag(const QString& tag);
    QString text() const { return words_.join(QLatin1Char(' ')); }

protected:
    bool filterAcceptsRow(int source_row, const QModelIndex& source_parent) const override;

private:
    QStringList words_;
    QString status_, tag_;
};

}  // namespace mwb::app
