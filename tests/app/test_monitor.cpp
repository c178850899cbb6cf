// The Monitor fed by real mwb-train processes on loopback: the last values and every point match the
// run's own metrics.jsonl (no gap, no duplicate); the control buttons reach the trainer (its status
// answers "paused", the run ends "stopped"); a restarted app reloads the history from the store and
// continues live without a gap; a killed run keeps its data and says how it ended; the rank grid
// flags a straggler among 64 ranks.
#include "support/skip.h"
#include "support/suite.h"
#include "test_monitor_fixtures.h"

#include "app/core/theme.h"
#include "app/monitor/control_bar.h"
#include "app/monitor/event_log_model.h"
#include "app/monitor/metric_charts.h"
#include "app/monitor/monitor_view.h"
#include "app/monitor/rank_grid.h"
#include "app/monitor/status_line.h"
#include "mwb/ipc/control_client.h"
#include "mwb/store/store.h"
#include "app/plot/memory_bars.h"
#include "app/plot/stacked_bar.h"

#include <QPushButton>
#include <QSignalSpy>
#include <QStandardPaths>

#include <cmath>

namespace test_monitor {

using namespace mwb;
using namespace mwb::app;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

AttachOptions attach_to(const fs::path& run_dir, const fs::path& store) {
    AttachOptions o;
    o.endpoint = run_dir.string();
    o.store_file = store;
    return o;
}

double num(const nlohmann::json& b, const char* key) {
    return b.contains(key) && b[key].is_number() ? b[key].get<double>() : NAN;
}

/// The trace holds exactly the step records' (iteration, field) pairs, in order.
void check_trace(const Trace& t, const std::vector<ipc::Message>& steps, const char* field) {
    std::vector<double> x, y;
    for (const auto& s : steps)
        if (std::isfinite(num(s.body, field))) {
            x.push_back(num(s.body, "iteration"));
            y.push_back(num(s.body, field));
        }
    QVERIFY2(!x.empty(), field);
    QCOMPARE(t.x.size(), x.size());
    QVERIFY2(t.x == x, field);  // every iteration once, in order: no gap, no duplicate
    QVERIFY2(t.y == y, field);  // the very values the trainer wrote
}

/// The trace holds exactly the step records' (iteration, value at `pointer`) pairs, in order.
void check_metric(const Trace& t, const std::vector<ipc::Message>& steps, const char* pointer) {
    const nlohmann::json::json_pointer at(pointer);
    std::vector<double> x, y;
    for (const auto& s : steps)
        if (s.body.contains(at) && s.body[at].is_number()) {
            x.push_back(num(s.body, "iteration"));
            y.push_back(s.body[at].get<double>());
        }
    QVERIFY2(!x.empty(), pointer);
    QCOMPARE(t.x.size(), x.size());
    QVERIFY2(t.x == x, pointer);
    QVERIFY2(t.y == y, pointer);
}

std::vector<QString> event_kinds(const EventLogModel& m) {
    std::vector<QString> out;
    for (int r = 0; r < m.rowCount(); ++r) out.push_back(m.data(m.index(r, EventLogModel::Kind)).toString());
    return out;
}

bool has_event(const EventLogModel& m, const QString& detail_part) {
    for (int r = 0; r < m.rowCount(); ++r)
        if (m.data(m.index(r, EventLogModel::Detail)).toString().contains(detail_part)) return true;
    return false;
}

}  // namespace

