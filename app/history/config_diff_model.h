#pragma once
// The configurations of the selected runs side by side: one row per key (the config's keys, and the
// topology's as "topology.KEY"), one column per run. Rows whose values differ are highlighted and
// sort first; "only differences" hides the rest.
#include <nlohmann/json.hpp>

#include <QAbstractTableModel>

#include <string>
#include <vector>

namespace mwb::app {

struct ConfigColumn {
    QString title;
    nlohmann::json config, topology;
};

class ConfigDiffModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Role { DiffersRole = Qt::UserRole + 1 };
    explicit ConfigDiffModel(QObject* parent = nullptr);

    void setRuns(std::vector<ConfigColumn> runs);
    void setOnlyDifferences(bool on);
    bool onlyDifferences() const { return only_diff_; }
    /// Keys whose values differ between the runs (in row order).
    std::vector<std::string> differingKeys() const;
    std::string key(int row) const { return rows_.at(static_cast<std::size_t>(row)).key; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    struct Row {
        std::string key;
        std::vector<nlohmann::json> values;  // per run; null where missing
        bool differs = false;
    };
    void rebuild();
    std::vector<ConfigColumn> runs_;
    std::vector<Row> all_, rows_;
    bool only_diff_ = false;
};

/// A JSON value as the table shows it: strings without quotes, "—" for null.
QString json_cell(const nlohmann::json& v);

}  // namespace mwb::app
