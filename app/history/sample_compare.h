#pragma once
// History's "Samples" tab: the same prompt across the selected runs. A prompt (every prompt any of
// them sampled) and an iteration choice — each run's newest sample, its newest at or before an
// iteration, or every iteration — list, per run, what it wrote: the prompt highlighted, the
// completion after it, its iteration and settings. Reads the store when the runs or the choice
// change, never per frame.
#include "app/history/compare_plot.h"
#include "mwb/store/types.h"

#include <QWidget>

#include <vector>

class QComboBox;
class QSpinBox;
class QTextBrowser;

namespace mwb::store {
class Store;
}

namespace mwb::app {

class SampleCompare : public QWidget {
    Q_OBJECT
public:
    enum class At { Latest, AtOrBefore, Every };

    explicit SampleCompare(QWidget* parent = nullptr);
    void setStore(store::Store* store);
    void setRuns(std::vector<CompareRun> runs);
    /// Re-reads the store for the current runs and choices.
    void refresh();

    QComboBox* promptChoice() const { return prompt_; }
    QComboBox* atChoice() const { return at_; }
    QSpinBox* iteration() const { return iteration_; }
    QTextBrowser* text() const { return text_; }

private:
    void updatePrompts();
    store::Store* store_ = nullptr;
    std::vector<CompareRun> runs_;
    QComboBox* prompt_ = nullptr;
    QComboBox* at_ = nullptr;
    QSpinBox* iteration_ = nullptr;
    QTextBrowser* text_ = nullptr;
};

}  // namespace mwb::app
