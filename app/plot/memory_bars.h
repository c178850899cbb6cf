#pragma once
// Memory per rank (or per pipeline stage) as horizontal bars stacked by the allocator's categories,
// against the device: the bar is the peak split by category, a tick marks what is allocated now, a
// diamond the planner's predicted peak, and a dashed line the memory a run may use (capacity less
// the runtime reserve). Painted by hand: QtCharts has no markers on bars.
#include "mwb/ipc/schema.h"

#include <QString>
#include <QWidget>

#include <array>
#include <cstdint>
#include <vector>

namespace mwb::app {

inline constexpr int kCategories = static_cast<int>(ipc::kMemoryCategoryCount);  ///< ipc::kMemoryCategories
/// The category names, as in metrics.jsonl's by_category and the planner's memory section.
const char* category_key(int category);
QString category_label(int category);

struct MemoryBar {
    QString label;                               ///< "stage 0", "rank 3"
    std::array<double, kCategories> segments{};  ///< bytes, stacked; they add up to the peak
    double current = -1;                         ///< allocated now (tick); < 0: none
    double predicted = -1;                       ///< planner's predicted peak (diamond); < 0: none
    QString tooltip;
};

/// Splits a simultaneous peak by category: every category at its current value, and the rest of the
/// peak shared among the categories that grow during an iteration, in proportion to their growth.
/// (Per-category peaks happen at different moments and add up to more than the peak.)
std::array<double, kCategories> stack_memory(const std::array<double, kCategories>& current,
                                             const std::array<double, kCategories>& peak, double peak_total);

class MemoryBars : public QWidget {
    Q_OBJECT
public:
    explicit MemoryBars(QWidget* parent = nullptr);
    /// `capacity`: device memory (0: unknown); `limit`: what a run may allocate (0: none drawn).
    void setBars(std::vector<MemoryBar> bars, double capacity, double limit);
    void setEmptyText(const QString& text);
    const std::vector<MemoryBar>& bars() const { return bars_; }
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    void paintEvent(QPaintEvent*) override;
    void mouseMoveEvent(QMouseEvent* e) override;

private:
    int rowHeight() const;
    int legendHeight() const;
    std::vector<MemoryBar> bars_;
    double capacity_ = 0, limit_ = 0;
    QString empty_;
};

}  // namespace mwb::app