class TestMonitor : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { apply_theme(Theme::Light); }

    void shows_a_real_runs_last_values_and_every_point() {
        test::TempDir t;
        const fs::path run = t / "run", db = t / "h.sqlite";
        test::Child trainer;
        trainer.start(test::trainer_exe(),
                      test::tiny_run_args(
                          run, 60, {"--eval-interval", "20", "--eval-iters", "1", "--peak-tflops-per-device", "0.5"}));
        MonitorView view;
        view.resize(1400, 900);
        view.show();
        view.attach(attach_to(run, db));
        const RunTraces& tr = view.liveRun()->traces();
        QVERIFY2(test::wait_gui([&] { return tr.end.has_value(); }), qPrintable(trainer.output()));
        QVERIFY2(trainer.wait() == 0, qPrintable(trainer.output().right(600)));

        const auto all = test::run_dir_messages(run);
        const auto steps = test::of_topic(all, "step");
        QCOMPARE(static_cast<int>(steps.size()), 60);
        check_trace(tr[SeriesId::Loss], steps, "lm_loss");
        check_trace(tr[SeriesId::Lr], steps, "lr");
        check_trace(tr[SeriesId::GradNorm], steps, "grad_norm");
        check_trace(tr[SeriesId::TokensPerSec], steps, "tokens_per_sec");
        check_trace(tr[SeriesId::Tflops], steps, "tflops_per_device");
        check_trace(tr[SeriesId::Mfu], steps, "mfu");

        const auto& last = steps.back().body;
        QCOMPARE(tr.last_step.iteration, 60);
        QCOMPARE(tr.last_step.loss, num(last, "lm_loss"));
        QCOMPARE(tr.last_step.consumed_tokens, last["consumed_tokens"].get<int64_t>());
        QCOMPARE(tr.last_step.mfu, num(last, "mfu"));
        QVERIFY(std::abs(tr.last_step.mfu - tr.last_step.tflops / 0.5) < 1e-12 * std::abs(tr.last_step.tflops));
        QCOMPARE(peak_tflops(tr), 0.5);

        const auto evals = test::of_topic(all, "eval");
        QCOMPARE(tr[SeriesId::ValLoss].size(), evals.size());
        QCOMPARE(*tr.last_eval, num(evals.back().body, "lm_loss"));

        // every message once, in seq order; recorded into the store as it came
        QCOMPARE(view.liveRun()->seqBreaks(), 0);
        QCOMPARE(tr.messages + tr.history_messages, static_cast<int64_t>(all.size()));
        QCOMPARE(store::Store(db).next_seq(all.front().run_id), static_cast<int64_t>(all.size()));

        // what the user reads
        QCOMPARE(tr.end->status, "finished");
        QVERIFY2(view.statusLine()->part("end").startsWith("finished"), qPrintable(view.statusLine()->text()));
        QVERIFY(view.statusLine()->part("iteration").startsWith("60"));
        QCOMPARE(event_kinds(*view.eventLog()).back(), QString("run.end"));
        QCOMPARE(event_kinds(*view.eventLog()).front(), QString("run.start"));
        QVERIFY(has_event(*view.eventLog(), "validation loss"));
        const auto memory = test::of_topic(all, "memory");
        QVERIFY(!memory.empty());
        const auto& ranks = memory.back().body["ranks"];
        QCOMPARE(view.memoryBars()->bars().size(), ranks.size());
        QCOMPARE(view.memoryBars()->bars()[0].current, ranks[0]["allocated"].get<double>());
        QCOMPARE(view.rankGrid()->cells().size(), ranks.size());
        view.redraw();
        QVERIFY(view.charts()->chart(MetricCharts::LossChart)->pointsDrawn() > 0);
        test::maybe_save_shot(view, "monitor-light");

        // smoothing: none reproduces the loss; 0.5 is TensorBoard's debiased EMA, computed here again
        PlotView* loss_chart = view.charts()->chart(MetricCharts::LossChart);
        view.charts()->setSmoothing(0);
        view.redraw();
        QVERIFY(loss_chart->drawnTrace(0).y == tr[SeriesId::Loss].y);
        view.charts()->setSmoothing(0.5);
        view.redraw();
        const Trace& ema = loss_chart->drawnTrace(0);
        QCOMPARE(ema.size(), tr[SeriesId::Loss].size());
        double acc = 0, debias = 1;
        for (std::size_t i = 0; i < tr[SeriesId::Loss].size(); ++i) {
            acc = 0.5 * acc + 0.5 * tr[SeriesId::Loss].y[i];
            debias *= 0.5;
            QVERIFY(std::abs(ema.y[i] - acc / (1 - debias)) < 1e-12);
        }
        view.charts()->setLogLoss(true);
        QVERIFY(view.charts()->chart(MetricCharts::LossChart)->logY());
        QVERIFY(view.charts()->chart(MetricCharts::LossChart)->pointsDrawn() > 0);
        view.charts()->setLogLoss(false);
        apply_theme(Theme::Dark);
        QTest::qWait(20);  // the palette change reaches the widgets as events
        view.charts()->restyle();
        view.redraw();
        QCOMPARE(view.charts()->chart(MetricCharts::LossChart)->chart()->legend()->isVisible(), true);
        QTest::qWait(50);
        test::maybe_save_shot(view, "monitor-dark");
        apply_theme(Theme::Light);
        view.charts()->restyle();
        QVERIFY(!view.controls()->button("pause")->isEnabled());  // nothing to control any more
    }

    void control_buttons_reach_the_trainer() {
        test::TempDir t;
        const fs::path run = t / "run", db = t / "h.sqlite";
        test::Child trainer;
        trainer.start(test::trainer_exe(), test::tiny_run_args(run, 1000000));
        MonitorView view;
        view.resize(1200, 800);
        view.show();
        view.controls()->setConfirmStop(false);
        view.attach(attach_to(run, db));
        ControlBar& bar = *view.controls();
        QSignalSpy replies(&bar, &ControlBar::replied);
        const auto click = [&](const char* action) {
            QVERIFY2(test::wait_gui([&] { return bar.button(action)->isEnabled(); }), action);
            const int before = replies.count();
            QTest::mouseClick(bar.button(action), Qt::LeftButton);
            QVERIFY2(test::wait_gui([&] { return replies.count() > before; }), action);
            const auto r = replies.last();
            QCOMPARE(r[0].toString(), QString(action));
            QVERIFY2(r[1].toBool(), qPrintable(r[2].toString()));
        };
        auto status = [&] { return ipc::ControlClient::for_run_dir(run).request("status", 20s); };

        click("pause");
        QCOMPARE(status()["state"], "paused");  // the trainer itself says so
        QVERIFY(test::wait_gui([&] { return has_event(*view.eventLog(), "pause applied"); }));
        QVERIFY(!bar.button("pause")->isEnabled());
        click("resume");
        QCOMPARE(status()["state"], "running");
        click("checkpoint");
        QVERIFY(test::wait_gui([&] { return has_event(*view.eventLog(), "checkpoint saved"); }));
        click("stop");
        QCOMPARE(trainer.wait(), 3);  // stopped over the control channel
        const RunTraces& tr = view.liveRun()->traces();
        QVERIFY(test::wait_gui([&] { return tr.end.has_value(); }));
        QCOMPARE(tr.end->status, "stopped");
        const auto ends = test::of_topic(test::run_dir_messages(run), "run.end");
        QCOMPARE(ends.size(), std::size_t{1});
        QCOMPARE(ends[0].body["status"], "stopped");
        QVERIFY(view.statusLine()->part("end").startsWith("stopped"));
        QVERIFY(test::wait_gui([&] { return !bar.button("stop")->isEnabled(); }));
    }

    void a_restarted_app_continues_from_the_store_without_gaps() {
        test::TempDir t;
        const fs::path run = t / "run", db = t / "h.sqlite";
        test::Child trainer;
        trainer.start(test::trainer_exe(), test::tiny_run_args(run, 1000000));
        {
            MonitorView first;
            first.attach(attach_to(run, db));
            QVERIFY(test::wait_gui([&] { return first.liveRun()->traces()[SeriesId::Loss].size() >= 40; }));
        }  // the app closes; the run goes on unwatched
        const int at_close = test::file_lines(run / "metrics.jsonl");
        QVERIFY(test::wait_gui([&] { return test::file_lines(run / "metrics.jsonl") >= at_close + 60; }));

        MonitorView second;
        second.attach(attach_to(run, db));
        const RunTraces& tr = second.liveRun()->traces();
        QVERIFY(test::wait_gui([&] { return tr.history_messages > 0 && tr.messages > 0; }));
        QCOMPARE(ipc::ControlClient::for_run_dir(run).request("stop", 20s)["ok"], true);
        QCOMPARE(trainer.wait(), 3);
        QVERIFY(test::wait_gui([&] { return tr.end.has_value(); }));

        const auto all = test::run_dir_messages(run);
        check_trace(tr[SeriesId::Loss], test::of_topic(all, "step"), "lm_loss");
        check_trace(tr[SeriesId::Tflops], test::of_topic(all, "step"), "tflops_per_device");
        QCOMPARE(tr.history_messages + tr.messages, static_cast<int64_t>(all.size()));
        QCOMPARE(second.liveRun()->seqBreaks(), 0);
        QCOMPARE(store::Store(db).next_seq(all.front().run_id), static_cast<int64_t>(all.size()));
        QCOMPARE(test::of_topic(all, "run.start").size(), std::size_t{1});
        QCOMPARE(event_kinds(*second.eventLog()).front(), QString("run.start"));  // reloaded from the store
        QCOMPARE(tr.end->status, "stopped");
        // the metric picker's series hold the whole run as well, the part before the restart read from
        // the store: a column (hardware TFLOP/s), a field only step_details keeps, a per-rank number
        const auto steps = test::of_topic(all, "step");
        QVERIFY(tr.metrics.count("hardware_tflops_per_device") && tr.metrics.count("global_batch_size") &&
                tr.metrics.count("rank0.time.forward_s"));
        check_metric(tr.metrics.at("hardware_tflops_per_device"), steps, "/hardware_tflops_per_device");
        check_metric(tr.metrics.at("global_batch_size"), steps, "/global_batch_size");
        check_metric(tr.metrics.at("rank0.time.forward_s"), steps, "/ranks/0/time/forward_s");
        // a chart added now shows it from the first iteration
        second.charts()->addChart(QStringLiteral("rank0.time.forward_s"));
        second.redraw();
        PlotView* added = second.charts()->customChart(0);
        QVERIFY(added && !added->drawnPoints(0).isEmpty());
        QCOMPARE(added->visibleXRange().first, num(steps.front().body, "iteration"));
        QCOMPARE(added->visibleXRange().second, num(steps.back().body, "iteration"));
    }

    void a_killed_run_keeps_its_data_and_says_how_it_ended() {
        test::TempDir t;
        const fs::path run = t / "run", db = t / "h.sqlite";
        test::Child trainer;
        trainer.start(test::trainer_exe(), test::tiny_run_args(run, 1000000));
        MonitorView view;
        view.attach(attach_to(run, db));
        const RunTraces& tr = view.liveRun()->traces();
        QVERIFY(test::wait_gui(
            [&] { return tr[SeriesId::Loss].size() >= 10 && view.controls()->button("stop")->isEnabled(); }));
        trainer.signal(SIGKILL);
        QCOMPARE(trainer.wait(), -1);
        RunEnd end;
        end.status = "crashed";
        end.reason = "killed by signal 9";
        view.noteEnded(end);  // what the shell does when its local process dies without run.end
        QVERIFY(!tr[SeriesId::Loss].empty());
        QCOMPARE(view.statusLine()->part("end"), QString("crashed: killed by signal 9"));
        QVERIFY(!view.controls()->button("stop")->isEnabled());
        QCOMPARE(event_kinds(*view.eventLog()).back(), QString("run.end"));
        // the first word on how it ended stays
        end.status = "lost";
        view.noteEnded(end);
        QCOMPARE(tr.end->status, "crashed");
    }

    void a_multi_rank_run_draws_a_bar_and_a_cell_per_rank() {
        const QString mpirun = QStandardPaths::findExecutable("mpirun");
        if (mpirun.isEmpty()) MWB_SKIP("mpirun is not installed");
        test::TempDir t;
        const fs::path run = t / "run", db = t / "h.sqlite";
        test::Child trainer;
        trainer.p.setProcessEnvironment([] {
            auto env = QProcessEnvironment::systemEnvironment();
            for (const char* k :
                 {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_rmaps_base_oversubscribe"})
                env.insert(k, "1");
            env.insert("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
            return env;
        }());
        // TP 2 x PP 2: four ranks, two pipeline stages
        trainer.start(mpirun, QStringList{"-np", "4", test::trainer_exe()} +
                                  test::tiny_run_args(
                                      run, 20,
                                      {"--num-layers", "2", "--micro-batch-size", "2", "--global-batch-size", "8",
                                       "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"}));
        MonitorView view;
        view.resize(1400, 900);
        view.show();
        view.setPrediction({1e6, 2e6, 3e6, 4e6}, 8e6);
        view.attach(attach_to(run, db));
        const RunTraces& tr = view.liveRun()->traces();
        QVERIFY2(test::wait_gui([&] { return tr.end.has_value(); }, 60s), qPrintable(trainer.output().right(600)));
        QVERIFY2(trainer.wait() == 0, qPrintable(trainer.output().right(600)));
        view.redraw();

        const auto all = test::run_dir_messages(run);
        const nlohmann::json mem = test::of_topic(all, "memory").back().body["ranks"];
        const auto& bars = view.memoryBars()->bars();
        QCOMPARE(bars.size(), std::size_t{4});
        for (const auto& r : mem) {
            const int rank = r["rank"].get<int>();
            QCOMPARE(bars[static_cast<std::size_t>(rank)].current, r["allocated"].get<double>());
            double stacked = 0;
            for (double v : bars[static_cast<std::size_t>(rank)].segments) stacked += v;
            QVERIFY(std::abs(stacked - r["peak"].get<double>()) <= 1e-6 * r["peak"].get<double>());
            QCOMPARE(bars[static_cast<std::size_t>(rank)].predicted, 1e6 * (rank + 1));
        }
        // the grid places each rank where the step record says it is
        const nlohmann::json ranks = test::of_topic(all, "step").back().body["ranks"];
        QCOMPARE(view.rankGrid()->cells().size(), std::size_t{4});
        double worst_comm = 0;
        for (const auto& r : ranks) {
            const RankCell& c = view.rankGrid()->cells()[r["rank"].get<std::size_t>()];
            QCOMPARE(c.tp, r["tp"].get<int>());
            QCOMPARE(c.pp, r["pp"].get<int>());
            QCOMPARE(c.dp, r["dp"].get<int>());
            worst_comm = std::max(worst_comm, r["time"]["communication_s"].get<double>());
        }
        QVERIFY(worst_comm > 0);  // tensor-parallel collectives
        QCOMPARE(view.charts()->stepBar()->segments().at(1).value, worst_comm);
        QCOMPARE(tr[SeriesId::Communication].y.back(), worst_comm);
        test::maybe_save_shot(view, "monitor-tp2-pp2");
    }

    void the_rank_grid_flags_a_straggler_and_a_full_rank() {
        RunTraces tr;
        tr.start = RunStart{};
        tr.start->topology = {
            {"tensor_model_parallel_size", 2}, {"pipeline_model_parallel_size", 4}, {"data_parallel_size", 8}};
        for (int r = 0; r < 64; ++r) {
            RankTiming timing;
            timing.rank = r;
            timing.tp = r % 2;
            timing.dp = (r / 2) % 8;
            timing.pp = r / 16;
            timing.compute = 1.0 + 0.001 * r;
            timing.communication = 0.2;
            if (r == 37) timing.compute = 1.6;  // the straggler
            tr.timings.push_back(timing);
            RankMemory m;
            m.rank = r;
            m.peak = r == 50 ? 79e9 : 40e9 + 1e8 * r;
            tr.memory.push_back(m);
        }
        RankGrid grid;
        grid.resize(600, 220);
        grid.setCells(rank_cells(tr));
        QCOMPARE(grid.cells().size(), std::size_t{64});
        QCOMPARE(grid.cells()[37].pp, 2);
        grid.setMetric(RankGrid::Metric::StepTime);
        QCOMPARE(grid.flagged(), std::vector<int>{37});
        grid.setMetric(RankGrid::Metric::Memory);
        QVERIFY(grid.flagged().empty());  // no capacity known
        grid.setCapacity(80e9);
        QCOMPARE(grid.flagged(), std::vector<int>{50});
        // the full rank is drawn at the top of the ramp, an ordinary one near the bottom
        const QImage img = grid.grab().toImage();
        const QRect full = grid.cellRect(50), low = grid.cellRect(0);
        QVERIFY(full.width() >= 3 && !full.intersects(low));
        QCOMPARE(img.pixelColor(full.center()), ramp_color(1.0));
        QCOMPARE(img.pixelColor(low.center()), ramp_color(0.0));
    }
};

MWB_TEST_SUITE_WIDGETS(test_monitor, TestMonitor)
}  // namespace test_monitor
#include "test_monitor.moc"
