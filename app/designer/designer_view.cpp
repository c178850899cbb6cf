#include "app/designer/designer_view.h"

#include "backend/config/config_io.h"
#include "app/core/config_file.h"
#include "app/core/format.h"
#include "app/core/paths.h"
#include "app/designer/auto_configure_dialog.h"
#include "app/designer/cluster_form.h"
#include "app/designer/config_form.h"
#include "app/designer/plan_panel.h"
#include "mwb/planner/cluster.h"
#include "mwb/planner/presets.h"

#include <QComboBox>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QVBoxLayout>

#include <algorithm>

namespace mwb::app {

namespace {

QScrollArea* scroll_area(QWidget* w) {
    auto* s = new QScrollArea;
    s->setWidget(w);
    s->setWidgetResizable(true);
    s->setFrameShape(QFrame::NoFrame);
    s->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    return s;
}

}  // namespace

DesignerView::DesignerView(QWidget* parent) : QWidget(parent) {
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(6, 6, 6, 0);
    auto* bar = new QHBoxLayout;
    presets_ = new QComboBox;
    presets_->setObjectName(QStringLiteral("presets"));
    presets_->addItem(tr("Preset…"), QString());
    try {
        // smallest model first, by the planner's parameter count (any preset in resources/presets)
        std::vector<std::pair<int64_t, std::string>> sized;
        for (const auto& n : planner::preset_names()) sized.emplace_back(preset_parameters(n), n);
        std::sort(sized.begin(), sized.end());
        for (const auto& [params, n] : sized)
            presets_->addItem(params > 0 ? QStringLiteral("%1 (%2)").arg(QString::fromStdString(n), format_count(params))
                                         : QString::fromStdString(n),
                              QString::fromStdString(n));
    } catch (const std::exception&) {
    }
    presets_->setToolTip(tr("Load a model from resources/presets (GPT-3 family, MT-NLG 530B, 1T, tiny CPU demo)"));
    auto* open = new QPushButton(tr("Open…"));
    auto* save = new QPushButton(tr("Save"));
    auto* save_as = new QPushButton(tr("Save as…"));
    auto* autoc = new QPushButton(tr("Auto-configure…"));
    autoc->setObjectName(QStringLiteral("auto_configure"));
    autoc->setToolTip(
        tr("Search the parallel layouts that fit this cluster, ranked by predicted throughput (Ctrl+Shift+L)"));
    file_label_ = new QLabel;
    file_label_->setForegroundRole(QPalette::PlaceholderText);
    bar->addWidget(new QLabel(tr("Model")));
    bar->addWidget(presets_);
    bar->addWidget(open);
    bar->addWidget(save);
    bar->addWidget(save_as);
    bar->addSpacing(12);
    bar->addWidget(autoc);
    bar->addStretch(1);
    bar->addWidget(file_label_);
    outer->addLayout(bar);

    auto* split = new QSplitter(Qt::Horizontal);
    split->setObjectName(QStringLiteral("designer_split"));
    auto* left = new QWidget;
    auto* lv = new QVBoxLayout(left);
    lv->setContentsMargins(0, 0, 6, 0);
    cluster_ = new ClusterForm;
    lv->addWidget(cluster_);
    // a layout that needs more devices than the cluster has: offer the cluster it needs
    resize_banner_ = new QWidget;
    resize_banner_->setObjectName(QStringLiteral("resize_banner"));
    auto* rb = new QHBoxLayout(resize_banner_);
    rb->setContentsMargins(0, 0, 0, 0);
    resize_text_ = new QLabel;
    resize_text_->setWordWrap(true);
    resize_button_ = new QPushButton;
    resize_button_->setObjectName(QStringLiteral("resize_cluster"));
    rb->addWidget(resize_text_, 1);
    rb->addWidget(resize_button_);
    resize_banner_->setVisible(false);
    lv->addWidget(resize_banner_);
    form_ = new ConfigForm;
    lv->addWidget(form_);
    split->addWidget(scroll_area(left));
    panel_ = new PlanPanel;
    split->addWidget(scroll_area(panel_));
    split->setStretchFactor(0, 5);
    split->setStretchFactor(1, 6);
    outer->addWidget(split, 1);

    replan_timer_.setSingleShot(true);
    replan_timer_.setInterval(0);
    connect(&replan_timer_, &QTimer::timeout, this, &DesignerView::replan);
    connect(form_, &ConfigForm::edited, this, &DesignerView::edited);
    connect(cluster_, &ClusterForm::changed, this, &DesignerView::edited);
    connect(form_, &ConfigForm::dataParallelEdited, this, [this](int dp) {
        const int mp = std::max(1, config_.parallel.tensor_model_parallel_size) *
                       std::max(1, config_.parallel.pipeline_model_parallel_size);
        cluster_->setWorldSize(mp * dp);
    });
    connect(panel_, &PlanPanel::issueActivated, form_, &ConfigForm::focusField);
    connect(panel_, &PlanPanel::trainTokensChanged, this, [this] { replan_timer_.start(); });
    connect(presets_, &QComboBox::activated, this, [this](int i) {
        const QString name = presets_->itemData(i).toString();
        if (name.isEmpty()) return;
        if (!confirmDiscard()) {  // back to what the design was
            const QSignalBlocker block(presets_);
            presets_->setCurrentIndex(std::max(0, presets_->findData(shown_preset_)));
            return;
        }
        QString error;
        if (!loadPreset(name, &error)) QMessageBox::warning(this, tr("Preset"), error);
    });
    connect(resize_button_, &QPushButton::clicked, this, [this] {
        const int want = resize_to_;
        if (cluster_->cluster().nodes <= 1)
            cluster_->setCluster(cluster_->deviceName(), want, 1);  // one machine with more devices
        else
            cluster_->setWorldSize(want);
        replan();
        emit message(tr("Cluster resized to %1 devices").arg(want));
    });
    connect(open, &QPushButton::clicked, this, &DesignerView::openDialog);
    connect(save, &QPushButton::clicked, this, &DesignerView::save);
    connect(save_as, &QPushButton::clicked, this, &DesignerView::saveAs);
    connect(autoc, &QPushButton::clicked, this, &DesignerView::autoConfigure);

    loadPreset(QStringLiteral("tiny-cpu-demo"));
    modified_ = false;
    updateTitle();
}

PresetCluster preset_cluster(const std::string& name, const Config& c) {
    if (name == "tiny-cpu-demo") return {"cpu", 1, 1};
    // whole 8-GPU nodes, enough for the preset's model parallelism; the spare GPUs become data
    // parallelism (which also shards a distributed optimizer)
    const int mp =
        std::max(1, c.parallel.tensor_model_parallel_size) * std::max(1, c.parallel.pipeline_model_parallel_size);
    int per_node = 8, nodes = (mp + 7) / 8;
    if ((per_node * nodes) % mp != 0) {
        per_node = std::min(8, mp);
        nodes = std::max(1, mp / per_node);
    }
    return {"A100-80GB", per_node, nodes};
}

int64_t preset_parameters(const std::string& name) {
    try {
        const Config c = planner::load_preset(name);
        const PresetCluster pc = preset_cluster(name, c);
        const auto& catalogue = planner::device_catalogue();
        return planner::plan(c, planner::make_cluster(planner::find_device(catalogue, pc.device), pc.per_node, pc.nodes))
            .parameters.total;
    } catch (const std::exception&) {
        return 0;
    }
}

Config DesignerView::config() const {
    Config c = config_;
    form_->config(c);
    return c;
}

planner::Cluster DesignerView::cluster() const {
    return cluster_->cluster();
}

void DesignerView::setConfig(const Config& config) {
    loading_ = true;
    config_ = config;
    form_->setConfig(config);
    loading_ = false;
    replan();
}

void DesignerView::setCluster(const QString& device, int per_node, int nodes) {
    cluster_->setCluster(device, per_node, nodes);
    replan();
}

bool DesignerView::loadPreset(const QString& name, QString* error) {
    try {
        const Config c = planner::load_preset(name.toStdString());
        const PresetCluster pc = preset_cluster(name.toStdString(), c);
        cluster_->setCluster(QString::fromStdString(pc.device), pc.per_node, pc.nodes);
        file_.clear();
        setConfig(c);
        modified_ = false;
        const int i = presets_->findData(name);
        if (i >= 0) presets_->setCurrentIndex(i);
        shown_preset_ = name;
        updateTitle();
        emit message(tr("Loaded preset %1").arg(name));
        return true;
    } catch (const std::exception& e) {
        if (error) *error = QString::fromUtf8(e.what());
        return false;
    }
}

bool DesignerView::openFile(const QString& path, QString* error) {
    try {
        const Config c = load_config_file_checked(to_path(path));
        file_ = path;
        setConfig(c);
        modified_ = false;
        presets_->setCurrentIndex(0);
        shown_preset_.clear();
        updateTitle();
        emit fileUsed(path);
        emit message(tr("Opened %1").arg(path));
        return true;
    } catch (const std::exception& e) {
        if (error) *error = QString::fromUtf8(e.what());
        return false;
    }
}

bool DesignerView::saveFile(const QString& path, QString* error) {
    try {
        save_config_file(to_path(path), config());
        file_ = path;
        modified_ = false;
        updateTitle();
        emit fileUsed(path);
        emit message(tr("Saved %1 (mwb-train --config %1)").arg(path));
        return true;
    } catch (const std::exception& e) {
        if (error) *error = QString::fromUtf8(e.what());
        return false;
    }
}

void DesignerView::openDialog() {
    if (!confirmDiscard()) return;
    const QString path = QFileDialog::getOpenFileName(this, tr("Open configuration"), QFileInfo(file_).absolutePath(),
                                                      tr("Configurations (*.json);;All files (*)"));
    if (path.isEmpty()) return;
    QString error;
    if (!openFile(path, &error)) QMessageBox::warning(this, tr("Cannot open %1").arg(path), error);
}

void DesignerView::save() {
    if (file_.isEmpty()) return saveAs();
    QString error;
    if (!saveFile(file_, &error)) QMessageBox::warning(this, tr("Cannot save"), error);
}

void DesignerView::saveAs() {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save configuration"),
                                                      file_.isEmpty() ? QStringLiteral("run.json") : file_,
                                                      tr("Configurations (*.json)"));
    if (path.isEmpty()) return;
    QString error;
    if (!saveFile(path, &error)) QMessageBox::warning(this, tr("Cannot save"), error);
}

