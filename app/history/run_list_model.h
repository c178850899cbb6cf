#pragma once
// The stored runs as a table (Qt's model/view: plain RunRow structs behind a column enum). Name, tags
// and notes are editable in place; edits, tags and deletions go straight to the store, so they
// persist. Sorting uses SortRole (numbers and times as numbers, not as their text).
#include "app/history/run_rows.h"

#include <QAbstractTableModel>
#include <QStringList>

namespace mwb::app {

class RunListModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Name, Group, Date, Model, Layout, Status, Iteration, FinalLoss, TokensPerSec, Tags, Notes, ColumnCount };
    enum Role { SortRole = Qt::UserRole + 1, UidRole, StatusRole, RunDirRole, TagsRole };

    explicit RunListModel(QObject* parent = nullptr);

    /// The store edits go to (not owned; nullptr: read-only rows).
    void setStore(store::Store* store) { store_ = store; }
    /// Re-reads every run from the store, first marking "running" runs silent for longer than
    /// goneAfter() seconds as interrupted (Store::mark_silent_runs).
    void reload();
    void setGoneAfter(double seconds) { gone_after_s_ = seconds; }
    /// The setting the Group column shows ("" = none): runs sort and colour by it.
    void setGroupKey(const QString& key);
    QString groupKey() const { return group_key_; }
    double goneAfter() const { return gone_after_s_; }
    void setRows(std::vector<RunRow> rows);
    const std::vector<RunRow>& rows() const { return rows_; }
    const RunRow* row(int r) const;
    /// The row of run `uid`, -1 when absent.
    int rowOf(const std::string& uid) const;

    // ---- edits, written to the store (false and `error` when the store refused) -------------------
    bool rename(int row, const QString& name, QString* error = nullptr);
    bool setNotes(int row, const QString& notes, QString* error = nullptr);
    /// Replaces the run's tags with `tags` (adding and removing the difference).
    bool setTags(int row, const QStringList& tags, QString* error = nullptr);
    bool removeRun(int row, QString* error = nullptr);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

private:
    double gone_after_s_ = store::Store::kDefaultGoneAfterS;
    QString group_key_;
    bool edit(int row, const std::function<void(store::Store&, RunRow&)>& change, QString* error);
    store::Store* store_ = nullptr;
    std::vector<RunRow> rows_;
};

/// "a, b ,c" -> {"a", "b", "c"} (empty parts dropped, duplicates removed, order kept).
QStringList parse_tags(const QString& text);

}  // namespace mwb::app
