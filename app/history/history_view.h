#pragma once
// The History tab: every run of the store in a sortable, filterable table (RunListModel behind
// RunFilterProxy); the selected runs' curves overlaid (ComparePlot) and their configurations side by
// side (ConfigDiffModel); rename, tag, notes and delete (asking first) written to the store; the chart
// as PNG and the series as CSV. Reads the store only when told to (reload), never per frame.
#include <QWidget>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTableView;

namespace mwb::store {
class Store;
}

namespace mwb::app {

class ComparePlot;
class ConfigDiffModel;
class SampleCompare;
class RunFilterProxy;
class RunListModel;
class ScatterPlot;
struct RunRow;

class HistoryView : public QWidget {
    Q_OBJECT
public:
    explicit HistoryView(QWidget* parent = nullptr);
    ~HistoryView() override;

    /// Opens the store (creating/migrating it as the store does); errors go to message() and the view.
    void setStoreFile(const std::filesystem::path& file);
    /// Re-reads the run list (keeps the selection and the sort).
    void reload();

    RunListModel* model() const { return model_; }
    RunFilterProxy* proxy() const { return proxy_; }
    QTableView* table() const { return table_; }
    ComparePlot* comparePlot() const { return compare_; }
    ConfigDiffModel* configDiff() const { return diff_; }
    ScatterPlot* scatter() const { return scatter_; }
    SampleCompare* sampleCompare() const { return samples_; }
    QPushButton* generateButton() const { return generate_; }
    QComboBox* groupChoice() const { return group_; }
    store::Store* store() const { return store_.get(); }

    /// The selected runs' uids, in table order.
    std::vector<std::string> selectedRuns() const;
    /// Selects exactly these runs (those present).
    void selectRuns(const std::vector<std::string>& uids);
    /// Deletes runs from the store without asking (deleteSelected() asks first).
    bool deleteRuns(const std::vector<std::string>& uids, QString* error = nullptr);
    /// Groups the runs by a setting ("" = none): a Group column, sorted by it, one colour per value.
    void setGroupKey(const QString& key);
    /// Every metric of the selected runs as CSV (all_metrics_csv), written atomically.
    bool exportAllMetrics(const QString& file, QString* error = nullptr);

public slots:
    void renameSelected();
    void editTagsOfSelected();
    void editNotesOfSelected();
    void deleteSelected();
    void watchSelected();
    void exportChart();
    void exportSeries();
    /// Opens "Generate…" on the selected finished run's checkpoint directory.
    void generateFromSelected();

signals:
    /// The user asked to watch a run that is still running: its run directory or telemetry endpoint.
    void watchRun(const QString& endpoint_or_run_dir);
    void message(const QString& text);

private:
    void onSelectionChanged();
    void updateTagChoices();
    void updateGroupChoices();
    void updateScatter();
    void sizeColumns();
    int groupColor(const RunRow& row) const;
    void updateActions();
    int currentSourceRow() const;
    std::unique_ptr<store::Store> store_;
    RunListModel* model_ = nullptr;
    RunFilterProxy* proxy_ = nullptr;
    QTableView* table_ = nullptr;
    QLineEdit* filter_ = nullptr;
    QComboBox* status_ = nullptr;
    QComboBox* tag_ = nullptr;
    QLabel* store_label_ = nullptr;
    ComparePlot* compare_ = nullptr;
    ConfigDiffModel* diff_ = nullptr;
    QTableView* diff_view_ = nullptr;
    QCheckBox* only_diff_ = nullptr;
    QPushButton *watch_ = nullptr, *rename_ = nullptr, *tags_ = nullptr, *notes_ = nullptr, *delete_ = nullptr,
                *png_ = nullptr, *csv_ = nullptr, *all_csv_ = nullptr, *generate_ = nullptr;
    SampleCompare* samples_ = nullptr;
    QComboBox* group_ = nullptr;
    ScatterPlot* scatter_ = nullptr;
    bool sized_ = false;
};

}  // namespace mwb::app
