#include "app/monitor/metric_charts.h"

#include "app/core/format.h"
#include "app/core/theme.h"
#include "app/plot/stacked_bar.h"
#include "mwb/ipc/metrics.h"

#include <QCheckBox>
#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QToolButton>
#include <QSlider>
#include <QVBoxLayout>

#include <algorithm>
#include <array>
#include <cmath>

namespace mwb::app {

namespace {

// A built-in series' texts from its metric-table row (ipc/metrics.cpp: title, value axis, legend line).
QString text(std::string_view s) {
    return QObject::tr(std::string(s).c_str());
}
QString chart_title(SeriesId s) {
    return text(ipc::chart_title(ipc::metric_of_series(s)));
}
QString axis_title(SeriesId s) {
    return text(ipc::metric_of_series(s).chart.axis);
}
QString line_name(SeriesId s) {
    return text(ipc::chart_line(ipc::metric_of_series(s)));
}

}  // namespace

const std::vector<SeriesId>& MetricCharts::seriesOf(Chart c) {
    using S = SeriesId;
    static const std::array<std::vector<SeriesId>, ChartCount> drawn = {{
        {S::Loss, S::ValLoss},                      // LossChart
        {S::Lr},                                    // LrChart
        {S::GradNorm},                              // GradNormChart
        {S::LossScale},                             // LossScaleChart
        {S::TokensPerSec},                          // ThroughputChart
        {S::Tflops},                                // TflopsChart
        {S::Compute, S::Communication, S::Bubble},  // StepTimeChart
        {S::IterationTime},                         // IterationTimeChart
    }};
    return drawn[static_cast<std::size_t>(c)];
}

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

    // controls of every chart: smoothing, x-axis; the loss chart's log scale (each chart has its own: L)
    auto* controls = new QHBoxLayout;
    controls->addWidget(new QLabel(tr("Smoothing")));
    smoothing_ = new QSlider(Qt::Horizontal);
    smoothing_->setObjectName(QStringLiteral("smoothing"));
    smoothing_->setRange(0, 99);
    smoothing_->setMaximumWidth(160);
    smoothing_->setToolTip(tr("Exponential moving average of every chart (TensorBoard's debiased smoothing); the "
                              "raw line stays faint behind"));
    controls->addWidget(smoothing_);
    smoothing_label_ = new QLabel;
    smoothing_label_->setMinimumWidth(32);
    controls->addWidget(smoothing_label_);
    controls->addSpacing(12);
    controls->addWidget(new QLabel(tr("X-axis")));
    x_combo_ = new QComboBox;
    x_combo_->setObjectName(QStringLiteral("xAxis"));
    x_combo_->addItems({tr("Iteration"), tr("Trained tokens"), tr("Wall time")});
    controls->addWidget(x_combo_);
    log_loss_ = new QCheckBox(tr("Log loss"));
    log_loss_->setObjectName(QStringLiteral("logLoss"));
    log_loss_->setToolTip(tr("Log scale of the loss chart (every chart: press L over it, or right-click)"));
    controls->addWidget(log_loss_);
    controls->addStretch(1);
    auto* add_button = new QToolButton;
    add_button->setObjectName(QStringLiteral("addChart"));
    add_button->setText(tr("Add chart"));
    add_button->setToolTip(tr("Chart any metric the run records (per rank too); right-click a chart to move or remove it"));
    add_button->setPopupMode(QToolButton::InstantPopup);
    add_menu_ = new QMenu(add_button);
    add_button->setMenu(add_menu_);
    connect(add_menu_, &QMenu::aboutToShow, this, [this] {
        add_menu_->clear();
        QMenu* ranks = nullptr;
        for (const QString& m : availableMetrics()) {
            QMenu* into = add_menu_;
            if (m.startsWith(QLatin1String("rank"))) {
                if (!ranks) ranks = add_menu_->addMenu(tr("Per rank"));
                into = ranks;
            }
            into->addAction(m, this, [this, m] { addChart(m); });
        }
        if (add_menu_->isEmpty()) add_menu_->addAction(tr("(no other metric recorded yet)"))->setEnabled(false);
    });
    controls->addWidget(add_button);
    outer->addLayout(controls);

