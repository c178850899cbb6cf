#include "app/designer/config_form.h"

#include "backend/config/fields.h"
#include "app/designer/field_editor.h"

#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QScrollArea>
#include <QSpinBox>
#include <QVBoxLayout>

#include <set>

namespace mwb::app {

namespace {

const std::vector<std::string_view> kModel = {"num_layers",
                                              "hidden_size",
                                              "num_attention_heads",
                                              "group_query_attention",
                                              "num_query_groups",
                                              "ffn_hidden_size",
                                              "swiglu",
                                              "seq_length",
                                              "max_position_embeddings",
                                              "position_embedding_type",
                                              "vocab_size",
                                              "normalization",
                                              "add_bias_linear",
                                              "untie_embeddings_and_output_weights"};
// Rotary position embedding: used with position_embedding_type rope.
const std::vector<std::string_view> kRope = {"rotary_base", "rotary_percent", "rotary_interleaved", "use_rope_scaling",
                                             "rope_scaling_factor"};
const std::vector<std::string_view> kModelDetails = {
    "kv_channels",       "add_qkv_bias",   "make_vocab_size_divisible_by", "layernorm_epsilon", "hidden_dropout",
    "attention_dropout", "init_method_std"};
const std::vector<std::string_view> kParallel = {
    "tensor_model_parallel_size",   "sequence_parallel",
    "pipeline_model_parallel_size", "num_layers_per_virtual_pipeline_stage",
    "use_distributed_optimizer",    "ddp_bucket_size"};
const std::vector<std::string_view> kBatch = {"micro_batch_size", "global_batch_size"};
const std::vector<std::string_view> kMemory = {"recompute_granularity",
                                               "recompute_method",
                                               "recompute_num_layers",
                                               "bf16",
                                               "fp16",
                                               "accumulate_allreduce_grads_in_fp32"};
const std::vector<std::string_view> kLossScale = {"loss_scale", "initial_loss_scale", "min_loss_scale",
                                                  "loss_scale_window", "hysteresis"};
const std::vector<std::string_view> kTraining = {
    "train_iters",  "lr",        "min_lr",     "lr_warmup_iters", "lr_decay_iters", "lr_decay_style",
    "weight_decay", "clip_grad", "adam_beta1", "adam_beta2",      "adam_eps",       "seed"};
const std::vector<std::string_view> kData = {"tokenizer_type",  "vocab_file",    "merge_file",
                                             "mock_data",       "data_path",     "split",
                                             "data_cache_path", "eval_interval", "eval_iters"};
// The sections below follow the config groups (runtime, checkpoint, logging, telemetry).
const std::vector<std::string_view> kRun = {"device", "attention_backend", "threads", "log_interval", "run_dir"};
const std::vector<std::string_view> kCheckpoint = {"save", "save_interval", "load"};
const std::vector<std::string_view> kTelemetry = {"telemetry_endpoint", "telemetry_snapshot_endpoint", "control_endpoint",
                                                  "curve_secret_key_file", "curve_client_keys"};

}  // namespace

ConfigForm::ConfigForm(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    addSection(tr("Model"), kModel);
    QGroupBox* parallel = addSection(tr("Parallel layout"), kParallel);
    {
        auto* form = static_cast<QFormLayout*>(parallel->layout());
        dp_ = new QSpinBox;
        dp_->setRange(1, 1 << 20);
        dp_->setObjectName(QStringLiteral("data_parallel_size"));
        dp_->setToolTip(tr("Data-parallel size = world size / (TP × PP). Changing it resizes the cluster."));
        dp_note_ = new QLabel;
        dp_note_->setObjectName(QStringLiteral("data_parallel_note"));
        auto* box = new QWidget;
        auto* row = new QHBoxLayout(box);
        row->setContentsMargins(0, 0, 0, 0);
        row->addWidget(dp_);
        row->addWidget(dp_note_, 1);
        form->insertRow(3, tr("Data parallel (DP)"), box);
        connect(dp_, &QSpinBox::valueChanged, this, [this](int v) {
            if (!loading_) emit dataParallelEdited(v);
        });
    }
    addSection(tr("Batch"), kBatch);
    addSection(tr("Recomputation and precision"), kMemory);
    addSection(tr("Training schedule and optimizer"), kTraining);
    addSection(tr("Data"), kData);
    addSection(tr("Rotary position embedding (RoPE)"), kRope, true);
    addSection(tr("Model details"), kModelDetails, true);
    addSection(tr("fp16 loss scaling"), kLossScale, true);
    addSection(tr("Run"), kRun, true);
    addSection(tr("Checkpoints"), kCheckpoint, true);
    addSection(tr("Telemetry and control"), kTelemetry, true);
    std::vector<std::string_view> rest;
    for (const Field& f : config_fields())
        if (!editors_.contains(QString::fromUtf8(f.name.data(), static_cast<int>(f.name.size()))))
            rest.push_back(f.name);
    if (!rest.empty()) addSection(tr("Other"), rest, true);
    layout->addStretch(1);
}

QGroupBox* ConfigForm::addSection(const QString& title, const std::vector<std::string_view>& fields, bool collapsed) {
    auto* box = new QGroupBox(title);
    box->setCheckable(collapsed);
    auto* form = new QFormLayout(box);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    form->setLabelAlignment(Qt::AlignRight | Qt::AlignVCenter);
    form->setRowWrapPolicy(QFormLayout::DontWrapRows);
    for (std::string_view name : fields) {
        const Field* f = find_config_field(name);
        if (!f) continue;  // the table no longer has it
        auto* e = new FieldEditor(*f);
        editors_.insert(e->name(), e);
        auto* label = new QLabel(e->label());
        label->setToolTip(e->input()->toolTip());
        label->setBuddy(e->input());
        form->addRow(label, e);
        connect(e, &FieldEditor::edited, this, [this] {
            if (!loading_) emit edited();
        });
    }
    if (collapsed) {
        // a checkable group box folds its rows away when unchecked
        box->setChecked(false);
        const auto fold = [box, form](bool open) {
            for (int r = 0; r < form->rowCount(); ++r) form->setRowVisible(r, open);
            box->setFlat(!open);
        };
        connect(box, &QGroupBox::toggled, box, fold);
        fold(false);
    }
    layout()->addWidget(box);
    return box;
}

void ConfigForm::setConfig(const Config& config) {
    loading_ = true;
    for (FieldEditor* e : editors_) e->load(config);
    loading_ = false;
}

bool ConfigForm::config(Config& out, QString* error) const {
    bool ok = true;
    for (FieldEditor* e : editors_) ok = e->store(out, error) && ok;
    return ok;
}

std::vector<ConfigIssue> ConfigForm::parseIssues() const {
    std::vector<ConfigIssue> out;
    Config scratch;
    for (FieldEditor* e : editors_) {
        QString error;
        if (!e->store(scratch, &error)) {
            const QString prefix = e->name() + QStringLiteral(": ");
            if (error.startsWith(prefix)) error = error.mid(prefix.size());
            out.push_back({e->name().toStdString(), error.toStdString()});
        }
    }
    return out;
}

std::vector<ConfigIssue> ConfigForm::showIssues(const std::vector<ConfigIssue>& issues) {
    QMap<QString, QStringList> by_field;
    std::vector<ConfigIssue> elsewhere;
    for (const auto& i : issues) {
        const QString f = QString::fromStdString(i.field);
        if (editors_.contains(f)) {
            by_field[f] << QString::fromStdString(i.message);
        } else {
            elsewhere.push_back(i);
        }
    }
    for (auto it = editors_.begin(); it != editors_.end(); ++it) {
        const QStringList msgs = by_field.value(it.key());
        it.value()->setIssues(msgs);
        if (!msgs.isEmpty()) {  // open a folded section that holds a problem
            for (QWidget* w = it.value()->parentWidget(); w; w = w->parentWidget())
                if (auto* box = qobject_cast<QGroupBox*>(w); box && box->isCheckable() && !box->isChecked()) {
                    box->setChecked(true);
                    break;
                }
        }
    }
    return elsewhere;
}

void ConfigForm::setDataParallel(int dp, int world) {
    loading_ = true;
    dp_->setValue(std::max(1, dp));
    loading_ = false;
    dp_note_->setText(tr("world %1 = TP × PP × DP").arg(world));
}

FieldEditor* ConfigForm::editor(const QString& field) const {
    return editors_.value(field, nullptr);
}

void ConfigForm::focusField(const QString& field) {
    FieldEditor* e = editor(field);
    if (!e) return;
    for (QWidget* w = e->parentWidget(); w; w = w->parentWidget()) {
        if (auto* box = qobject_cast<QGroupBox*>(w); box && box->isCheckable()) box->setChecked(true);
        if (auto* area = qobject_cast<QScrollArea*>(w)) {
            area->ensureWidgetVisible(e, 20, 60);
            break;
        }
    }
    e->input()->setFocus(Qt::OtherFocusReason);
}

}  // namespace mwb::app
