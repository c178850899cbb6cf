#include "app/history/history_view.h"

#include "app/core/paths.h"
#include "app/history/compare_plot.h"
#include "app/history/config_diff_model.h"
#include "app/history/run_filter_proxy.h"
#include "app/history/run_list_model.h"
#include "app/history/run_rows.h"
#include "app/history/sample_compare.h"
#include "app/history/scatter_plot.h"
#include "app/launch/generate_dialog.h"
#include "mwb/store/store.h"

#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSaveFile>
#include <QShortcut>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>
#include <map>
#include <set>

namespace mwb::app {

namespace {

constexpr std::size_t kMaxCompared = 10;  // series_color cycles after 10

/// Where a run's checkpoints are: its --save, else <run_dir>/checkpoints ("" when neither exists).
QString checkpoint_dir(const RunRow& row) {
    const auto save = row.settings.find("save");
    std::filesystem::path dir =
        save != row.settings.end() && !save->second.empty()
            ? std::filesystem::path(save->second)
            : (row.run_dir.empty() ? std::filesystem::path() : std::filesystem::path(row.run_dir) / "checkpoints");
    std::error_code ec;
    return !dir.empty() && std::filesystem::is_directory(dir, ec) ? QString::fromStdString(dir.string()) : QString();
}

QPushButton* button(const QString& text, const QString& tip) {
    auto* b = new QPushButton(text);
    b->setToolTip(tip);
    return b;
}

}  // namespace

HistoryView::HistoryView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);

    auto* filters = new QHBoxLayout;
    filter_ = new QLineEdit;
    filter_->setObjectName(QStringLiteral("historyFilter"));
    filter_->setPlaceholderText(
        tr("Filter: words or \"a phrase\" in name, model, layout, status, tags, notes (Ctrl+F)"));
    filter_->setClearButtonEnabled(true);
    filters->addWidget(filter_, 2);
    status_ = new QComboBox;
    status_->addItem(tr("Any status"), QString());
    for (const char* s : {"running", "finished", "stopped", "interrupted", "failed", "unknown"})
        status_->addItem(QString::fromLatin1(s), QString::fromLatin1(s));
    filters->addWidget(status_);
    tag_ = new QComboBox;
    tag_->addItem(tr("Any tag"), QString());
    filters->addWidget(tag_);
    group_ = new QComboBox;
    group_->setObjectName(QStringLiteral("historyGroup"));
    group_->setToolTip(tr("Group the runs by a setting: sorted and coloured by its value"));
    group_->addItem(tr("No grouping"), QString());
    filters->addWidget(group_);
    auto* reload_button = button(tr("Reload"), tr("Read the run list from the store again (F5)"));
    filters->addWidget(reload_button);
    layout->addLayout(filters);

    model_ = new RunListModel(this);
    proxy_ = new RunFilterProxy(this);
    proxy_->setSourceModel(model_);
    table_ = new QTableView;
    table_->setObjectName(QStringLiteral("historyTable"));
    table_->setModel(proxy_);
    table_->setSortingEnabled(true);
    table_->sortByColumn(RunListModel::Date, Qt::DescendingOrder);
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
    table_->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed);
    table_->setAlternatingRowColors(true);
    table_->verticalHeader()->hide();
    table_->horizontalHeader()->setStretchLastSection(true);
    table_->setWordWrap(false);
    table_->setTextElideMode(Qt::ElideMiddle);  // a long name keeps its start and its end
    table_->setColumnHidden(RunListModel::Group, true);

    auto* actions = new QHBoxLayout;
    watch_ = button(tr("&Watch"), tr("Follow this running run in the Monitor"));
    rename_ = button(tr("Re&name…"), tr("Rename the run (F2 edits in place)"));
    tags_ = button(tr("&Tags…"), tr("Set the run's tags, separated by commas"));
    notes_ = button(tr("N&otes…"), tr("Edit the run's notes"));
    delete_ = button(tr("&Delete…"), tr("Delete the selected runs from the store (Del)"));
    png_ = button(tr("Export chart (PNG)…"), tr("Save the comparison chart as an image"));
    csv_ = button(tr("Export series (CSV)…"), tr("Save the compared series at full resolution"));
    all_csv_ = button(tr("Export all metrics (CSV)…"),
                      tr("Save every metric of the selected runs, one row per step record, at full resolution"));
    generate_ = button(tr("&Generate…"), tr("Write text with this run's last checkpoint"));
    for (QPushButton* b : {watch_, rename_, tags_, notes_, delete_, generate_}) actions->addWidget(b);
    actions->addStretch(1);
    actions->addWidget(png_);
    actions->addWidget(csv_);
    actions->addWidget(all_csv_);

    auto* top = new QWidget;
    auto* top_layout = new QVBoxLayout(top);
    top_layout->setContentsMargins(0, 0, 0, 0);
    top_layout->addWidget(table_, 1);
    top_layout->addLayout(actions);

    auto* tabs = new QTabWidget;
    compare_ = new ComparePlot;
    tabs->addTab(compare_, tr("Curves"));
    auto* diff_page = new QWidget;
    auto* diff_layout = new QVBoxLayout(diff_page);
    only_diff_ = new QCheckBox(tr("Only keys that differ"));
    only_diff_->setChecked(true);
    diff_layout->addWidget(only_diff_);
    diff_ = new ConfigDiffModel(this);
    diff_->setOnlyDifferences(true);
    diff_view_ = new QTableView;
    diff_view_->setObjectName(QStringLiteral("configDiff"));
    diff_view_->setModel(diff_);
    diff_view_->verticalHeader()->hide();
    diff_view_->horizontalHeader()->setStretchLastSection(true);
    diff_view_->setWordWrap(false);
    diff_layout->addWidget(diff_view_, 1);
    tabs->addTab(diff_page, tr("Configuration"));
    scatter_ = new ScatterPlot;
    tabs->addTab(scatter_, tr("Final loss vs setting"));
    samples_ = new SampleCompare;
    tabs->addTab(samples_, tr("Samples"));

    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(top);
    split->addWidget(tabs);
    split->setStretchFactor(0, 2);
    split->setStretchFactor(1, 3);
    layout->addWidget(split, 1);
    store_label_ = new QLabel;
    store_label_->setForegroundRole(QPalette::PlaceholderText);
    store_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(store_label_);

    connect(filter_, &QLineEdit::textChanged, proxy_, &RunFilterProxy::setText);
    connect(status_, &QComboBox::currentIndexChanged, this,
            [this] { proxy_->setStatus(status_->currentData().toString()); });
    connect(tag_, &QComboBox::currentIndexChanged, this, [this] { proxy_->setTag(tag_->currentData().toString()); });
    connect(reload_button, &QPushButton::clicked, this, &HistoryView::reload);
    connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &HistoryView::onSelectionChanged);
    connect(model_, &QAbstractItemModel::dataChanged, this, [this] {
        updateTagChoices();
        onSelectionChanged();  // names are the plot's legend and the diff's headers
    });
    connect(table_, &QTableView::activated, this, [this](const QModelIndex& i) {
        if (i.column() == RunListModel::Name || i.column() == RunListModel::Tags || i.column() == RunListModel::Notes)
            return;
        if (proxy_->data(i, RunListModel::StatusRole).toString() == QLatin1String("running")) watchSelected();
    });
    connect(only_diff_, &QCheckBox::toggled, diff_, &ConfigDiffModel::setOnlyDifferences);
    connect(watch_, &QPushButton::clicked, this, &HistoryView::watchSelected);
    connect(rename_, &QPushButton::clicked, this, &HistoryView::renameSelected);
    connect(tags_, &QPushButton::clicked, this, &HistoryView::editTagsOfSelected);
    connect(notes_, &QPushButton::clicked, this, &HistoryView::editNotesOfSelected);
    connect(delete_, &QPushButton::clicked, this, &HistoryView::deleteSelected);
    connect(generate_, &QPushButton::clicked, this, &HistoryView::generateFromSelected);
    auto* generate_action = new QAction(tr("Generate…"), table_);
    connect(generate_action, &QAction::triggered, this, &HistoryView::generateFromSelected);
    table_->addAction(generate_action);
    table_->setContextMenuPolicy(Qt::ActionsContextMenu);
    connect(png_, &QPushButton::clicked, this, &HistoryView::exportChart);
    connect(csv_, &QPushButton::clicked, this, &HistoryView::exportSeries);
    connect(all_csv_, &QPushButton::clicked, this, [this] {
        const QString file = QFileDialog::getSaveFileName(this, tr("Export all metrics"), QStringLiteral("runs.csv"),
                                                          tr("CSV files (*.csv)"));
        if (file.isEmpty()) return;
        QString error;
        emit message(exportAllMetrics(file, &error) ? tr("Saved %1").arg(file) : tr("Cannot export: %1").arg(error));
    });
    connect(group_, &QComboBox::currentIndexChanged, this, [this] { setGroupKey(group_->currentData().toString()); });
    connect(proxy_, &QAbstractItemModel::rowsInserted, this, &HistoryView::updateScatter);
    connect(proxy_, &QAbstractItemModel::rowsRemoved, this, &HistoryView::updateScatter);
    connect(proxy_, &QAbstractItemModel::modelReset, this, &HistoryView::updateScatter);
    connect(proxy_, &QAbstractItemModel::layoutChanged, this, &HistoryView::updateScatter);
    connect(compare_, &ComparePlot::message, this, &HistoryView::message);

    auto* del = new QShortcut(QKeySequence::Delete, table_, nullptr, nullptr, Qt::WidgetShortcut);
    connect(del, &QShortcut::activated, this, &HistoryView::deleteSelected);
    auto* find = new QShortcut(QKeySequence::Find, this, nullptr, nullptr, Qt::WidgetWithChildrenShortcut);
    connect(find, &QShortcut::activated, filter_, [this] {
        filter_->setFocus();
        filter_->selectAll();
    });
    auto* refresh = new QShortcut(QKeySequence::Refresh, this, nullptr, nullptr, Qt::WidgetWithChildrenShortcut);
    connect(refresh, &QShortcut::activated, this, &HistoryView::reload);
    updateActions();
}