void DesignerView::autoConfigure() {
    AutoConfigureDialog dialog(config(), cluster(), this);
    if (dialog.exec() != QDialog::Accepted) return;
    setConfig(dialog.chosen());
    modified_ = true;
    updateTitle();
    emit message(tr("Applied layout %1").arg(panel_->figure(QStringLiteral("layout"))));
}

bool DesignerView::confirmDiscard() {
    if (!modified_) return true;
    const auto answer = QMessageBox::question(
        this, tr("Unsaved design"),
        tr("The design has changes that are not saved%1. Save them first?")
            .arg(file_.isEmpty() ? QString() : tr(" in %1").arg(file_)),
        QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, QMessageBox::Save);
    if (answer == QMessageBox::Cancel) return false;
    if (answer == QMessageBox::Save) {
        save();
        return !modified_;  // the user cancelled the file dialog, or saving failed
    }
    return true;
}

void DesignerView::edited() {
    if (loading_) return;
    Config c = config_;
    form_->config(c);
    // full recomputation needs a method and a layer count: Megatron-LM's usual choice, not two errors
    if (c.training.recompute_granularity == "full" && config_.training.recompute_granularity != "full" &&
        c.training.recompute_method.empty()) {
        c.training.recompute_method = "uniform";
        if (c.training.recompute_num_layers <= 0) c.training.recompute_num_layers = 1;
        setConfig(c);
    }
    config_.training.recompute_granularity = c.training.recompute_granularity;
    modified_ = true;
    updateTitle();
    replan_timer_.start();
}

