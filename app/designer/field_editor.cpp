#include "app/designer/field_editor.h"

#include "backend/config/config_io.h"
#include "app/core/theme.h"
#include "app/core/wheel_guard.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleValidator>
#include <QLabel>
#include <QLineEdit>
#include <QRegularExpressionValidator>
#include <QSpinBox>
#include <QVBoxLayout>

#include <limits>
#include <map>
#include <variant>

namespace mwb::app {

namespace {

template <class... Ts>
struct overloaded : Ts... {
    using Ts::operator()...;
};
template <class... Ts>
overloaded(Ts...) -> overloaded<Ts...>;

QString q(std::string_view s) {
    return QString::fromUtf8(s.data(), static_cast<int>(s.size()));
}

}  // namespace

QString field_label(std::string_view name) {
    static const std::map<std::string_view, const char*> names = {
        {"num_layers", "Layers"},
        {"hidden_size", "Hidden size"},
        {"num_attention_heads", "Attention heads"},
        {"ffn_hidden_size", "MLP hidden size"},
        {"seq_length", "Sequence length"},
        {"max_position_embeddings", "Position embeddings"},
        {"vocab_size", "Vocabulary (NullTokenizer)"},
        {"make_vocab_size_divisible_by", "Pad vocabulary to multiple of"},
        {"untie_embeddings_and_output_weights", "Untie embedding and output"},
        {"tensor_model_parallel_size", "Tensor parallel (TP)"},
        {"pipeline_model_parallel_size", "Pipeline parallel (PP)"},
        {"sequence_parallel", "Sequence parallel (SP)"},
        {"num_layers_per_virtual_pipeline_stage", "Layers per virtual stage"},
        {"use_distributed_optimizer", "Distributed optimizer"},
        {"ddp_bucket_size", "DP bucket (elements)"},
        {"micro_batch_size", "Micro-batch size"},
        {"global_batch_size", "Global batch size"},
        {"train_iters", "Training iterations"},
        {"lr", "Learning rate"},
        {"min_lr", "Minimum learning rate"},
        {"lr_warmup_iters", "Warm-up iterations"},
        {"lr_decay_iters", "Decay iterations"},
        {"lr_decay_style", "Decay style"},
        {"adam_beta1", "Adam β1"},
        {"adam_beta2", "Adam β2"},
        {"adam_eps", "Adam ε"},
        {"clip_grad", "Gradient clipping"},
        {"recompute_granularity", "Recompute"},
        {"recompute_method", "Recompute method"},
        {"recompute_num_layers", "Recompute layers"},
        {"bf16", "bf16"},
        {"fp16", "fp16"},
        {"accumulate_allreduce_grads_in_fp32", "fp32 gradient accumulation"},
        {"tokenizer_type", "Tokenizer"},
        {"data_path", "Data path"},
        {"mock_data", "Mock data (random tokens)"},
        {"eval_interval", "Evaluate every"},
        {"eval_iters", "Evaluation batches"},
        {"log_interval", "Log every"},
        {"run_dir", "Run directory"},
        {"save", "Checkpoint directory"},
        {"save_interval", "Save every"},
        {"load", "Resume from"},
        {"telemetry_endpoint", "Telemetry endpoint"},
        {"telemetry_snapshot_endpoint", "Snapshot endpoint"},
        {"control_endpoint", "Control endpoint"},
        {"curve_secret_key_file", "CURVE key pair"},
        {"curve_client_keys", "CURVE client keys"},
    };
    if (const auto it = names.find(name); it != names.end()) return QString::fromUtf8(it->second);
    QString s = q(name);
    s.replace('_', ' ');
    if (!s.isEmpty()) s[0] = s[0].toUpper();
    return s;
}

FieldEditor::FieldEditor(const Field& field, QWidget* parent) : QWidget(parent), field_(field) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(1);
    const QString tip =
        QStringLiteral("<b>%1</b> (%2)<br>%3").arg(q(field.name), q(field.flag()), q(field.help).toHtmlEscaped());
    Config probe;
    const FieldRef ref = field.ref(probe);
    std::visit(overloaded{
                   [&](int*) {
                       auto* s = new QSpinBox;
                       s->setRange(0, std::numeric_limits<int>::max());
                       s->setAccelerated(true);
                       connect(s, &QSpinBox::valueChanged, this, [this] {
                           if (!loading_) emit edited();
                       });
                       input_ = s;
                   },
                   [&](bool*) {
                       auto* c = new QCheckBox;
                       connect(c, &QCheckBox::toggled, this, [this] {
                           if (!loading_) emit edited();
                       });
                       input_ = c;
                   },
                   [&](std::string*) {
                       if (!field.choices.empty()) {
                           auto* c = new QComboBox;
                           for (const QString& choice : q(field.choices).split('|'))
                               c->addItem(choice.isEmpty() ? tr("(none)") : choice, choice);
                           connect(c, &QComboBox::currentIndexChanged, this, [this] {
                               if (!loading_) emit edited();
                           });
                           input_ = c;
                       } else {
                           auto* e = new QLineEdit;
                           connect(e, &QLineEdit::textEdited, this, [this] { emit edited(); });
                           input_ = e;
                       }
                   },
                   [&](auto*) {  // int64, double, list: text
                       auto* e = new QLineEdit;
                       connect(e, &QLineEdit::textEdited, this, [this] { emit edited(); });
                       input_ = e;
                   },
               },
               ref);
    if (std::holds_alternative<int64_t*>(ref))
        static_cast<QLineEdit*>(input_)->setValidator(
            new QRegularExpressionValidator(QRegularExpression(QStringLiteral("-?[0-9]{0,18}")), input_));
    if (std::holds_alternative<std::vector<std::string>*>(ref))
        static_cast<QLineEdit*>(input_)->setPlaceholderText(tr("[weight] prefix ... (empty: bundled corpus)"));
    if (auto* spin = qobject_cast<QSpinBox*>(input_)) {
        // "…; 0 means 4 x hidden_size." — show what 0 stands for instead of a bare 0
        static const QRegularExpression zero(QStringLiteral("0 means ([^.;]+)"));
        const QRegularExpressionMatch m = zero.match(q(field.help));
        // a long rule (Llama's MLP width) would widen the whole form: "automatic", the rule in the tooltip
        if (m.hasMatch() && m.captured(1).size() <= 32)
            spin->setSpecialValueText(m.captured(1).replace(QStringLiteral(" x "), QStringLiteral(" × ")));
        else if (m.hasMatch())
            spin->setSpecialValueText(tr("automatic"));
        else if (q(field.help).contains(QStringLiteral("0 chooses automatically")))
            spin->setSpecialValueText(tr("automatic"));
    }
    if (qobject_cast<QSpinBox*>(input_) || qobject_cast<QComboBox*>(input_)) guard_wheel(input_);
    input_->setToolTip(tip);
    input_->setObjectName(q(field.name));
    layout->addWidget(input_);
    issue_ = new QLabel;
    issue_->setWordWrap(true);
    issue_->setVisible(false);
    issue_->setTextFormat(Qt::PlainText);
    issue_->setObjectName(q(field.name) + QStringLiteral("_issue"));
    layout->addWidget(issue_);
}