HistoryView::~HistoryView() {
    compare_->setStore(nullptr);
    samples_->setStore(nullptr);
    model_->setStore(nullptr);
}

void HistoryView::setStoreFile(const std::filesystem::path& file) {
    compare_->setStore(nullptr);
    samples_->setStore(nullptr);
    model_->setStore(nullptr);
    store_.reset();
    try {
        if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
        store_ = std::make_unique<store::Store>(file);
        store_label_->setText(tr("Store: %1").arg(to_qstring(file)));
    } catch (const std::exception& e) {
        store_label_->setText(tr("Cannot open the store: %1").arg(QString::fromStdString(e.what())));
        emit message(tr("Cannot open the store: %1").arg(QString::fromStdString(e.what())));
    }
    model_->setStore(store_.get());
    compare_->setStore(store_.get());
    samples_->setStore(store_.get());
    reload();
}

void HistoryView::reload() {
    const auto selected = selectedRuns();
    try {
        model_->reload();
    } catch (const std::exception& e) {
        model_->setRows({});
        emit message(tr("Cannot read the store: %1").arg(QString::fromStdString(e.what())));
    }
    updateTagChoices();
    updateGroupChoices();
    if (!sized_ && model_->rowCount() > 0) {  // fit the columns to the first runs; the user's widths stay after
        sized_ = true;
        sizeColumns();
    } else if (model_->rowCount() > 0) {  // a longer name than any before: widen (never narrow) its column
        const int cap = std::max(1200, table_->viewport()->width()) / 2;
        const int was = table_->columnWidth(RunListModel::Name);
        table_->resizeColumnToContents(RunListModel::Name);
        table_->setColumnWidth(RunListModel::Name, std::max(was, std::min(cap, table_->columnWidth(RunListModel::Name))));
    }
    selectRuns(selected);
    onSelectionChanged();  // the runs' series may have grown
}

