#include "app/launch/generate_dialog.h"

#include "app/core/paths.h"
#include "app/core/sample_text.h"
#include "app/core/theme.h"
#include "app/core/wheel_guard.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTextBrowser>
#include <QTextCursor>
#include <QVBoxLayout>

#include <limits>

namespace mwb::app {

QStringList GenerateSettings::arguments() const {
    QStringList a{QStringLiteral("--load"),           checkpoint,
                  QStringLiteral("--prompt"),         prompt,
                  QStringLiteral("--max-new-tokens"), QString::number(max_new_tokens)};
    if (greedy) {
        a << QStringLiteral("--greedy");
    } else {
        a << QStringLiteral("--temperature") << QString::number(temperature, 'g', 6) << QStringLiteral("--top-k")
          << QString::number(top_k) << QStringLiteral("--top-p") << QString::number(top_p, 'g', 6);
    }
    a << QStringLiteral("--seed") << QString::number(seed) << QStringLiteral("--device") << device
      << QStringLiteral("--json");
    return a;
}

GenerateDialog::GenerateDialog(const QString& checkpoint, const QString& title, QWidget* parent)
    : QDialog(parent), program_(find_generator()) {
    setWindowTitle(title.isEmpty() ? tr("Generate") : tr("Generate from %1").arg(title));
    setObjectName(QStringLiteral("generateDialog"));
    auto* layout = new QVBoxLayout(this);

    auto* form = new QFormLayout;
    auto* where = new QHBoxLayout;
    checkpoint_ = new QLineEdit(checkpoint);
    checkpoint_->setObjectName(QStringLiteral("generateCheckpoint"));
    auto* browse = new QPushButton(tr("Browse…"));
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Checkpoint directory"), checkpoint_->text());
        if (!dir.isEmpty()) checkpoint_->setText(dir);
    });
    where->addWidget(checkpoint_, 1);
    where->addWidget(browse);
    form->addRow(tr("Checkpoint:"), where);

    prompt_ = new QPlainTextEdit;
    prompt_->setObjectName(QStringLiteral("generatePrompt"));
    prompt_->setPlaceholderText(tr("The text the model continues"));
    prompt_->setTabChangesFocus(true);
    prompt_->setFixedHeight(prompt_->fontMetrics().lineSpacing() * 4 + 12);
    form->addRow(tr("Prompt:"), prompt_);

    auto* knobs = new QHBoxLayout;
    auto spin = [&](const QString& label, int lo, int hi, int value, const QString& tip) {
        auto* s = new QSpinBox;
        s->setRange(lo, hi);
        s->setValue(value);
        s->setToolTip(tip);
        guard_wheel(s);
        knobs->addWidget(new QLabel(label));
        knobs->addWidget(s);
        return s;
    };
    auto real = [&](const QString& label, double lo, double hi, double value, double step, const QString& tip) {
        auto* s = new QDoubleSpinBox;
        s->setRange(lo, hi);
        s->setDecimals(2);
        s->setSingleStep(step);
        s->setValue(value);
        s->setToolTip(tip);
        guard_wheel(s);
        knobs->addWidget(new QLabel(label));
        knobs->addWidget(s);
        return s;
    };
    max_new_ = spin(tr("Max new tokens"), 1, 65536, 64, tr("--max-new-tokens: stop after this many tokens"));
    temperature_ = real(tr("Temperature"), 0.01, 10, 1.0, 0.1, tr("--temperature: below 1 sharper, above 1 flatter"));
    top_k_ = spin(tr("Top-k"), 0, 1 << 20, 0, tr("--top-k: sample among the k likeliest tokens (0 = all)"));
    top_p_ = real(tr("Top-p"), 0.01, 1, 1.0, 0.05, tr("--top-p: the smallest set of tokens holding this probability"));
    seed_ = spin(tr("Seed"), 0, std::numeric_limits<int>::max(), 1234, tr("--seed: the same seed gives the same text"));
    greedy_ = new QCheckBox(tr("Greedy"));
    greedy_->setToolTip(tr("--greedy: always the likeliest token (ignores temperature, top-k, top-p)"));
    knobs->addWidget(greedy_);
    device_ = new QComboBox;
    device_->addItem(QStringLiteral("cpu"));
    device_->addItem(QStringLiteral("cuda"));
    knobs->addWidget(device_);
    knobs->addStretch(1);
    form->addRow(tr("Settings:"), knobs);
    layout->addLayout(form);

    output_ = new QTextBrowser;
    output_->setObjectName(QStringLiteral("generateOutput"));
    output_->setMinimumSize(560, 220);
    layout->addWidget(output_, 1);

    status_ = new QLabel;
    status_->setObjectName(QStringLiteral("generateStatus"));
    status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    status_->setWordWrap(false);
    status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);  // a long error never widens the dialog
    layout->addWidget(status_);

    auto* buttons = new QDialogButtonBox;
    generate_ = buttons->addButton(tr("&Generate"), QDialogButtonBox::ActionRole);
    generate_->setObjectName(QStringLiteral("generateButton"));
    generate_->setDefault(true);
    stop_ = buttons->addButton(tr("&Stop"), QDialogButtonBox::ActionRole);
    stop_->setObjectName(QStringLiteral("stopButton"));
    auto* close = buttons->addButton(QDialogButtonBox::Close);
    layout->addWidget(buttons);

    connect(generate_, &QPushButton::clicked, this, &GenerateDialog::generate);
    connect(stop_, &QPushButton::clicked, this, &GenerateDialog::stop);
    connect(close, &QPushButton::clicked, this, &QDialog::reject);
    connect(greedy_, &QCheckBox::toggled, this, &GenerateDialog::updateEnabled);
    connect(&process_, &QProcess::readyReadStandardOutput, this, &GenerateDialog::onOutput);
    connect(&process_, &QProcess::readyReadStandardError, this, [this] {
        stderr_tail_ += process_.readAllStandardError();  // progress and diagnostics: the last line matters
        if (stderr_tail_.size() > 8192) stderr_tail_ = stderr_tail_.right(4096);
    });
    connect(&process_, &QProcess::finished, this, &GenerateDialog::onFinished);
    connect(&process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
        if (e != QProcess::FailedToStart) return;
        error_ = tr("cannot start %1: %2").arg(program_, process_.errorString());
        setStatus(error_, true);
        updateEnabled();
        emit generationEnded(false, error_);
    });
    setStatus(program_.isEmpty() ? tr("mwb-generate was not found (next to mwb, in the build tree, on PATH, or "
                                      "$MWB_GENERATE)")
                                 : tr("Ready"),
              program_.isEmpty());
    updateEnabled();
}

