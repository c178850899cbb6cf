#include "monitor/metric_charts.h"

#include "core/format.h"
#include "core/theme.h"
#include "plot/stacked_bar.h"

#include <QCheckBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSlider>
#include <QVBoxLayout>

#include <cmath>

namespace mwb::app {


double peak_tflops(const RunTraces& t) {
    if (t.start && t.start->config.is_object()) {
        const auto it = t.start->config.find("peak_tflops_per_device");
        if (it != t.start->config.end() && it->is_number() && it->get<double>() > 0) return it->get<double>();
    }
    const Trace& mfu = t[SeriesId::Mfu];
    const Trace& tf = t[SeriesId::Tflops];
    if (!mfu.empty() && !tf.empty() && mfu.x_last() == tf.x_last() && mfu.y.back() > 0)
        return tf.y.back() / mfu.y.back();
    return 0;
}

MetricCharts::MetricCharts(RunTraces& traces, QWidget* parent) : QWidget(parent), traces_(traces) {
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);

    // the loss chart's own controls
    auto* controls = new QHBoxLayout;
    controls->addWidget(new QLabel(tr("Smoothing")));
    smoothing_ = new QSlider(Qt::Horizontal);
    smoothing_->setObjectName(QStringLiteral("smoothing"));
    smoothing_->setRange(0, 99);
    smoothing_->setValue(static_cast<int>(std::lround(traces_.smoothing() * 100)));
    smoothing_->setMaximumWidth(160);
    smoothing_->setToolTip(tr("Exponential moving average of the training loss (TensorBoard's smoothing)"));
    controls->addWidget(smoothing_);
    smoothing_label_ = new QLabel;
    smoothing_label_->setMinimumWidth(32);
    controls->addWidget(smoothing_label_);
    log_loss_ = new QCheckBox(tr("Log scale"));
    log_loss_->setObjectName(QStringLiteral("logLoss"));
    controls->addWidget(log_loss_);
    controls->addStretch(1);
    outer->addLayout(controls);

    auto* grid = new QGridLayout;
    grid->setSpacing(4);
    outer->addLayout(grid, 1);

    PlotView* loss = add(LossChart, tr("Loss"), tr("nats/token"));
    // the unsmoothed loss stays in the background, yet visible on a dark chart
    const int raw_line = loss->addLine(tr("train"), themed_line(0, 1.0, 90, 150));
    const int ema_line = loss->addLine(tr("train (smoothed)"), themed_line(0, 2.0));
    PlotView::LineStyle val_style = themed_line(1, 1.8);
    val_style.markers = true;
    const int val_line = loss->addLine(tr("validation"), val_style);
    loss->setTrace(raw_line, &traces_[SeriesId::Loss]);
    loss->setTrace(ema_line, &traces_.loss_ema);
    loss->setTrace(val_line, &traces_[SeriesId::ValLoss]);
    loss->setEmptyText(tr("Waiting for the first step…"));

    const auto single = [this](Chart c, const QString& title, const QString& y, SeriesId s, int color) {
        PlotView* p = add(c, title, y);
        p->setTrace(p->addLine(title, themed_line(color, 1.6)), &traces_[s]);
        return p;
    };
    single(LrChart, tr("Learning rate"), {}, SeriesId::Lr, 2)->setYLabelFormat(QStringLiteral("%.2e"));
    single(GradNormChart, tr("Gradient norm"), {}, SeriesId::GradNorm, 3);
    single(LossScaleChart, tr("Loss scale"), {}, SeriesId::LossScale, 4)->setYLabelFormat(QStringLiteral("%.5g"));
    single(ThroughputChart, tr("Tokens/s"), tr("trained tokens/s"), SeriesId::TokensPerSec, 5)
        ->setYLabelFormat(QStringLiteral("%.0f"));
    single(IterationTimeChart, tr("Iteration time"), tr("s (wall, mean per record)"), SeriesId::IterationTime, 7);
    single(TflopsChart, tr("TFLOP/s per device"), tr("model TFLOP/s"), SeriesId::Tflops, 6);