std::vector<std::string> HistoryView::selectedRuns() const {
    std::vector<std::pair<int, std::string>> rows;
    for (const QModelIndex& i : table_->selectionModel()->selectedRows())
        rows.emplace_back(i.row(), proxy_->data(i, RunListModel::UidRole).toString().toStdString());
    std::sort(rows.begin(), rows.end());
    std::vector<std::string> out;
    for (auto& [row, uid] : rows) out.push_back(std::move(uid));
    return out;
}

void HistoryView::selectRuns(const std::vector<std::string>& uids) {
    QItemSelection selection;
    for (const auto& uid : uids) {
        const int r = model_->rowOf(uid);
        if (r < 0) continue;
        const QModelIndex i = proxy_->mapFromSource(model_->index(r, 0));
        if (i.isValid()) selection.select(i, i);
    }
    table_->selectionModel()->select(selection, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
}

void HistoryView::onSelectionChanged() {
    const auto uids = selectedRuns();
    std::vector<CompareRun> runs;
    std::vector<ConfigColumn> columns;
    for (const auto& uid : uids) {
        if (runs.size() == kMaxCompared) {
            emit message(tr("Comparing the first %1 selected runs").arg(kMaxCompared));
            break;
        }
        const RunRow* row = model_->row(model_->rowOf(uid));
        if (!row) continue;
        runs.push_back({uid, QString::fromStdString(row->title()), groupColor(*row)});
        if (store_) {
            try {
                if (const auto record = store_->run(uid))
                    columns.push_back({QString::fromStdString(row->title()), record->config, record->topology});
            } catch (const std::exception& e) {
                emit message(QString::fromStdString(e.what()));
            }
        }
    }
    samples_->setRuns(runs);
    compare_->setRuns(std::move(runs));
    diff_->setRuns(std::move(columns));
    diff_view_->resizeColumnToContents(0);
    updateActions();
}

void HistoryView::sizeColumns() {
    // the contents, within bounds: the name in full (up to half the table), short columns tight
    const int width = std::max(1200, table_->viewport()->width());
    for (int c = 0; c < RunListModel::Notes; ++c) {
        if (table_->isColumnHidden(c)) continue;
        table_->resizeColumnToContents(c);
        const int cap = c == RunListModel::Name ? width / 2 : width / 4;
        if (table_->columnWidth(c) > cap) table_->setColumnWidth(c, cap);
    }
}

int HistoryView::groupColor(const RunRow& row) const {
    const QString key = model_->groupKey();
    if (key.isEmpty()) return -1;
    std::set<std::string> values;  // one colour per value, in the values' order
    for (const RunRow& r : model_->rows())
        if (const std::string* v = setting(r, key.toStdString())) values.insert(*v);
    const std::string* v = setting(row, key.toStdString());
    if (!v) return -1;
    return static_cast<int>(std::distance(values.begin(), values.find(*v)));
}

void HistoryView::setGroupKey(const QString& key) {
    const int i = group_->findData(key);
    if (i >= 0 && group_->currentIndex() != i) {
        group_->setCurrentIndex(i);  // comes back here
        return;
    }
    model_->setGroupKey(key);
    table_->setColumnHidden(RunListModel::Group, key.isEmpty());
    if (!key.isEmpty()) {
        table_->resizeColumnToContents(RunListModel::Group);
        table_->sortByColumn(RunListModel::Group, Qt::AscendingOrder);
    }
    onSelectionChanged();  // colours by group
}

void HistoryView::updateGroupChoices() {
    // the settings whose values differ among the runs (the ones worth grouping by)
    std::map<std::string, std::set<std::string>> values;
    for (const RunRow& r : model_->rows())
        for (const auto& [k, v] : r.settings) values[k].insert(v);
    const QString current = group_->currentData().toString();
    const QSignalBlocker block(group_);
    group_->clear();
    group_->addItem(tr("No grouping"), QString());
    for (const auto& [k, vs] : values)
        if (vs.size() > 1 && k != "run_dir" && k != "seed" && k.find("port") == std::string::npos)
            group_->addItem(tr("Group by %1").arg(QString::fromStdString(k)), QString::fromStdString(k));
    group_->setCurrentIndex(std::max(0, group_->findData(current)));
}

void HistoryView::updateScatter() {
    std::vector<const RunRow*> rows;
    for (int r = 0; r < proxy_->rowCount(); ++r) {
        const QModelIndex source = proxy_->mapToSource(proxy_->index(r, 0));
        if (const RunRow* row = model_->row(source.row())) rows.push_back(row);
    }
    scatter_->setRows(rows);
}

bool HistoryView::exportAllMetrics(const QString& file, QString* error) {
    if (!store_) {
        if (error) *error = tr("no store is open");
        return false;
    }
    std::vector<CompareRun> runs;
    for (const auto& uid : selectedRuns())
        if (const RunRow* row = model_->row(model_->rowOf(uid))) runs.push_back({uid, QString::fromStdString(row->title())});
    QSaveFile out(file);
    if (!out.open(QIODevice::WriteOnly | QIODevice::Text)) {
        if (error) *error = out.errorString();
        return false;
    }
    try {
        out.write(all_metrics_csv(*store_, runs).toUtf8());
    } catch (const std::exception& e) {
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
    if (!out.commit()) {
        if (error) *error = out.errorString();
        return false;
    }
    return true;
}

void HistoryView::updateTagChoices() {
    std::set<std::string> tags;
    for (const RunRow& r : model_->rows()) tags.insert(r.tags.begin(), r.tags.end());
    const QString current = tag_->currentData().toString();
    const QSignalBlocker block(tag_);
    tag_->clear();
    tag_->addItem(tr("Any tag"), QString());
    for (const auto& t : tags) tag_->addItem(QString::fromStdString(t), QString::fromStdString(t));
    const int i = tag_->findData(current);
    tag_->setCurrentIndex(i >= 0 ? i : 0);
    if (i < 0 && !current.isEmpty()) proxy_->setTag({});
}

void HistoryView::updateActions() {
    const auto n = table_->selectionModel()->selectedRows().size();
    const int row = currentSourceRow();
    const RunRow* r = model_->row(row);
    watch_->setEnabled(n == 1 && r && r->status == "running");
    rename_->setEnabled(n == 1 && store_);
    tags_->setEnabled(n == 1 && store_);
    notes_->setEnabled(n == 1 && store_);
    delete_->setEnabled(n > 0 && store_);
    png_->setEnabled(n > 0);
    csv_->setEnabled(n > 0);
    const bool can_generate = n == 1 && r && r->status != "running" && !checkpoint_dir(*r).isEmpty();
    generate_->setEnabled(can_generate);
    generate_->setToolTip(can_generate || !r       ? tr("Write text with this run's last checkpoint")
                          : r->status == "running" ? tr("The run is still training")
                                                   : tr("The run saved no checkpoint"));
}

void HistoryView::generateFromSelected() {
    const RunRow* r = model_->row(currentSourceRow());
    if (!r) return;
    const QString dir = checkpoint_dir(*r);
    if (dir.isEmpty()) {
        emit message(tr("Run %1 saved no checkpoint").arg(QString::fromStdString(r->title())));
        return;
    }
    auto* dialog = new GenerateDialog(dir, QString::fromStdString(r->title()), this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->show();
}

int HistoryView::currentSourceRow() const {
    const auto rows = table_->selectionModel()->selectedRows();
    if (rows.size() != 1) return -1;
    return proxy_->mapToSource(rows.front()).row();
}

void HistoryView::renameSelected() {
    const int row = currentSourceRow();
    const RunRow* r = model_->row(row);
    if (!r) return;
    bool ok = false;
    const QString name =
        QInputDialog::getText(this, tr("Rename run"), tr("Name of %1:").arg(QString::fromStdString(r->uid)),
                              QLineEdit::Normal, QString::fromStdString(r->name), &ok);
    QString error;
    if (ok && !model_->rename(row, name, &error)) emit message(tr("Cannot rename: %1").arg(error));
}

void HistoryView::editTagsOfSelected() {
    const int row = currentSourceRow();
    const RunRow* r = model_->row(row);
    if (!r) return;
    QStringList current;
    for (const auto& t : r->tags) current << QString::fromStdString(t);
    bool ok = false;
    const QString text = QInputDialog::getText(this, tr("Tags"), tr("Tags, separated by commas:"), QLineEdit::Normal,
                                               current.join(QStringLiteral(", ")), &ok);
    QString error;
    if (ok && !model_->setTags(row, parse_tags(text), &error)) emit message(tr("Cannot set the tags: %1").arg(error));
}

void HistoryView::editNotesOfSelected() {
    const int row = currentSourceRow();
    const RunRow* r = model_->row(row);
    if (!r) return;
    bool ok = false;
    const QString text =
        QInputDialog::getMultiLineText(this, tr("Notes"), tr("Notes on %1:").arg(QString::fromStdString(r->title())),
                                       QString::fromStdString(r->notes), &ok);
    QString error;
    if (ok && !model_->setNotes(row, text, &error)) emit message(tr("Cannot save the notes: %1").arg(error));
}

bool HistoryView::deleteRuns(const std::vector<std::string>& uids, QString* error) {
    for (const auto& uid : uids) {
        const int row = model_->rowOf(uid);
        if (row >= 0 && !model_->removeRun(row, error)) return false;
    }
    updateTagChoices();
    onSelectionChanged();
    return true;
}

void HistoryView::deleteSelected() {
    const auto uids = selectedRuns();
    if (uids.empty() || !store_) return;
    QStringList names;
    for (const auto& uid : uids)
        if (const RunRow* r = model_->row(model_->rowOf(uid))) names << QString::fromStdString(r->title());
    const auto answer = QMessageBox::question(
        this, tr("Delete runs"),
        tr("Delete %n run(s) and all their metrics from the store? Run directories on disk are kept.\n\n%1", nullptr,
           static_cast<int>(uids.size()))
            .arg(names.mid(0, 10).join(QLatin1Char('\n'))),
        QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel);
    if (answer != QMessageBox::Yes) return;
    QString error;
    if (!deleteRuns(uids, &error))
        emit message(tr("Cannot delete: %1").arg(error));
    else
        emit message(tr("Deleted %n run(s)", nullptr, static_cast<int>(uids.size())));
}

void HistoryView::watchSelected() {
    const RunRow* r = model_->row(currentSourceRow());
    if (!r) return;
    if (r->run_dir.empty() || !std::filesystem::exists(r->run_dir)) {
        emit message(tr("The store does not know where run %1 writes; attach to its endpoint in Launch.")
                         .arg(QString::fromStdString(r->title())));
        return;
    }
    emit watchRun(QString::fromStdString(r->run_dir));
}

void HistoryView::exportChart() {
    const QString file = QFileDialog::getSaveFileName(this, tr("Export chart"), QStringLiteral("comparison.png"),
                                                      tr("PNG images (*.png)"));
    if (file.isEmpty()) return;
    QString error;
    emit message(compare_->exportPng(file, &error) ? tr("Saved %1").arg(file) : tr("Cannot export: %1").arg(error));
}

void HistoryView::exportSeries() {
    const QString file = QFileDialog::getSaveFileName(
        this, tr("Export series"), compare_->metric() + QStringLiteral(".csv"), tr("CSV files (*.csv)"));
    if (file.isEmpty()) return;
    QString error;
    emit message(compare_->exportCsv(file, &error) ? tr("Saved %1").arg(file) : tr("Cannot export: %1").arg(error));
}

}  // namespace mwb::app
