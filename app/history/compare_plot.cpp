#include "app/history/compare_plot.h"

#include "app/core/format.h"
#include "app/core/theme.h"
#include "app/live/history_loader.h"
#include "mwb/ipc/metrics.h"
#include "mwb/store/schema.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QSaveFile>
#include <QSlider>
#include <QTextStream>
#include <QVBoxLayout>

#include <algorithm>
#include <map>
#include <optional>

namespace mwb::app {

namespace {

/// A metric of the evaluations (val_loss): read from the evals table, drawn with markers.
bool is_eval_metric(const QString& name) {
    const ipc::Metric* m = ipc::find_metric(name.toStdString());
    return m && m->source == ipc::MetricSource::Eval;
}

constexpr int kDrawBuckets = 2000;       // about two per pixel column of a wide chart
constexpr int kExportBuckets = 1 << 20;  // the store returns every point up to this many

}  // namespace

void XMap::add(double iteration, double x) {
    if (!it_.empty() && iteration <= it_.back()) return;
    it_.push_back(iteration);
    x_.push_back(x);
}

double XMap::operator()(double iteration) const {
    if (it_.empty()) return iteration;
    if (iteration <= it_.front()) return x_.front();
    if (iteration >= it_.back()) return x_.back();
    const auto hi = static_cast<std::size_t>(std::upper_bound(it_.begin(), it_.end(), iteration) - it_.begin());
    const std::size_t lo = hi - 1;
    const double f = (iteration - it_[lo]) / (it_[hi] - it_[lo]);
    return x_[lo] + f * (x_[hi] - x_[lo]);
}

XMap tokens_map(store::Store& st, const std::string& uid) {
    store::SeriesQuery q;
    q.buckets = kDrawBuckets;
    XMap m;
    // consumed_tokens only grows with the iteration: a bucket's extremes sit at its first and last iteration
    for (const auto& b : st.series(uid, "consumed_tokens", q).buckets) {
        m.add(static_cast<double>(b.x_min), b.y_min);
        m.add(static_cast<double>(b.x_max), b.y_max);
    }
    return m;
}

XMap wall_time_map(store::Store& st, const std::string& uid, int anchors) {
    XMap m;
    for (const auto& p : st.wall_clock(uid, anchors)) m.add(static_cast<double>(p.iteration), p.seconds);
    return m;
}

ComparePlot::ComparePlot(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* bar = new QHBoxLayout;
    metric_ = new QComboBox;
    metric_->setObjectName(QStringLiteral("compareMetric"));
    for (const ipc::Metric* m : ipc::compared_metrics())  // the metric table's rows History compares
        metric_->addItem(tr(std::string(m->label).c_str()),
                         QString::fromLatin1(m->name.data(), static_cast<qsizetype>(m->name.size())));
    bar->addWidget(new QLabel(tr("Metric")));
    bar->addWidget(metric_);
    x_combo_ = new QComboBox;
    x_combo_->setObjectName(QStringLiteral("compareX"));
    x_combo_->addItem(tr("Iteration"));
    x_combo_->addItem(tr("Trained tokens"));
    x_combo_->addItem(tr("Wall time"));
    bar->addWidget(new QLabel(tr("against")));
    bar->addWidget(x_combo_);
    log_ = new QCheckBox(tr("Log scale"));
    bar->addWidget(log_);
    bar->addWidget(new QLabel(tr("Smoothing")));
    smoothing_ = new QSlider(Qt::Horizontal);
    smoothing_->setObjectName(QStringLiteral("compareSmoothing"));
    smoothing_->setRange(0, 99);
    smoothing_->setMaximumWidth(140);
    smoothing_->setToolTip(tr("Exponential moving average (TensorBoard's debiased smoothing); raw lines faint behind"));
    bar->addWidget(smoothing_);
    bar->addStretch(1);
    layout->addLayout(bar);
    plot_ = new PlotView(tr("Training loss"));
    plot_->setObjectName(QStringLiteral("comparePlot"));
    plot_->setEmptyText(tr("Select runs in the table to compare their curves"));
    plot_->setLegendAlways(true);  // each run's name in its colour
    layout->addWidget(plot_, 1);
    note_ = new QLabel;
    note_->setWordWrap(true);
    note_->setForegroundRole(QPalette::PlaceholderText);
    layout->addWidget(note_);

    connect(metric_, &QComboBox::currentIndexChanged, this, [this] { reloadData(); });
    connect(x_combo_, &QComboBox::currentIndexChanged, this, [this](int i) { setXAxis(static_cast<CompareX>(i)); });
    connect(log_, &QCheckBox::toggled, this, [this](bool on) { plot_->setLogY(on); });
    connect(plot_, &PlotView::logToggled, log_, [this](bool on) {
        const QSignalBlocker block(log_);
        log_->setChecked(on);
    });
    connect(smoothing_, &QSlider::valueChanged, this, [this](int v) {
        plot_->setSmoothing(v / 100.0);
        plot_->refresh();
    });
    smoothing_->setValue(60);
    updateTitles();
}

void ComparePlot::setStore(store::Store* store) {
    store_ = store;
    reloadData();
}

void ComparePlot::setRuns(std::vector<CompareRun> runs) {
    runs_ = std::move(runs);
    reloadData();
}

void ComparePlot::setMetric(const QString& metric) {
    const int i = metric_->findData(metric);
    if (i >= 0) metric_->setCurrentIndex(i);  // reloads
}

QString ComparePlot::metric() const {
    return metric_->currentData().toString();
}

void ComparePlot::setXAxis(CompareX x) {
    if (x_combo_->currentIndex() != static_cast<int>(x)) {
        x_combo_->setCurrentIndex(static_cast<int>(x));  // comes back here
        return;
    }
    x_ = x;
    reloadData();
}

void ComparePlot::setLogY(bool on) {
    log_->setChecked(on);
}

std::vector<PlotPoint> ComparePlot::points(const std::string& uid, int buckets, bool* raw) const {
    if (raw) *raw = true;
    if (is_eval_metric(metric())) {
        // the metric row's field of the eval record ("lm_loss" for val_loss)
        const std::string key(ipc::find_metric(metric().toStdString())->key);
        std::vector<PlotPoint> out;
        for (const auto& e : store_->evals(uid))
            if (const auto it = e.body.find(key); it != e.body.end() && it->is_number())
                out.push_back({static_cast<double>(e.iteration), it->get<double>()});
        return out;
    }
    store::SeriesQuery q;
    q.buckets = buckets;
    const auto s = store_->series(uid, metric().toStdString(), q);
    if (raw) *raw = s.raw;
    return series_points(s);
}

void ComparePlot::reloadData() {
    plot_->clearLines();
    traces_.assign(runs_.size(), Trace{});
    time_unit_ = 1;
    if (!store_) {
        plot_->refresh();
        return;
    }
    std::vector<XMap> maps(runs_.size());
    double max_seconds = 0;
    for (std::size_t i = 0; i < runs_.size(); ++i) {
        try {
            if (x_ == CompareX::Tokens) maps[i] = tokens_map(*store_, runs_[i].uid);
            if (x_ == CompareX::WallTime) {
                maps[i] = wall_time_map(*store_, runs_[i].uid);
                if (!maps[i].empty()) max_seconds = std::max(max_seconds, maps[i](1e300));
            }
            for (const PlotPoint& p : points(runs_[i].uid, kDrawBuckets)) traces_[i].append(p.x, p.y);
        } catch (const std::exception& e) {
            emit message(tr("Cannot read %1: %2").arg(runs_[i].title, QString::fromStdString(e.what())));
        }
    }
    if (x_ == CompareX::WallTime) time_unit_ = max_seconds > 2 * 3600 ? 3600 : (max_seconds > 120 ? 60 : 1);
    if (x_ != CompareX::Iteration) {
        for (std::size_t i = 0; i < runs_.size(); ++i) {
            Trace mapped;
            for (std::size_t k = 0; k < traces_[i].size(); ++k)
                mapped.append(maps[i](traces_[i].x[k]) / time_unit_, traces_[i].y[k]);
            traces_[i] = std::move(mapped);
        }
    }
    for (std::size_t i = 0; i < runs_.size(); ++i) {
        const bool sparse = is_eval_metric(metric());
        PlotView::LineStyle style = themed_line(runs_[i].color >= 0 ? runs_[i].color : static_cast<int>(i), 1.8);
        style.markers = sparse;
        const int line = plot_->addLine(runs_[i].title, style);
        plot_->setTrace(line, &traces_[i]);
    }
    updateTitles();
    plot_->followAll();
}

QString ComparePlot::xColumn() const {
    switch (x_) {
        case CompareX::Tokens:
            return QStringLiteral("tokens");
        case CompareX::WallTime:
            return QStringLiteral("wall_time_s");
        default:
            return {};
    }
}

void ComparePlot::updateTitles() {
    plot_->chart()->setTitle(metric_->currentText());
    switch (x_) {
        case CompareX::Iteration:
            plot_->setXTitle(tr("iteration"));
            note_->clear();
            break;
        case CompareX::Tokens:
            plot_->setXTitle(tr("trained tokens"));
            note_->setText(tr("Tokens: each step record's consumed_tokens, interpolated between records."));
            break;
        case CompareX::WallTime: {
            const QString unit = time_unit_ == 3600 ? tr("hours") : time_unit_ == 60 ? tr("minutes") : tr("seconds");
            plot_->setXTitle(tr("wall time (%1)").arg(unit));
            // the caption names the axis' unit (it said seconds under a minutes axis)
            note_->setText(tr("Wall time: %1 since the run was created, from each step record's timestamp "
                              "(pauses, evaluations and restarts included).")
                               .arg(unit));
            break;
        }
    }
}

QString all_metrics_csv(store::Store& st, const std::vector<CompareRun>& runs) {
    QString out;
    QTextStream s(&out);
    s.setRealNumberPrecision(17);
    const auto metrics = store::step_metrics();
    s << "run,name,iteration";
    for (std::string_view m : metrics) s << ',' << QString::fromLatin1(m.data(), static_cast<qsizetype>(m.size()));
    s << '\n';
    for (const CompareRun& r : runs) {
        // iteration -> one value per metric (the last record of an iteration wins, as in the store's series)
        std::map<int64_t, std::vector<std::optional<double>>> rows;
        for (std::size_t k = 0; k < metrics.size(); ++k) {
            store::SeriesQuery q;
            q.buckets = kExportBuckets;
            for (const auto& b : st.series(r.uid, std::string(metrics[k]), q).buckets) {
                auto& row = rows[b.x_min];
                row.resize(metrics.size());
                row[k] = b.y_mean;
            }
        }
        QString name = r.title;
        name.replace(QLatin1Char('"'), QStringLiteral("\"\""));
        for (const auto& [iteration, values] : rows) {
            s << QString::fromStdString(r.uid) << ",\"" << name << "\"," << static_cast<qlonglong>(iteration);
            for (const auto& v : values) {
                s << ',';
                if (v) s << *v;
            }
            s << '\n';
        }
    }
    return out;
}

QString ComparePlot::csv() const {
    QString out;
    QTextStream s(&out);
    s.setRealNumberPrecision(17);
    const QString xcol = xColumn();
    s << "run,name,iteration";
    if (!xcol.isEmpty()) s << ',' << xcol;
    s << ',' << metric() << '\n';
    if (!store_) return out;
    for (const CompareRun& r : runs_) {
        XMap map;
        if (x_ == CompareX::Tokens) map = tokens_map(*store_, r.uid);
        if (x_ == CompareX::WallTime) map = wall_time_map(*store_, r.uid);
        QString name = r.title;
        name.replace(QLatin1Char('"'), QStringLiteral("\"\""));
        for (const PlotPoint& p : points(r.uid, kExportBuckets)) {
            s << QString::fromStdString(r.uid) << ",\"" << name << "\"," << static_cast<qlonglong>(p.x);
            if (!xcol.isEmpty()) s << ',' << map(p.x);
            s << ',' << p.y << '\n';
        }
    }
    return out;
}

bool ComparePlot::exportCsv(const QString& file, QString* error) const {
    QSaveFile f(file);
    QString text;
    try {
        text = csv();
    } catch (const std::exception& e) {
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
    if (!f.open(QIODevice::WriteOnly | QIODevice::Text) || f.write(text.toUtf8()) < 0 || !f.commit()) {
        if (error) *error = tr("cannot write %1: %2").arg(file, f.errorString());
        return false;
    }
    return true;
}

bool ComparePlot::exportPng(const QString& file, QString* error) {
    const QImage img = plot_->renderImage(QSize(std::max(800, plot_->width()), std::max(500, plot_->height())));
    if (!img.save(file, "PNG")) {
        if (error) *error = tr("cannot write %1").arg(file);
        return false;
    }
    return true;
}

}  // namespace mwb::app
