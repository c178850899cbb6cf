#include "app/monitor/samples_panel.h"

#include "app/core/format.h"
#include "app/core/sample_text.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QScrollBar>
#include <QTextBlockFormat>
#include <QTextBrowser>
#include <QTextCursor>
#include <QVBoxLayout>

#include <algorithm>
#include <map>

namespace mwb::app {

namespace {

QString settings_note(const store::SampleRecord& s) {
    if (s.greedy || s.temperature <= 0) return QObject::tr("greedy");
    QString t = QObject::tr("temperature %1").arg(s.temperature);
    if (s.top_k > 0) t += QObject::tr(", top-k %1").arg(s.top_k);
    if (s.top_p < 1) t += QObject::tr(", top-p %1").arg(s.top_p);
    return t + QObject::tr(", seed %1").arg(s.seed);
}

}  // namespace

SamplesPanel::SamplesPanel(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* top = new QHBoxLayout;
    summary_ = new QLabel;
    summary_->setObjectName(QStringLiteral("samplesSummary"));
    top->addWidget(summary_, 1);
    filter_ = new QComboBox;
    filter_->setObjectName(QStringLiteral("samplesPromptFilter"));
    filter_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    filter_->setMinimumContentsLength(18);
    top->addWidget(filter_);
    layout->addLayout(top);
    text_ = new QTextBrowser;
    text_->setObjectName(QStringLiteral("samplesText"));
    text_->setOpenLinks(false);
    text_->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::TextSelectableByKeyboard);
    text_->document()->setUndoRedoEnabled(false);  // rebuilt, never edited
    layout->addWidget(text_, 1);
    connect(filter_, &QComboBox::currentIndexChanged, this, [this] { rebuild(); });
    rebuild();
}

void SamplesPanel::sync(const std::vector<store::SampleRecord>& samples, bool reset) {
    if (!reset && samples.size() == samples_.size()) return;  // nothing new: no rebuild
    samples_ = samples;
    // the prompt filter lists every prompt once, by prompt index; the choice survives new samples
    const QString chosen = filter_->currentIndex() > 0 ? filter_->currentText() : QString();
    std::map<int64_t, QString> prompts;
    for (const auto& s : samples_) prompts.emplace(s.prompt_index, QString::fromStdString(s.prompt));
    {
        const QSignalBlocker block(filter_);
        filter_->clear();
        filter_->addItem(tr("All prompts"));
        for (const auto& [index, prompt] : prompts) filter_->addItem(prompt, static_cast<qlonglong>(index));
        const int again = chosen.isEmpty() || reset ? 0 : filter_->findText(chosen);
        filter_->setCurrentIndex(std::max(0, again));
    }
    rebuild();
}

void SamplesPanel::rebuild() {
    const bool one = filter_->currentIndex() > 0;
    const int64_t only = one ? filter_->currentData().toLongLong() : -1;
    // newest iteration first; within one, prompts in file order (a replayed sample: the newest seq)
    std::map<int64_t, std::map<int64_t, const store::SampleRecord*>, std::greater<>> by_iteration;
    for (const auto& s : samples_) {
        if (one && s.prompt_index != only) continue;
        auto& slot = by_iteration[s.iteration][s.prompt_index];
        if (!slot || s.seq > slot->seq) slot = &s;
    }
    const int keep_scroll = text_->verticalScrollBar()->value();
    text_->clear();
    QTextCursor c(text_->document());
    c.beginEditBlock();  // one layout pass for the whole text, not one per insert
    QTextBlockFormat first_block, block, heading_block;
    heading_block.setTopMargin(10);
    block.setTopMargin(4);
    std::size_t shown = 0, drawn = 0;
    bool first = true;
    for (const auto& [iteration, prompts] : by_iteration) {
        if (drawn >= static_cast<std::size_t>(kMaxShownSamples)) break;
        ++shown;
        drawn += prompts.size();
        if (!first)
            c.insertBlock(heading_block);
        else
            c.setBlockFormat(first_block);
        first = false;
        const auto& any = *prompts.begin()->second;
        c.insertText(tr("Iteration %1").arg(format_int(iteration)), heading_format());
        c.insertText(tr("  ·  %1 tokens trained  ·  %2")
                         .arg(format_count(static_cast<double>(any.consumed_tokens)), settings_note(any)),
                     note_format());
        for (const auto& [index, s] : prompts) {
            c.insertBlock(block);
            insert_sample_text(c, QString::fromStdString(s->prompt), QString::fromStdString(s->completion));
            c.insertText(tr("   [%1, %2 tokens, %3 s]")
                             .arg(QString::fromStdString(s->finish_reason.empty() ? "?" : s->finish_reason))
                             .arg(s->completion_tokens)
                             .arg(s->time_s, 0, 'f', 2),
                         note_format());
        }
    }
    if (by_iteration.empty()) {
        c.insertText(samples_.empty() ? tr("No samples yet. Train with --sample-interval N --sample-prompts FILE "
                                           "to see what the model writes as it learns.")
                                      : tr("No sample of this prompt."),
                     note_format());
    }
    c.endEditBlock();
    // The view's own cursor moved along with the inserts (to the oldest sample): put it back at the top,
    // or the tab's first show scrolls to it (QTextEdit shows its cursor on first show) and hides the newest.
    text_->setTextCursor(QTextCursor(text_->document()));
    text_->verticalScrollBar()->setValue(keep_scroll);
    const auto iterations = by_iteration.size();
    summary_->setText(
        samples_.empty()
            ? tr("Samples")
            : tr("%1 samples at %2 iterations%3")
                  .arg(samples_.size())
                  .arg(iterations)
                  .arg(iterations > shown
                           ? tr(" (newest %1 shown%2)").arg(shown).arg(one ? QString() : tr("; one prompt shows more"))
                           : QString()));
}

}  // namespace mwb::app