GenerateDialog::~GenerateDialog() {
    if (running()) {
        process_.kill();
        process_.waitForFinished(2000);
    }
}

GenerateSettings GenerateDialog::settings() const {
    GenerateSettings s;
    s.checkpoint = checkpoint_->text().trimmed();
    s.prompt = prompt_->toPlainText();
    s.max_new_tokens = max_new_->value();
    s.temperature = temperature_->value();
    s.top_k = top_k_->value();
    s.top_p = top_p_->value();
    s.seed = seed_->value();
    s.greedy = greedy_->isChecked();
    s.device = device_->currentText();
    return s;
}

void GenerateDialog::updateEnabled() {
    const bool busy = running();
    generate_->setEnabled(!busy);
    stop_->setEnabled(busy);
    for (QWidget* w : std::initializer_list<QWidget*>{temperature_, top_k_, top_p_})
        w->setEnabled(!greedy_->isChecked());
}

void GenerateDialog::setStatus(const QString& text, bool error) {
    QString line = text.simplified();  // one line, whatever the process wrote
    status_->setToolTip(line);
    status_->setText(status_->fontMetrics().elidedText(line, Qt::ElideRight, std::max(200, status_->width())));
    QPalette p = status_->palette();
    p.setColor(QPalette::WindowText, error ? error_color() : palette().color(QPalette::WindowText));
    status_->setPalette(p);
}