QString FieldEditor::label() const {
    return field_label(field_.name);
}

void FieldEditor::load(const Config& config) {
    loading_ = true;
    std::visit(overloaded{
                   [&](int* v) { static_cast<QSpinBox*>(input_)->setValue(*v); },
                   [&](bool* v) { static_cast<QCheckBox*>(input_)->setChecked(*v); },
                   [&](std::string* v) {
                       if (auto* c = qobject_cast<QComboBox*>(input_)) {
                           const int i = c->findData(QString::fromStdString(*v));
                           c->setCurrentIndex(std::max(0, i));
                       } else {
                           auto* e = static_cast<QLineEdit*>(input_);
                           if (e->text() != QString::fromStdString(*v)) e->setText(QString::fromStdString(*v));
                       }
                   },
                   [&](int64_t* v) {
                       auto* e = static_cast<QLineEdit*>(input_);
                       if (e->text() != QString::number(*v)) e->setText(QString::number(*v));
                   },
                   [&](double* v) {
                       auto* e = static_cast<QLineEdit*>(input_);
                       bool ok = false;
                       const double shown = e->text().toDouble(&ok);
                       if (!ok || shown != *v) e->setText(QString::number(*v, 'g', 12));
                   },
                   [&](std::vector<std::string>* v) {
                       QStringList parts;
                       for (const auto& s : *v) parts << QString::fromStdString(s);
                       auto* e = static_cast<QLineEdit*>(input_);
                       if (e->text().split(' ', Qt::SkipEmptyParts) != parts) e->setText(parts.join(' '));
                   },
               },
               field_.ref(config));
    loading_ = false;
}

bool FieldEditor::store(Config& config, QString* error) const {
    bool ok = true;
    std::visit(overloaded{
                   [&](int* v) { *v = static_cast<QSpinBox*>(input_)->value(); },
                   [&](bool* v) { *v = static_cast<QCheckBox*>(input_)->isChecked(); },
                   [&](std::string* v) {
                       if (auto* c = qobject_cast<QComboBox*>(input_)) {
                           *v = c->currentData().toString().toStdString();
                       } else {
                           *v = static_cast<QLineEdit*>(input_)->text().trimmed().toStdString();
                       }
                   },
                   [&](int64_t* v) {
                       const QString t = static_cast<QLineEdit*>(input_)->text().trimmed();
                       const qlonglong x = t.toLongLong(&ok);
                       if (ok) *v = x;
                   },
                   [&](double* v) {
                       const QString t = static_cast<QLineEdit*>(input_)->text().trimmed();
                       const double x = t.toDouble(&ok);
                       if (ok) *v = x;
                   },
                   [&](std::vector<std::string>* v) {
                       v->clear();
                       for (const QString& s : static_cast<QLineEdit*>(input_)->text().split(' ', Qt::SkipEmptyParts))
                           v->push_back(s.toStdString());
                   },
               },
               field_.ref(config));
    if (!ok && error) *error = tr("%1: \"%2\" is not a number").arg(name(), static_cast<QLineEdit*>(input_)->text());
    return ok;
}

void FieldEditor::setIssues(const QStringList& messages) {
    has_issues_ = !messages.isEmpty();
    issue_->setText(messages.join('\n'));
    issue_->setVisible(has_issues_);
    QPalette p = issue_->palette();
    p.setColor(QPalette::WindowText, error_color());
    issue_->setPalette(p);
    // Tint the input's background rather than restyle it: a style sheet would replace the Fusion look
    // of spin boxes and combo boxes (their arrows) with the bare style-sheet one.
    if (has_issues_) {
        QPalette ip = input_->palette();
        const QColor base = palette().color(QPalette::Base), bad = error_color();
        constexpr double kTint = 0.22;
        ip.setColor(QPalette::Base,
                    QColor::fromRgbF(static_cast<float>(base.redF() * (1 - kTint) + bad.redF() * kTint),
                                     static_cast<float>(base.greenF() * (1 - kTint) + bad.greenF() * kTint),
                                     static_cast<float>(base.blueF() * (1 - kTint) + bad.blueF() * kTint)));
        input_->setPalette(ip);
    } else {
        input_->setPalette(QPalette());  // inherit again
    }
}

}  // namespace mwb::app
