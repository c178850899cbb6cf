#include "app/history/config_diff_model.h"

#include "app/core/theme.h"

#include <QFont>
#include <QGuiApplication>
#include <QPalette>

#include <algorithm>
#include <map>

namespace mwb::app {

namespace {

/// Nested objects become dotted keys; arrays and scalars are values.
void flatten(const nlohmann::json& j, const std::string& prefix, std::map<std::string, nlohmann::json>& out) {
    if (!j.is_object()) return;
    for (const auto& [k, v] : j.items()) {
        const std::string key = prefix + k;
        if (v.is_object() && !v.empty()) {
            flatten(v, key + ".", out);
        } else {
            out[key] = v;
        }
    }
}

}  // namespace

QString json_cell(const nlohmann::json& v) {
    if (v.is_null()) return QStringLiteral("—");
    if (v.is_string()) return QString::fromStdString(v.get<std::string>());
    return QString::fromStdString(v.dump());
}

ConfigDiffModel::ConfigDiffModel(QObject* parent) : QAbstractTableModel(parent) {}

void ConfigDiffModel::setRuns(std::vector<ConfigColumn> runs) {
    runs_ = std::move(runs);
    std::vector<std::map<std::string, nlohmann::json>> flat(runs_.size());
    std::map<std::string, bool> keys;
    for (std::size_t i = 0; i < runs_.size(); ++i) {
        flatten(runs_[i].config, "", flat[i]);
        flatten(runs_[i].topology, "topology.", flat[i]);
        for (const auto& [k, v] : flat[i]) keys[k] = true;
    }
    all_.clear();
    for (const auto& [k, unused] : keys) {
        Row r;
        r.key = k;
        for (const auto& f : flat) {
            const auto it = f.find(k);
            r.values.push_back(it == f.end() ? nlohmann::json() : it->second);
        }
        for (const auto& v : r.values) r.differs = r.differs || v != r.values.front();
        all_.push_back(std::move(r));
    }
    // the differences first, each group in key order
    std::stable_partition(all_.begin(), all_.end(), [](const Row& r) { return r.differs; });
    rebuild();
}

void ConfigDiffModel::setOnlyDifferences(bool on) {
    if (on == only_diff_) return;
    only_diff_ = on;
    rebuild();
}

void ConfigDiffModel::rebuild() {
    beginResetModel();
    rows_.clear();
    for (const Row& r : all_)
        if (!only_diff_ || r.differs) rows_.push_back(r);
    endResetModel();
}

std::vector<std::string> ConfigDiffModel::differingKeys() const {
    std::vector<std::string> out;
    for (const Row& r : rows_)
        if (r.differs) out.push_back(r.key);
    return out;
}

int ConfigDiffModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int ConfigDiffModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : 1 + static_cast<int>(runs_.size());
}

QVariant ConfigDiffModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const Row& r = rows_[static_cast<std::size_t>(index.row())];
    if (role == DiffersRole) return r.differs;
    if (role == Qt::DisplayRole || role == Qt::ToolTipRole) {
        if (index.column() == 0) return QString::fromStdString(r.key);
        return json_cell(r.values[static_cast<std::size_t>(index.column() - 1)]);
    }
    if (!r.differs) {
        if (role == Qt::ForegroundRole && index.column() > 0)
            return QGuiApplication::palette().color(QPalette::PlaceholderText);
        return {};
    }
    if (role == Qt::BackgroundRole) {
        QColor c = warning_color();
        c.setAlpha(dark_theme() ? 60 : 40);
        return c;
    }
    if (role == Qt::FontRole) {
        QFont f;
        f.setBold(true);
        return f;
    }
    return {};
}

QVariant ConfigDiffModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return QAbstractTableModel::headerData(section, orientation, role);
    if (section == 0) return tr("Key");
    if (section - 1 < static_cast<int>(runs_.size())) return runs_[static_cast<std::size_t>(section - 1)].title;
    return {};
}

}  // namespace mwb::app