    auto* grid = new QGridLayout;
    grid->setSpacing(4);
    outer->addLayout(grid, 1);

    // titles, axes and legend names are the metric table's (seriesOf: which rows each chart draws)
    PlotView* loss = add(LossChart);
    const int train_line = loss->addLine(line_name(SeriesId::Loss), themed_line(0, 2.0));
    PlotView::LineStyle val_style = themed_line(1, 1.8);
    val_style.markers = true;
    val_style.smooth = false;  // a few points, each an average already
    const int val_line = loss->addLine(line_name(SeriesId::ValLoss), val_style);
    loss->setTrace(train_line, &traces_[SeriesId::Loss]);
    loss->setTrace(val_line, &traces_[SeriesId::ValLoss]);
    loss->setEmptyText(tr("Waiting for the first step…"));

    const auto single = [this](Chart c, int color, bool smooth = true) {
        PlotView* p = add(c);
        PlotView::LineStyle style = themed_line(color, 1.6);
        style.smooth = smooth;
        const SeriesId s = seriesOf(c).front();
        p->setTrace(p->addLine(line_name(s), style), &traces_[s]);
        return p;
    };
    single(LrChart, 2, false);  // a schedule: exact, not noisy
    single(GradNormChart, 3);
    single(LossScaleChart, 4, false);
    single(ThroughputChart, 5);
    single(IterationTimeChart, 7);
    single(TflopsChart, 6);

    // step time: the slowest rank's compute / communication / bubble, stacked, and the newest step
    auto* step_box = new QWidget;
    auto* step_layout = new QVBoxLayout(step_box);
    step_layout->setContentsMargins(0, 0, 0, 0);
    PlotView* step = new PlotView(chart_title(SeriesId::Compute));
    charts_[StepTimeChart] = step;
    step->setObjectName(QStringLiteral("chart.step"));
    step->setYTitle(axis_title(SeriesId::Compute));
    step->setTrace(step->addArea(line_name(SeriesId::Compute), compute_color()), &traces_[SeriesId::Compute]);
    step->setTrace(step->addArea(line_name(SeriesId::Communication), communication_color()),
                   &traces_[SeriesId::Communication]);
    step->setTrace(step->addArea(line_name(SeriesId::Bubble), bubble_color()), &traces_[SeriesId::Bubble]);
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
    custom_grid_ = new QGridLayout;
    custom_grid_->setSpacing(4);
    for (int c = 0; c < 3; ++c) custom_grid_->setColumnStretch(c, 1);
    outer->addLayout(custom_grid_);
    grid->setRowStretch(0, 3);
    grid->setRowStretch(1, 2);
    grid->setRowStretch(2, 2);
    connect(smoothing_, &QSlider::valueChanged, this, [this](int v) {
        setSmoothing(v / 100.0);
        for (PlotView* p : charts_) p->refresh();
    });
    connect(log_loss_, &QCheckBox::toggled, this, [this](bool on) { setLogLoss(on); });
    connect(charts_[LossChart], &PlotView::logToggled, this, [this](bool on) {
        const QSignalBlocker block(log_loss_);
        log_loss_->setChecked(on);
    });
    connect(x_combo_, &QComboBox::currentIndexChanged, this, [this](int i) { setXAxis(static_cast<XAxis>(i)); });
    // one crosshair over every chart: where the mouse is on one, the values of all at that x
    for (PlotView* p : charts_)
        connect(p, &PlotView::hovered, this, [this, p](std::optional<double> x) {
            for (PlotView* other : charts_)
                if (other != p) other->setCrosshair(x);
            for (const Custom& c : custom_) c.view->setCrosshair(x);
        });
    setSmoothing(0.6);  // TensorBoard's default
}

PlotView* MetricCharts::add(Chart c) {
    const SeriesId first = seriesOf(c).front();
    auto* p = new PlotView(chart_title(first));
    p->setObjectName(QStringLiteral("chart.%1").arg(c));
    p->setXTitle(tr("iteration"));
    if (const QString y = axis_title(first); !y.isEmpty()) p->setYTitle(y);
    charts_[c] = p;
    return p;
}

