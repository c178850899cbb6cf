#pragma once
// The Monitor's Samples panel: what the model writes while it trains (the run's `sample` records,
// live and reloaded from the store), grouped by iteration, newest first, each prompt highlighted and
// followed by its completion. The text is selectable and copyable; a prompt filter narrows it to one
// prompt across iterations. Rebuilt only when samples arrive (every --sample-interval iterations).
#include "mwb/store/types.h"

#include <QWidget>

#include <vector>

class QComboBox;
class QLabel;
class QTextBrowser;

namespace mwb::app {

class SamplesPanel : public QWidget {
    Q_OBJECT
public:
    explicit SamplesPanel(QWidget* parent = nullptr);

    /// Shows `samples` (arrival order) when they changed since the last call; `reset`: another run.
    void sync(const std::vector<store::SampleRecord>& samples, bool reset);

    QTextBrowser* text() const { return text_; }
    QComboBox* promptFilter() const { return filter_; }
    QLabel* summary() const { return summary_; }
    /// About this many samples are drawn (whole iterations, the newest first; at least one): the
    /// rebuild stays near 0.1 s on the GUI thread (mwb-samples-bench). One prompt shows more iterations.
    static constexpr int kMaxShownSamples = 1000;

private:
    void rebuild();
    std::vector<store::SampleRecord> samples_;
    QComboBox* filter_ = nullptr;
    QLabel* summary_ = nullptr;
    QTextBrowser* text_ = nullptr;
};

}  // namespace mwb::app
