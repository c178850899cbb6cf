// mwb-app-bench: the app's costs that users feel (docs/performance.md, "App"); a benchmark, not a test.
//   1. The Monitor following a real mwb-train run that logs every iteration as fast as it can
//      (a tiny model: hundreds of iterations/s): the GUI process's CPU (utime + stime of
//      /proc/self/stat over the run, in % of one core), the iterations/s reached, and how long a
//      click waits: mouse presses posted to a chart every 50 ms, delay from posting to delivery.
//   2. The same Monitor showing the run once it is over, for 5 s: the CPU an idle screen costs.
//   3. History overlaying 10 runs of 1M steps each (a store made here): reading and drawing the
//      comparison, and redrawing it (zoom), median of 9.
//   mwb-app-bench [--skip-history] [--iterations N (0: skip the Monitor)] [--store FILE (kept, reused)]
#include "app/history/compare_plot.h"
#include "app/live/live_run.h"
#include "app/monitor/metric_charts.h"
#include "app/monitor/monitor_view.h"
#include "mwb/ipc/message.h"
#include "mwb/store/store.h"
#include "app/plot/plot_view.h"

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
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

using namespace mwb;
using namespace mwb::app;

namespace {

/// CPU seconds (user + system) of this process so far, or of its main (GUI) thread only.
double cpu_seconds(bool gui_thread_only = false) {
    std::ifstream in(gui_thread_only ? "/proc/self/task/" + std::to_string(getpid()) + "/stat" : "/proc/self/stat");
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

/// Records how long clicks wait for the GUI thread: a thread of its own posts a mouse press every
/// 50 ms (so a busy GUI thread cannot delay the posting too), the GUI thread notes when it arrives.
class ClickProbe : public QObject {
public:
    explicit ClickProbe(QWidget* target) : target_(target) { target->installEventFilter(this); }
    ~ClickProbe() override { stop(); }
    void start() {
        running_ = true;
        poster_ = std::thread([this] {
            while (running_) {
                const QPointF at(target_->width() / 2.0, target_->height() / 2.0);
                {
                    std::lock_guard<std::mutex> lock(mutex_);
                    posted_.push_back(wall());
                }
                QCoreApplication::postEvent(target_, new QMouseEvent(QEvent::MouseButtonPress, at, at, Qt::MiddleButton,
                                                                     Qt::MiddleButton, Qt::NoModifier));
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
            }
        });
    }
    void stop() {
        running_ = false;
        if (poster_.joinable()) poster_.join();
    }
    std::vector<double> delays;

protected:
    bool eventFilter(QObject*, QEvent* e) override {
        if (e->type() == QEvent::MouseButtonPress) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (next_ < posted_.size()) delays.push_back(1e3 * (wall() - posted_[next_++]));
        }
        return false;
    }

private:
    QWidget* target_;
    std::thread poster_;
    std::atomic<bool> running_{false};
    std::mutex mutex_;
    std::vector<double> posted_;
    std::size_t next_ = 0;
};

/// The GUI thread's time per event, by event type and receiver class: what keeps a click waiting.
class TimedApp : public QApplication {
public:
    using QApplication::QApplication;
    bool notify(QObject* receiver, QEvent* e) override {
        if (!timing || depth_ > 0) return QApplication::notify(receiver, e);
        ++depth_;
        // before delivery: the receiver may be deleted by it
        const std::string key = std::string(receiver->metaObject()->className()) + " " + std::to_string(e->type());
        const double t0 = wall();
        const bool r = QApplication::notify(receiver, e);
        const double ms = 1e3 * (wall() - t0);
        --depth_;
        auto& s = stats[key];
        s.first += ms;
        s.second = std::max(s.second, ms);
        return r;
    }
    void report() const {
        std::vector<std::pair<std::string, std::pair<double, double>>> v(stats.begin(), stats.end());
        std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
        for (std::size_t i = 0; i < v.size() && i < 8; ++i)
            std::printf("  GUI thread: %-40s total %8.1f ms, longest %7.1f ms\n", v[i].first.c_str(), v[i].second.first,
                        v[i].second.second);
    }
    bool timing = false;
    std::map<std::string, std::pair<double, double>> stats;

private:
    int depth_ = 0;
};

/// hidden: the followed model's width, which sets how many iterations per second it logs (16: several
/// thousand on one core; 512: a few hundred, the rate the issue states its goal at).
void bench_monitor(const QString& trainer, int iterations, int hidden) {
    QTemporaryDir tmp;
    const QString run = tmp.filePath(QStringLiteral("run"));
    MonitorView view;
    view.resize(1400, 900);
    view.show();
    run_for(0.5);
    QProcess p;
    p.setProcessChannelMode(QProcess::ForwardedErrorChannel);
    p.setStandardOutputFile(QProcess::nullDevice());
    p.start(trainer, {"--mock-data",
                      "--tokenizer-type",
                      "NullTokenizer",
                      "--vocab-size",
                      "64",
                      "--num-layers",
                      "1",
                      "--hidden-size",
                      QString::number(hidden),
                      "--num-attention-heads",
                      "2",
                      "--seq-length",
                      "16",
                      "--micro-batch-size",
                      "1",
                      "--global-batch-size",
                      "1",
                      "--lr",
                      "1e-4",
                      "--lr-warmup-iters",
                      "0",
                      "--log-interval",
                      "1",
                      "--eval-interval",
                      "0",
                      "--threads",
                      "1",
                      "--train-iters",
                      QString::number(iterations),
                      "--run-dir",
                      run});
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
    const double c0 = cpu_seconds(), g0 = cpu_seconds(true), w0 = wall();
    const int64_t i0 = t.last_step.iteration;
    probe.start();
    auto* app = static_cast<TimedApp*>(QCoreApplication::instance());
    app->timing = std::getenv("MWB_BENCH_EVENTS") != nullptr;
    run_for(600, [&] { return p.state() == QProcess::NotRunning; });
    probe.stop();
    if (app->timing) app->report();
    app->timing = false;
    const double c1 = cpu_seconds(), g1 = cpu_seconds(true), w1 = wall();
    run_for(0.5);  // the last presses arrive
    run_for(2, [&] { return t.end.has_value(); });
    const double its = static_cast<double>(t.last_step.iteration - i0) / (w1 - w0);
    double load = 0;
    std::ifstream("/proc/loadavg") >> load;
    std::printf(
        "monitor following: %.0f iterations/s logged and drawn over %.1f s, GUI process %.1f %% of one core "
        "(receiver thread and store included; the GUI thread %.1f %%), click delay median %.1f ms, p99 %.1f ms, "
        "max %.1f ms (%zu clicks), load average %.1f\n",
        its, w1 - w0, 100 * (c1 - c0) / (w1 - w0), 100 * (g1 - g0) / (w1 - w0), percentile(probe.delays, 0.5),
        percentile(probe.delays, 0.99), percentile(probe.delays, 1.0), probe.delays.size(), load);
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
                m.body = {
                    {"iteration", i}, {"lm_loss", 10.0 / std::sqrt(i) + 0.01 * r}, {"consumed_tokens", 1024LL * i}};
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
    std::printf(
        "history: overlay of 10 x 1M-step runs: read + draw %.1f ms, redraw (zoom, repaint) %.1f ms, of which "
        "decimating and preparing the points %.1f ms (medians of 9), %d points drawn\n",
        percentile(load, 0.5), percentile(redraw, 0.5), percentile(refresh, 0.5), plot.plot()->pointsDrawn());
}

}  // namespace

int main(int argc, char** argv) {
    TimedApp app(argc, argv);
    bool history = true;
    QString keep;  // --store FILE: build the 10 x 1M store once, reuse it afterwards
    int iterations = 4000, hidden = 16;
    for (int i = 1; i < argc; ++i) {
        const QString a = QString::fromLocal8Bit(argv[i]);
        if (a == QLatin1String("--skip-history")) history = false;
        if (a == QLatin1String("--store") && i + 1 < argc) keep = QString::fromLocal8Bit(argv[++i]);
        if (a == QLatin1String("--iterations") && i + 1 < argc) iterations = QString::fromLocal8Bit(argv[++i]).toInt();
        if (a == QLatin1String("--hidden") && i + 1 < argc) hidden = QString::fromLocal8Bit(argv[++i]).toInt();
    }
    const QString trainer = QStringLiteral(MWB_BINARY_DIR "/backend/mwb-train");
    if (iterations > 0) bench_monitor(trainer, iterations, hidden);
    if (history) bench_history(keep);
    return 0;
}