void MetricCharts::setSmoothing(double weight) {
    weight = std::clamp(weight, 0.0, 0.99);
    for (PlotView* p : charts_) p->setSmoothing(weight);
    for (const Custom& c : custom_) c.view->setSmoothing(weight);
    const QSignalBlocker block(smoothing_);
    smoothing_->setValue(static_cast<int>(std::lround(weight * 100)));
    smoothing_label_->setText(QString::number(weight, 'f', 2));
}

double MetricCharts::smoothing() const {
    return charts_[LossChart]->smoothing();
}

void MetricCharts::setXAxis(XAxis x) {
    x_ = x;
    const QSignalBlocker block(x_combo_);
    x_combo_->setCurrentIndex(static_cast<int>(x));
    applyXAxis();
    for (PlotView* p : charts_) p->refresh();
}

void MetricCharts::applyXAxis() {
    // tokens and wall time through the run's own iteration -> tokens / time series
    const Trace* map = x_ == XAxis::Tokens ? &traces_[SeriesId::Tokens]
                       : x_ == XAxis::WallTime ? &traces_[SeriesId::Time]
                                               : nullptr;
    const Trace& time = traces_[SeriesId::Time];
    const double origin = x_ == XAxis::WallTime ? (traces_.start && traces_.start->time > 0 ? traces_.start->time
                                                   : time.empty() ? 0 : time.y.front())
                                                : 0;
    // wall time in minutes once the run is longer than a few of them (the title says which)
    const double span = time.empty() ? 0 : time.y.back() - origin;
    const double scale = x_ == XAxis::WallTime && span > 600 ? 60 : 1;
    const QString title = x_ == XAxis::Tokens     ? tr("trained tokens")
                          : x_ == XAxis::WallTime ? (scale == 60 ? tr("wall time (min)") : tr("wall time (s)"))
                                                  : tr("iteration");
    std::vector<PlotView*> all(std::begin(charts_), std::end(charts_));
    for (const Custom& c : custom_) all.push_back(c.view);
    for (PlotView* p : all) {
        p->setXMap(map, origin);
        p->setXScale(scale);
        if (p->xTitle() != title) p->setXTitle(title);
    }
}

QStringList MetricCharts::availableMetrics() const {
    QStringList out;
    for (const auto& [k, t] : traces_.metrics) out << QString::fromStdString(k);
    std::stable_sort(out.begin(), out.end(), [](const QString& a, const QString& b) {
        return a.startsWith(QLatin1String("rank")) < b.startsWith(QLatin1String("rank"));  // run-wide first
    });
    return out;
}

void MetricCharts::addChart(const QString& metric) {
    Custom c;
    c.metric = metric;
    c.view = new PlotView(metric);
    c.view->setObjectName(QStringLiteral("chart.%1").arg(metric));
    c.view->setXTitle(charts_[LossChart]->xTitle());
    c.view->addLine(metric, themed_line(static_cast<int>(custom_.size()) % 10, 1.6));
    c.view->setSmoothing(smoothing());
    c.view->setMinimumHeight(180);
    PlotView* view = c.view;
    auto* left = new QAction(tr("Move left"), view);
    auto* right = new QAction(tr("Move right"), view);
    auto* remove = new QAction(tr("Remove chart"), view);
    const auto index = [this, view] {
        for (std::size_t i = 0; i < custom_.size(); ++i)
            if (custom_[i].view == view) return static_cast<int>(i);
        return -1;
    };
    connect(left, &QAction::triggered, this, [this, index] { moveChart(index(), -1); });
    connect(right, &QAction::triggered, this, [this, index] { moveChart(index(), 1); });
    connect(remove, &QAction::triggered, this, [this, index] { removeChart(index()); });
    for (QAction* a : {left, right, remove}) view->addMenuAction(a);
    connect(view, &PlotView::hovered, this, [this, view](std::optional<double> x) {
        for (PlotView* other : charts_) other->setCrosshair(x);
        for (const Custom& o : custom_)
            if (o.view != view) o.view->setCrosshair(x);
    });
    custom_.push_back(c);
    applyXAxis();
    bindCustom();
    layoutCustom();
    view->refresh();
    emit arrangementChanged();
}