    // step time: the slowest rank's compute / communication / bubble, stacked, and the newest step
    auto* step_box = new QWidget;
    auto* step_layout = new QVBoxLayout(step_box);
    step_layout->setContentsMargins(0, 0, 0, 0);
    charts_[StepTimeChart] = new PlotView(tr("Step time"));
    charts_[StepTimeChart]->setObjectName(QStringLiteral("chart.step"));
    charts_[StepTimeChart]->setYTitle(tr("s/iteration"));
    charts_[StepTimeChart]->setTrace(charts_[StepTimeChart]->addArea(tr("compute"), compute_color()),
                                     &traces_[SeriesId::Compute]);
    charts_[StepTimeChart]->setTrace(charts_[StepTimeChart]->addArea(tr("communication"), communication_color()),
                                     &traces_[SeriesId::Communication]);
    charts_[StepTimeChart]->setTrace(charts_[StepTimeChart]->addArea(tr("bubble"), bubble_color()),
                                     &traces_[SeriesId::Bubble]);
    charts_[StepTimeChart]->setEmptyText(tr("No per-rank timing yet"));
    step_layout->addWidget(charts_[StepTimeChart], 1);
    step_bar_ = new StackedBar;
    step_bar_->setObjectName(QStringLiteral("stepBar"));
    step_layout->addWidget(step_bar_);

    grid->addWidget(charts_[LossChart], 0, 0, 1, 2);
    grid->addWidget(step_box, 0, 2);
    grid->addWidget(charts_[ThroughputChart], 1, 0);
    grid->addWidget(charts_[TflopsChart], 1, 1);
    grid->addWidget(charts_[LrChart], 1, 2);
    grid->addWidget(charts_[GradNormChart], 2, 0);
    grid->addWidget(charts_[LossScaleChart], 2, 1);
    grid->addWidget(charts_[IterationTimeChart], 2, 2);
    for (int c = 0; c < 3; ++c) grid->setColumnStretch(c, 1);
    grid->setRowStretch(0, 3);
    grid->setRowStretch(1, 2);
    grid->setRowStretch(2, 2);
    connect(smoothing_, &QSlider::valueChanged, this, [this](int v) {
        setSmoothing(v / 100.0);
        charts_[LossChart]->refresh();
    });
    connect(log_loss_, &QCheckBox::toggled, this, [this](bool on) { setLogLoss(on); });
    smoothing_label_->setText(QString::number(traces_.smoothing(), 'f', 2));
}

PlotView* MetricCharts::add(Chart c, const QString& title, const QString& y_title) {
    auto* p = new PlotView(title);
    p->setObjectName(QStringLiteral("chart.%1").arg(c));
    p->setXTitle(tr("iteration"));
    if (!y_title.isEmpty()) p->setYTitle(y_title);
    charts_[c] = p;
    return p;
}

void MetricCharts::setSmoothing(double weight) {
    weight = std::clamp(weight, 0.0, 0.999);
    traces_.set_smoothing(weight);
    const QSignalBlocker block(smoothing_);
    smoothing_->setValue(static_cast<int>(std::lround(weight * 100)));
    smoothing_label_->setText(QString::number(weight, 'f', 2));
}

double MetricCharts::smoothing() const {
    return traces_.smoothing();
}

void MetricCharts::setLogLoss(bool on) {
    const QSignalBlocker block(log_loss_);
    log_loss_->setChecked(on);
    charts_[LossChart]->setLogY(on);
}

bool MetricCharts::logLoss() const {
    return charts_[LossChart]->logY();
}

void MetricCharts::refresh() {
    const double peak = peak_tflops(traces_);
    if (peak > 0 && peak != (mfu_factor_ > 0 ? 1 / mfu_factor_ : 0)) {
        mfu_factor_ = 1 / peak;
        // MFU = TFLOP/s / peak: a right axis with the same lines, in percent
        charts_[TflopsChart]->setRightMirror(tr("MFU (peak %1 TFLOP/s)").arg(format_value(peak)), 100 * mfu_factor_,
                                             QStringLiteral("%.1f%%"));
    }
    for (PlotView* p : charts_) p->refresh();
    if (!traces_.timings.empty()) {
        // the slowest rank of the newest step, each component (what bounds the iteration)
        double compute = 0, comm = 0, bubble = 0;
        for (const RankTiming& r : traces_.timings) {
            compute = std::max(compute, r.compute);
            comm = std::max(comm, r.communication);
            bubble = std::max(bubble, r.bubble);
        }
        step_bar_->setSegments({{tr("compute"), compute, compute_color()},
                                {tr("communication"), comm, communication_color()},
                                {tr("bubble"), bubble, bubble_color()}},
                               [](double s) { return format_duration(s); });
    } else if (!step_bar_->segments().empty()) {
        step_bar_->setSegments({}, [](double s) { return format_duration(s); });
    }
}

void MetricCharts::restyle() {
    for (PlotView* p : charts_) p->restyle();
}

}  // namespace mwb::app
