#include "app/monitor/monitor_view.h"

#include "app/core/format.h"
#include "app/monitor/control_bar.h"
#include "app/monitor/event_log_model.h"
#include "app/monitor/metric_charts.h"
#include "app/monitor/rank_grid.h"
#include "app/monitor/samples_panel.h"
#include "app/monitor/status_line.h"
#include "app/plot/memory_bars.h"

#include <QComboBox>
#include <QElapsedTimer>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QScrollArea>
#include <QScrollBar>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <filesystem>
#include <map>

namespace mwb::app {

namespace {

/// More ranks than this and the memory bars show each pipeline stage's fullest rank instead.
constexpr std::size_t kMaxMemoryBars = 32;

bool is_run_dir(const std::string& endpoint) {
    return endpoint.rfind("tcp://", 0) != 0 && endpoint.rfind("ipc://", 0) != 0 && endpoint.rfind("inproc://", 0) != 0;
}

QGroupBox* group(const QString& title, QWidget* content, QWidget* header = nullptr) {
    auto* box = new QGroupBox(title);
    auto* l = new QVBoxLayout(box);
    l->setContentsMargins(4, 4, 4, 4);
    if (header) l->addWidget(header);
    l->addWidget(content, 1);
    return box;
}

}  // namespace

MonitorView::MonitorView(QWidget* parent) : QWidget(parent) {
    live_ = new LiveRun(this);
    auto* layout = new QVBoxLayout(this);

    auto* top = new QHBoxLayout;
    status_ = new StatusLine;
    status_->setObjectName(QStringLiteral("statusLine"));
    top->addWidget(status_, 1);
    controls_ = new ControlBar;
    controls_->setObjectName(QStringLiteral("controlBar"));
    top->addWidget(controls_);
    layout->addLayout(top);

    auto* split = new QSplitter(Qt::Horizontal);
    charts_ = new MetricCharts(live_->traces());
    split->addWidget(charts_);

    auto* side = new QSplitter(Qt::Vertical);
    memory_ = new MemoryBars;
    memory_->setObjectName(QStringLiteral("memoryBars"));
    memory_->setEmptyText(tr("No memory sample yet"));
    auto* memory_scroll = new QScrollArea;
    memory_scroll->setWidgetResizable(true);
    memory_scroll->setFrameShape(QFrame::NoFrame);
    memory_scroll->setWidget(memory_);
    side->addWidget(group(tr("Memory per rank (peak by category, now ▏, predicted ◆)"), memory_scroll));

    grid_ = new RankGrid;
    grid_->setObjectName(QStringLiteral("rankGrid"));
    grid_metric_ = new QComboBox;
    grid_metric_->addItem(tr("Colour by peak memory"));
    grid_metric_->addItem(tr("Colour by step time"));
    connect(grid_metric_, &QComboBox::currentIndexChanged, this,
            [this](int i) { grid_->setMetric(i == 0 ? RankGrid::Metric::Memory : RankGrid::Metric::StepTime); });
    side->addWidget(group(tr("Ranks (TP × PP × DP)"), grid_, grid_metric_));

    events_ = new EventLogModel(live_->traces(), this);
    event_view_ = new QTableView;
    event_view_->setObjectName(QStringLiteral("eventLog"));
    event_view_->setModel(events_);
    event_view_->verticalHeader()->hide();
    event_view_->horizontalHeader()->setStretchLastSection(true);
    event_view_->setSelectionBehavior(QAbstractItemView::SelectRows);
    event_view_->setWordWrap(false);
    event_view_->setAlternatingRowColors(true);
    event_view_->verticalHeader()->setDefaultSectionSize(event_view_->fontMetrics().height() + 6);
    samples_ = new SamplesPanel;  // what the model writes as it trains
    samples_->setObjectName(QStringLiteral("samplesPanel"));
    log_tabs_ = new QTabWidget;
    log_tabs_->setObjectName(QStringLiteral("logTabs"));
    log_tabs_->addTab(event_view_, tr("Events"));
    log_tabs_->addTab(samples_, tr("Samples"));
    side->addWidget(log_tabs_);
    side->setStretchFactor(0, 2);
    side->setStretchFactor(1, 1);
    side->setStretchFactor(2, 2);
    split->addWidget(side);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    layout->addWidget(split, 1);

    connect(live_, &LiveRun::updated, this, &MonitorView::onUpdated);
    connect(live_, &LiveRun::attachFailed, this, [this](const QString& m) {
        emit message(tr("Cannot follow the run: %1").arg(m));
        updateLink();
    });
    connect(controls_, &ControlBar::replied, this, [this](const QString& action, bool ok, const QString& text) {
        if (action == QLatin1String("status")) return;  // the bar's own question; its answer shows there
        emit message(ok ? tr("%1: %2").arg(action, text) : tr("%1 failed: %2").arg(action, text));
    });
    // the link changes without data (heartbeats, reconnects): a slow timer, not per message
    auto* link_timer = new QTimer(this);
    link_timer->setInterval(500);
    connect(link_timer, &QTimer::timeout, this, &MonitorView::updateLink);
    link_timer->start();
    redraw();
}

MonitorView::~MonitorView() {
    live_->detach();
}

void MonitorView::attach(const AttachOptions& options) {
    ended_shown_ = false;
    live_->attach(options);  // clears the traces; the store's history arrives first
    charts_->resetView();    // not the last run's zoom, x range or MFU axis
    events_->sync(0, true);
    syncSamples(true);
    ControlTarget target;
    if (is_run_dir(options.endpoint)) target.run_dir = options.endpoint;
    target.token_file = options.token_file;
    target.curve = options.curve;
    controls_->setTarget(target);
    redraw();
    emit message(tr("Watching %1").arg(QString::fromStdString(options.endpoint)));
}

void MonitorView::detach() {
    live_->detach();
    redraw();
}

void MonitorView::setPrediction(std::vector<double> peak_bytes_per_rank, double capacity_bytes) {
    predicted_ = std::move(peak_bytes_per_rank);
    capacity_ = std::max(0.0, capacity_bytes);
    grid_->setCapacity(capacity_);
    updateMemory();
}

void MonitorView::noteEnded(const RunEnd& end) {
    live_->noteEnded(end);  // emits updated()
}

void MonitorView::onUpdated(std::size_t new_events, bool reset) {
    const bool was_empty = events_->rowCount() == 0;
    if (reset) charts_->resetView();  // another run on the same endpoint
    events_->sync(new_events, reset);
    syncSamples(reset);
    if (was_empty && events_->rowCount() > 0)  // size the short columns once; the detail takes the rest
        for (int c = EventLogModel::Time; c < EventLogModel::Detail; ++c) event_view_->resizeColumnToContents(c);
    if (new_events > 0 && !reset) {  // follow the log while the user is at its end
        auto* bar = event_view_->verticalScrollBar();
        if (bar->value() >= bar->maximum() - 3 * event_view_->verticalHeader()->defaultSectionSize())
            event_view_->scrollToBottom();
    }
    QElapsedTimer timer;
    timer.start();
    redraw();
    // keep the GUI thread at most about a third busy drawing (preparing the charts here, painting them
    // afterwards): a slow machine or huge runs redraw less often, and a click finds the thread free
    const double ms = static_cast<double>(timer.nsecsElapsed()) / 1e6 + charts_->lastPaintMs();
    live_->setRedrawInterval(std::clamp(static_cast<int>(3 * ms), 33, 500));
    const RunTraces& t = live_->traces();
    if (t.end && !ended_shown_) {
        ended_shown_ = true;
        emit message(
            tr("Run %1 ended: %2").arg(QString::fromStdString(t.run_id), QString::fromStdString(t.end->status)));
    } else if (!t.end) {
        ended_shown_ = false;
    }
}

void MonitorView::syncSamples(bool reset) {
    const auto& samples = live_->traces().samples;
    samples_->sync(samples, reset);
    const QString title = samples.empty() ? tr("Samples") : tr("Samples (%1)").arg(samples.size());
    if (log_tabs_->tabText(1) != title) log_tabs_->setTabText(1, title);  // not 30 relayouts a second
}

void MonitorView::redraw() {
    charts_->refresh();
    updateMemory();
    grid_->setCells(rank_cells(live_->traces()));
    updateLink();
}

void MonitorView::updateLink() {
    const RunTraces& t = live_->traces();
    const LinkState link = live_->link();
    if (!link.gone_reason.empty() && !t.end && t.start) {  // marked interrupted in the store for its silence
        RunEnd end;
        end.status = "interrupted";
        end.reason = link.gone_reason;
        end.iteration = t.last_step.iteration;
        end.time = link.last_message;
        live_->noteEnded(end);  // emits updated(), which comes back here
        return;
    }
    status_->update(t, link, live_->attached(), controls_->paused());
    ControlTarget target;
    const std::string& endpoint = live_->options().endpoint;
    if (!endpoint.empty() && is_run_dir(endpoint)) {
        target.run_dir = endpoint;
    } else {
        target.endpoint = link.control;
        target.token_file = live_->options().token_file;
    }
    target.curve = live_->options().curve;
    controls_->setTarget(target);
    const bool running = live_->attached() && t.start.has_value() && !t.end && link.state != "ended";
    controls_->setRunning(running);
}

void MonitorView::updateMemory() {
    const RunTraces& t = live_->traces();
    const auto predicted = [this](int rank) {
        return rank >= 0 && static_cast<std::size_t>(rank) < predicted_.size()
                   ? predicted_[static_cast<std::size_t>(rank)]
                   : -1.0;
    };
    std::vector<const RankMemory*> shown;
    if (t.memory.size() <= kMaxMemoryBars) {
        for (const RankMemory& m : t.memory) shown.push_back(&m);
    } else {  // a large world: each pipeline stage's fullest rank (the grid shows them all)
        std::map<int, const RankMemory*> worst;
        std::map<int, int> stage_of;
        for (const RankCell& c : rank_cells(t)) stage_of[c.rank] = c.pp;
        for (const RankMemory& m : t.memory) {
            auto& w = worst[stage_of[m.rank]];
            if (!w || m.peak > w->peak) w = &m;
        }
        for (const auto& [stage, m] : worst) shown.push_back(m);
    }
    std::vector<MemoryBar> bars;
    for (const RankMemory* m : shown) {
        MemoryBar b;
        b.label =
            t.memory.size() <= kMaxMemoryBars ? tr("rank %1").arg(m->rank) : tr("rank %1 (stage max)").arg(m->rank);
        const bool split =
            std::any_of(m->peak_by_category.begin(), m->peak_by_category.end(), [](double v) { return v > 0; });
        if (split) {
            b.segments = stack_memory(m->current, m->peak_by_category, m->peak);
        } else {
            b.segments[3] = m->peak;  // no categories reported: the whole peak in one colour
        }
        b.current = m->allocated;
        b.predicted = predicted(m->rank);
        b.tooltip = tr("rank %1: now %2, peak %3, reserved %4%5")
                        .arg(m->rank)
                        .arg(format_bytes(m->allocated), format_bytes(m->peak), format_bytes(m->reserved),
                             b.predicted >= 0 ? tr(", predicted peak %1").arg(format_bytes(b.predicted)) : QString());
        bars.push_back(std::move(b));
    }
    if (bars.empty() && !predicted_.empty()) {  // before the first sample: the prediction alone
        for (std::size_t r = 0; r < std::min(predicted_.size(), kMaxMemoryBars); ++r) {
            MemoryBar b;
            b.label = tr("rank %1").arg(r);
            b.predicted = predicted_[r];
            b.tooltip = tr("rank %1: predicted peak %2").arg(r).arg(format_bytes(predicted_[r]));
            bars.push_back(std::move(b));
        }
    }
    memory_->setBars(std::move(bars), capacity_, 0);
}

}  // namespace mwb::app
