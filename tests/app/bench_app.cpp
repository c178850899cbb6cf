// mwb-app-bench: the app's costs that users feel (docs/performance.md, "App"); a benchmark, not a test.
//   1. The Monitor following a real mwb-train run that logs every iteration as fast as it can
//      (a tiny model: hundreds of iterations/s): the GUI process's CPU (utime + stime of
//      /proc/self/stat over the run, in % of one core), the iterations/s reached, and how long a
//      click waits: mouse presses posted to a chart every 50 ms, delay from posting to delivery.
//   2. The same Monitor showing the run once it is over, for 5 s: the CPU an idle screen costs.
//   3. History overlaying 10 runs of 1M steps each (a store made here): reading and drawing the
//      comparison, and redrawing it (zoom), median of 9.
//   mwb-app-bench [--skip-history] [--iterations N (0: skip the Monitor)] [--store FILE (kept, reused)]
#include "history/compare_plot.h"
#include "live/live_run.h"
#include "monitor/metric_charts.h"
#include "monitor/monitor_view.h"
#include "mwb/ipc/message.h"
#include "mwb/store/store.h"
#include "plot/plot_view.h"

#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QMouseEvent>
#include <QProcess>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

using namespace mwb;
using namespace mwb::app;

namespace {

/// CPU seconds (user + system) of this process so far.
double cpu_seconds() {
    std::ifstream in("/proc/self/stat");
    std::string s((std::istreambuf_iterator<char>(in)), {});
    std::istringstream fields(s.substr(s.rfind(')') + 2));
    std::string f;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i) {
        if (i == 14) utime = std::stoull(f);
        if (i == 15) stime = std::stoull(f);
    }
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double wall() {
    static QElapsedTimer t = [] {
        QElapsedTimer e;
        e.start();
        return e;
    }();
    return static_cast<double>(t.nsecsElapsed()) / 1e9;
}

void run_for(double seconds, const std::function<bool()>& until = {}) {
    const double end = wall() + seconds;
    while (wall() < end && !(until && until())) {
        QApplication::processEvents(QEventLoop::AllEvents, 20);
        QThread::msleep(2);
    }
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

/// Records how long posted clicks wait for the GUI thread.
class ClickProbe : public QObject {
public:
    explicit ClickProbe(QWidget* target) : target_(target) { target->installEventFilter(this); }
    void post() {
        posted_.push_back(wall());
        const QPointF at(target_->width() / 2.0, target_->height() / 2.0);
        QCoreApplication::postEvent(target_, new QMouseEvent(QEvent::MouseButtonPress, at, target_->mapToGlobal(at),
                                                             Qt::MiddleButton, Qt::MiddleButton, Qt::NoModifier));
    }
    std::vector<double> delays;

protected:
    bool eventFilter(QObject*, QEvent* e) override {
        if (e->type() == QEvent::MouseButtonPress && next_ < posted_.size())
            delays.push_back(1e3 * (wall() - posted_[next_++]));
        return false;
    }

private:
    QWidget* target_;
    std::vector<double> posted_;
    std::size_t next_ = 0;
};

void bench_monitor(const QString& trainer, int iterations) {
    QTemporaryDir tmp;
    const QString run = tmp.filePath(QStringLiteral("run"));
    MonitorView view;
    view.resize(1400, 900);
    view.show();
    run_for(0.5);
    QProcess p;
    p.setProcessChannelMode(QProcess::ForwardedErrorChannel);
    p.setStandardOutputFile(QProcess::nullDevice());
    p.start(trainer, {"--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "64", "--num-layers", "1",
                      "--hidden-size", "16", "--num-attention-heads", "2", "--seq-length", "16", "--micro-batch-size",
                      "1", "--global-batch-size", "1", "--lr-warmup-iters", "0", "--log-interval", "1",
                      "--eval-interval", "0", "--threads", "1", "--train-iters", QString::number(iterations),
                      "--run-dir", run});
    if (!p.waitForStarted()) {
        std::fprintf(stderr, "mwb-app-bench: cannot start %s\n", qPrintable(trainer));
        return;
    }
    run_for(10, [&] { return QFile::exists(run + "/telemetry.json"); });
    AttachOptions o;
    o.endpoint = run.toStdString();
    o.store_file = tmp.filePath(QStringLiteral("h.sqlite")).toStdString();
    view.attach(o);
    const RunTraces& t = view.liveRun()->traces();
    run_for(20, [&] { return t.last_step.iteration >= 50; });
    ClickProbe probe(view.charts()->chart(MetricCharts::LossChart)->viewport());
    QTimer clicks;
    clicks.setInterval(50);
    QObject::connect(&clicks, &QTimer::timeout, [&] { probe.post(); });
    const double c0 = cpu_seconds(), w0 = wall();
    const int64_t i0 = t.last_step.iteration;
    clicks.start();
    run_for(600, [&] { return p.state() == QProcess::NotRunning; });
    clicks.stop();
    const double c1 = cpu_seconds(), w1 = wall();
    run_for(2, [&] { return t.end.has_value(); });
    const double its = static_cast<double>(t.last_step.iteration - i0) / (w1 - w0);
    std::printf("monitor following: %.0f iterations/s logged and drawn over %.1f s, GUI process %.1f %% of one core "
                "(receiver thread and store included), click delay median %.1f ms, p99 %.1f ms, max %.1f ms "
                "(%zu clicks)\n",
                its, w1 - w0, 100 * (c1 - c0) / (w1 - w0), percentile(probe.delays, 0.5),
                percentile(probe.delays, 0.99), percentile(probe.delays, 1.0), probe.delays.size());
    // the run is over; the Monitor keeps showing it
    const double c2 = cpu_seconds(), w2 = wall();
    run_for(5);
    std::printf("monitor showing the ended run: %.2f %% of one core over %.1f s\n",
                100 * (cpu_seconds() - c2) / (wall() - w2), wall() - w2);
    view.detach();
}

void bench_history(const QString& keep) {
    QTemporaryDir tmp;
    const std::string file = (keep.isEmpty() ? tmp.filePath(QStringLiteral("h.sqlite")) : keep).toStdString();
    std::vector<CompareRun> runs;
    for (int r = 0; r < 10; ++r) {
        const std::string uid = "20261201-000000-bench-0000000" + std::to_string(r);
        runs.push_back({uid, QString::fromStdString(uid)});
    }
    if (!QFile::exists(QString::fromStdString(file)) || store::Store(file).runs().size() != 10) {
        store::Store st(file);
        const double t0 = wall();
        for (int r = 0; r < 10; ++r) {
            const std::string uid = "20261201-000000-bench-0000000" + std::to_string(r);
            store::Store::Transaction tx(st);
            ipc::Message m;
            m.run_id = uid;
            m.topic = "run.start";
            m.seq = 0;
            m.time = 1.7e9;
            m.body = {{"config", {{"log_interval", 1}}}};
            st.ingest(m);
            m.topic = "step";
            for (int i = 1; i <= 1000000; ++i) {
                m.seq = i;
                m.time = 1.7e9 + i * 0.01;
                m.body = {{"iteration", i}, {"lm_loss", 10.0 / std::sqrt(i) + 0.01 * r}, {"consumed_tokens", 1024LL * i}};
                st.ingest(m);
            }
            tx.commit();
        }
        std::printf("history: 10 runs x 1M steps stored in %.0f s\n", wall() - t0);
    }
    store::Store st(file);
    ComparePlot plot;
    plot.resize(1400, 600);
    plot.show();
    run_for(0.3);
    plot.setStore(&st);
    std::vector<double> load, redraw, refresh;
    for (int k = 0; k < 9; ++k) {
        const double a = wall();
        plot.setRuns(runs);  // reads every run's series (downsampled by the store) and draws
        QApplication::processEvents();
        load.push_back(1e3 * (wall() - a));
        const double b = wall();
        plot.plot()->setXRange(100000 + k * 1000, 600000);  // a zoom: decimate 10 traces again and draw
        refresh.push_back(plot.plot()->lastRefreshMs());
        plot.plot()->repaint();
        redraw.push_back(1e3 * (wall() - b));
    }
    std::printf("history: overlay of 10 x 1M-step runs: read + draw %.1f ms, redraw (zoom, repaint) %.1f ms, of which "
                "decimating and handing the points to QtCharts %.1f ms (medians of 9), %d points drawn\n",
                percentile(load, 0.5), percentile(redraw, 0.5), percentile(refresh, 0.5), plot.plot()->pointsDrawn());
}

}  // namespace

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    bool history = true;
    QString keep;  // --store FILE: build the 10 x 1M store once, reuse it afterwards
    int iterations = 4000;
    for (int i = 1; i < argc; ++i) {
        const QString a = QString::fromLocal8Bit(argv[i]);
        if (a == QLatin1String("--skip-history")) history = false;
        if (a == QLatin1String("--store") && i + 1 < argc) keep = QString::fromLocal8Bit(argv[++i]);
        if (a == QLatin1String("--iterations") && i + 1 < argc) iterations = QString::fromLocal8Bit(argv[++i]).toInt();
    }
    const QString trainer = QStringLiteral(MWB_BINARY_DIR "/backend/mwb-train");
    if (iterations > 0) bench_monitor(trainer, iterations);
    if (history) bench_history(keep);
    return 0;
}