void MetricCharts::removeChart(int index) {
    if (index < 0 || index >= static_cast<int>(custom_.size())) return;
    custom_grid_->removeWidget(custom_[static_cast<std::size_t>(index)].view);
    custom_[static_cast<std::size_t>(index)].view->deleteLater();
    custom_.erase(custom_.begin() + index);
    layoutCustom();
    emit arrangementChanged();
}

void MetricCharts::moveChart(int index, int delta) {
    const int to = index + delta;
    if (index < 0 || to < 0 || index >= static_cast<int>(custom_.size()) || to >= static_cast<int>(custom_.size()))
        return;
    std::swap(custom_[static_cast<std::size_t>(index)], custom_[static_cast<std::size_t>(to)]);
    layoutCustom();
    emit arrangementChanged();
}

QStringList MetricCharts::customCharts() const {
    QStringList out;
    for (const Custom& c : custom_) out << c.metric;
    return out;
}

void MetricCharts::setCustomCharts(const QStringList& metrics) {
    const QSignalBlocker block(this);
    while (!custom_.empty()) removeChart(static_cast<int>(custom_.size()) - 1);
    for (const QString& m : metrics)
        if (!m.isEmpty()) addChart(m);
}

PlotView* MetricCharts::customChart(int index) const {
    return index >= 0 && index < static_cast<int>(custom_.size()) ? custom_[static_cast<std::size_t>(index)].view
                                                                  : nullptr;
}

void MetricCharts::layoutCustom() {
    for (const Custom& c : custom_) custom_grid_->removeWidget(c.view);
    for (std::size_t i = 0; i < custom_.size(); ++i)
        custom_grid_->addWidget(custom_[i].view, static_cast<int>(i / 3), static_cast<int>(i % 3));
}

void MetricCharts::bindCustom() {
    // traces_.metrics is rebuilt for a new run: look each chart's trace up again (a map lookup)
    for (Custom& c : custom_) {
        const auto it = traces_.metrics.find(c.metric.toStdString());
        const Trace* t = it == traces_.metrics.end() ? nullptr : &it->second;
        if (t != c.bound) {
            c.bound = t;
            c.view->setTrace(0, t);
        }
    }
}

void MetricCharts::resetView() {
    mfu_factor_ = 0;
    applyXAxis();
    for (PlotView* p : charts_) p->resetView();
    for (const Custom& c : custom_) c.view->resetView();
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
        charts_[TflopsChart]->setRightMirror(
            tr("%1 (peak %2 TFLOP/s)").arg(text(ipc::metric_of_series(SeriesId::Mfu).label), format_value(peak)),
            100 * mfu_factor_, QStringLiteral("%"));
    }
    if (x_ == XAxis::WallTime) applyXAxis();  // seconds become minutes as the run grows
    bindCustom();
    for (PlotView* p : charts_) p->refresh();
    for (const Custom& c : custom_) c.view->refresh();
    if (!traces_.timings.empty()) {
        // the slowest rank of the newest step, each component (what bounds the iteration)
        double compute = 0, comm = 0, bubble = 0;
        for (const RankTiming& r : traces_.timings) {
            compute = std::max(compute, r.compute);
            comm = std::max(comm, r.communication);
            bubble = std::max(bubble, r.bubble);
        }
        step_bar_->setSegments({{line_name(SeriesId::Compute), compute, compute_color()},
                                {line_name(SeriesId::Communication), comm, communication_color()},
                                {line_name(SeriesId::Bubble), bubble, bubble_color()}},
                               [](double s) { return format_duration(s); });
    } else if (!step_bar_->segments().empty()) {
        step_bar_->setSegments({}, [](double s) { return format_duration(s); });
    }
}

double MetricCharts::lastPaintMs() const {
    double ms = 0;
    for (PlotView* p : charts_) ms += p->lastPaintMs();
    for (const Custom& c : custom_) ms += c.view->lastPaintMs();
    return ms;
}

void MetricCharts::restyle() {
    for (PlotView* p : charts_) p->restyle();
    for (const Custom& c : custom_) c.view->restyle();
}

}  // namespace mwb::app