void GenerateDialog::generate() {
    if (running()) return;
    const GenerateSettings s = settings();
    if (program_.isEmpty()) {
        setStatus(tr("mwb-generate was not found (next to mwb, in the build tree, on PATH, or $MWB_GENERATE)"), true);
        return;
    }
    if (s.checkpoint.isEmpty() || s.prompt.isEmpty()) {
        setStatus(s.checkpoint.isEmpty() ? tr("Choose a checkpoint directory") : tr("Write a prompt"), true);
        return;
    }
    stream_ = GenerateStream{};
    completion_.clear();
    error_.clear();
    stderr_tail_.clear();
    tokens_ = 0;
    done_ = stopped_ = false;
    prompt_shown_ = s.prompt;
    showCompletion({});
    process_.setProgram(program_);
    process_.setArguments(s.arguments());
    process_.start(QIODevice::ReadOnly);
    setStatus(tr("Generating…"));
    updateEnabled();
}

void GenerateDialog::stop() {
    if (!running()) return;
    stopped_ = true;
    process_.terminate();  // SIGTERM; killed if it does not go
    if (!process_.waitForFinished(2000)) process_.kill();
}

void GenerateDialog::showCompletion(const QString& completion) {
    output_->clear();
    QTextCursor c(output_->document());
    insert_sample_text(c, prompt_shown_, completion);
}

void GenerateDialog::onOutput() {
    const QByteArray bytes = process_.readAllStandardOutput();
    for (const GenerateEvent& e :
         stream_.feed(std::string_view(bytes.constData(), static_cast<std::size_t>(bytes.size()))))
        handle(e);
}

void GenerateDialog::handle(const GenerateEvent& e) {
    switch (e.type) {
        case GenerateEvent::Type::Start:
            break;
        case GenerateEvent::Type::Token: {
            if (e.prompt_index != 0 || e.text.empty()) break;  // one prompt here; an empty piece completes nothing yet
            const QString piece = QString::fromStdString(e.text);
            completion_ += piece;
            ++tokens_;
            QTextCursor c(output_->document());
            c.movePosition(QTextCursor::End);
            c.insertText(piece, completion_format());  // appended as it arrives, no rebuild
            setStatus(tr("Generating… %1 tokens").arg(tokens_));
            break;
        }
        case GenerateEvent::Type::Done: {
            if (e.prompt_index != 0) break;
            done_ = true;
            const QString full = QString::fromStdString(e.text);
            if (full != completion_) {  // the final text is the one that counts
                completion_ = full;
                showCompletion(completion_);
            }
            setStatus(tr("Done: %1 tokens (%2), %3 tokens/s")
                          .arg(e.completion_tokens)
                          .arg(QString::fromStdString(e.finish_reason == "eos" ? "end of text" : e.finish_reason))
                          .arg(e.tokens_per_sec, 0, 'f', 1));
            break;
        }
        case GenerateEvent::Type::Error:
            if (error_.isEmpty()) error_ = QString::fromStdString(e.text);
            setStatus(error_, true);
            break;
    }
}

void GenerateDialog::onFinished(int exit_code, QProcess::ExitStatus status) {
    onOutput();  // what came with the exit
    for (const GenerateEvent& e : stream_.finish()) handle(e);
    bool ok = false;
    if (stopped_) {
        setStatus(tr("Stopped after %1 tokens").arg(tokens_));
    } else if (!error_.isEmpty()) {
        setStatus(error_, true);
    } else if (status != QProcess::NormalExit || exit_code != 0) {
        // no error event: the process's last diagnostic line says why
        const QList<QByteArray> lines = stderr_tail_.trimmed().split('\n');
        const QString last = lines.isEmpty() ? QString() : QString::fromUtf8(lines.back()).trimmed();
        error_ = status != QProcess::NormalExit
                     ? tr("mwb-generate crashed%1").arg(last.isEmpty() ? "" : ": " + last)
                     : (last.isEmpty() ? tr("mwb-generate exited with status %1").arg(exit_code) : last);
        setStatus(error_, true);
    } else {
        ok = done_;
        if (!done_) {
            error_ = tr("mwb-generate ended without a result");
            setStatus(error_, true);
        }
    }
    updateEnabled();
    emit generationEnded(ok && !stopped_, error_);
}

}  // namespace mwb::app
