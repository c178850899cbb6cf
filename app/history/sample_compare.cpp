#include "app/history/sample_compare.h"

#include "app/core/format.h"
#include "app/core/sample_text.h"
#include "app/core/theme.h"
#include "mwb/store/store.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>
#include <QTextBlockFormat>
#include <QTextBrowser>
#include <QTextCursor>
#include <QVBoxLayout>

#include <limits>

namespace mwb::app {

SampleCompare::SampleCompare(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Prompt:")));
    prompt_ = new QComboBox;
    prompt_->setObjectName(QStringLiteral("comparePrompt"));
    prompt_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    prompt_->setMinimumContentsLength(30);
    top->addWidget(prompt_, 1);
    at_ = new QComboBox;
    at_->setObjectName(QStringLiteral("compareAt"));
    at_->addItem(tr("Newest sample of each run"), static_cast<int>(At::Latest));
    at_->addItem(tr("Newest at or before iteration"), static_cast<int>(At::AtOrBefore));
    at_->addItem(tr("Every iteration"), static_cast<int>(At::Every));
    top->addWidget(at_);
    iteration_ = new QSpinBox;
    iteration_->setObjectName(QStringLiteral("compareIteration"));
    iteration_->setRange(0, std::numeric_limits<int>::max());
    iteration_->setEnabled(false);
    top->addWidget(iteration_);
    layout->addLayout(top);
    text_ = new QTextBrowser;
    text_->setObjectName(QStringLiteral("compareSamples"));
    text_->setOpenLinks(false);
    layout->addWidget(text_, 1);
    connect(prompt_, &QComboBox::currentIndexChanged, this, &SampleCompare::refresh);
    connect(at_, &QComboBox::currentIndexChanged, this, [this] {
        iteration_->setEnabled(static_cast<At>(at_->currentData().toInt()) == At::AtOrBefore);
        refresh();
    });
    connect(iteration_, &QSpinBox::valueChanged, this, &SampleCompare::refresh);
    refresh();
}

void SampleCompare::setStore(store::Store* store) {
    store_ = store;
    updatePrompts();
}

void SampleCompare::setRuns(std::vector<CompareRun> runs) {
    runs_ = std::move(runs);
    updatePrompts();
}

void SampleCompare::updatePrompts() {
    const QString chosen = prompt_->currentText();
    std::vector<std::string> prompts;
    if (store_ && !runs_.empty()) {
        std::vector<std::string> uids;
        for (const auto& r : runs_) uids.push_back(r.uid);
        try {
            prompts = store_->sample_prompts(uids);
        } catch (const std::exception&) {  // a run deleted meanwhile: nothing to compare
        }
    }
    {
        const QSignalBlocker block(prompt_);
        prompt_->clear();
        for (const auto& p : prompts) prompt_->addItem(QString::fromStdString(p));
        prompt_->setCurrentIndex(std::max(0, prompt_->findText(chosen)));
    }
    refresh();
}

void SampleCompare::refresh() {
    text_->clear();
    QTextCursor c(text_->document());
    if (!store_ || runs_.empty() || prompt_->count() == 0) {
        c.insertText(runs_.empty() ? tr("Select runs to compare what they write.")
                                   : tr("None of the selected runs has samples (train with --sample-interval N "
                                        "--sample-prompts FILE)."),
                     note_format());
        return;
    }
    const std::string prompt = prompt_->currentText().toStdString();
    const At at = static_cast<At>(at_->currentData().toInt());
    QTextBlockFormat run_block, sample_block;
    run_block.setTopMargin(10);
    sample_block.setTopMargin(3);
    bool first = true;
    for (std::size_t i = 0; i < runs_.size(); ++i) {
        const CompareRun& run = runs_[i];
        std::vector<store::SampleRecord> shown;
        try {
            if (at == At::Every) {
                for (auto& s : store_->samples(run.uid))
                    if (s.prompt == prompt) shown.push_back(std::move(s));
            } else {
                const auto one = store_->prompt_samples(
                    {run.uid}, prompt,
                    at == At::AtOrBefore ? std::optional<int64_t>(iteration_->value()) : std::nullopt);
                if (one.front()) shown.push_back(*one.front());
            }
        } catch (const std::exception&) {
            continue;  // deleted meanwhile
        }
        if (!first) c.insertBlock(run_block);
        first = false;
        QTextCharFormat title = heading_format();
        title.setForeground(series_color(run.color >= 0 ? run.color : static_cast<int>(i)));
        c.insertText(QStringLiteral("■ "), title);
        c.insertText(run.title, heading_format());
        if (shown.empty()) {
            c.insertText(
                at == At::AtOrBefore
                    ? tr("  ·  no sample of this prompt at or before iteration %1").arg(format_int(iteration_->value()))
                    : tr("  ·  no sample of this prompt"),
                note_format());
            continue;
        }
        for (const auto& s : shown) {
            c.insertBlock(sample_block);
            c.insertText(tr("iteration %1 · %2 tokens trained · %3 · ")
                             .arg(format_int(s.iteration), format_count(static_cast<double>(s.consumed_tokens)),
                                  s.greedy ? tr("greedy") : tr("temperature %1").arg(s.temperature)),
                         note_format());
            c.insertBlock(sample_block);
            insert_sample_text(c, QString::fromStdString(s.prompt), QString::fromStdString(s.completion));
        }
    }
}

}  // namespace mwb::app