void DesignerView::replan() {
    replan_timer_.stop();
    Config c = config_;
    form_->config(c);  // a text box without a number keeps its last valid value
    config_ = c;
    planner::Cluster cl;
    try {
        cl = cluster_->cluster();
    } catch (const std::exception& e) {
        emit message(QString::fromUtf8(e.what()));
        return;
    }
    planner::PlanOptions o;
    o.train_tokens = panel_->trainTokens();
    QElapsedTimer t;
    t.start();
    try {
        plan_ = planner::plan(c, cl, o);
    } catch (const std::exception& e) {
        plan_ = planner::Plan{};
        plan_.issues.push_back({"config", e.what()});
    }
    plan_us_ = static_cast<double>(t.nsecsElapsed()) / 1e3;
    // text boxes that hold no number: the plan used their last valid value; say so under the field
    const std::vector<ConfigIssue> unparsed = form_->parseIssues();
    plan_.issues.insert(plan_.issues.begin(), unparsed.begin(), unparsed.end());
    form_->showIssues(plan_.issues);
    const int mp =
        std::max(1, c.parallel.tensor_model_parallel_size) * std::max(1, c.parallel.pipeline_model_parallel_size);
    form_->setDataParallel(cl.world_size() / mp, cl.world_size());
    const int world = cl.world_size();
    if (world % mp != 0) {
        resize_to_ = (world + mp - 1) / mp * mp;  // the smallest world the layout divides
        resize_text_->setText(tr("TP × PP = %1 needs a multiple of %1 devices; the cluster has %2.").arg(mp).arg(world));
        resize_button_->setText(tr("Resize the cluster to %1 devices").arg(resize_to_));
        resize_banner_->setVisible(true);
    } else {
        resize_banner_->setVisible(false);
    }
    panel_->showPlan(plan_);
    emit designChanged();
}

void DesignerView::updateTitle() {
    QString t = file_.isEmpty() ? tr("unsaved design") : QFileInfo(file_).fileName();
    if (modified_) t += QStringLiteral(" *");
    file_label_->setText(t);
}

}  // namespace mwb::app
