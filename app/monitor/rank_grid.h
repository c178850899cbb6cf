#pragma once
// Every rank of a run as one cell of a TP×PP×DP grid (a row per pipeline stage; in each row, a block
// of TP cells per data-parallel replica), coloured by the rank's peak memory or its step time on one
// ramp from the smallest to the largest value. A straggler (step time well above the median) or a
// rank close to the device's capacity gets a red outline, so one bad rank among hundreds stands out.
#include "app/live/run_traces.h"

#include <QWidget>

#include <vector>

namespace mwb::app {

struct RankCell {
    int rank = 0, tp = 0, pp = 0, dp = 0;
    double memory = -1;     ///< peak bytes (< 0: unknown)
    double step_time = -1;  ///< seconds per iteration, compute + communication + bubble (< 0: unknown)
};

/// The cells of a run: coordinates from the newest step's ranks (else from the topology in Megatron's
/// tp-dp-pp order), memory from the newest memory sample.
std::vector<RankCell> rank_cells(const RunTraces& traces);

class RankGrid : public QWidget {
    Q_OBJECT
public:
    enum class Metric { Memory, StepTime };
    explicit RankGrid(QWidget* parent = nullptr);

    void setCells(std::vector<RankCell> cells);
    void setMetric(Metric metric);
    Metric metric() const { return metric_; }
    /// Memory a rank may use (bytes); ranks above 90% of it are flagged. 0: none.
    void setCapacity(double bytes);
    const std::vector<RankCell>& cells() const { return cells_; }
    /// Ranks flagged for the current metric (in rank order): step time > 1.15 × the median, or memory
    /// > 90% of the capacity.
    std::vector<int> flagged() const;
    /// Where the cell of `rank` is drawn (empty when it is not).
    QRect cellRect(int rank) const;
    QSize sizeHint() const override;

signals:
    void metricChanged(Metric metric);

protected:
    void paintEvent(QPaintEvent*) override;
    void mouseMoveEvent(QMouseEvent* e) override;

private:
    double value(const RankCell& c) const;
    struct Geometry {
        int tp = 1, pp = 1, dp = 1, cell = 10, gap = 4, left = 0, top = 0;
    };
    Geometry geometry() const;
    static QRect rectOf(const RankCell& c, const Geometry& g);
    std::vector<RankCell> cells_;
    Metric metric_ = Metric::Memory;
    double capacity_ = 0;
};

}  // namespace mwb::app
