// The faults found using the app (issue 19), each driven by real input events (wheel, clicks, keys,
// mouse moves) on the real widgets, checked on what is drawn: tick labels, drawn points, crosshair
// values, the status line's rendered height, redraw counts.
#include "app/core/format.h"
#include "app/designer/auto_configure_dialog.h"
#include "app/designer/designer_view.h"
#include "app/launch/commands.h"
#include "app/launch/launch_view.h"
#include "app/launch/local_run.h"
#include "app/monitor/control_bar.h"
#include "app/monitor/metric_charts.h"
#include "app/monitor/monitor_view.h"
#include "app/monitor/status_line.h"
#include "mwb/planner/cluster.h"
#include "mwb/planner/presets.h"
#include "app/plot/plot_view.h"
#include "app/plot/ticks.h"
#include "app/shell/main_window.h"

#include "support/suite.h"

#include <QComboBox>
#include <QMenu>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QTemporaryDir>
#include <QSpinBox>
#include <QTimer>
#include <QWheelEvent>

#include <QtTest>

#include <csignal>
#include <cmath>

namespace test_use_faults {

using namespace mwb::app;

namespace {

void wheel(QWidget* w, int delta, QPoint at = {}) {
    if (at.isNull()) at = w->rect().center();
    QWheelEvent e(QPointF(at), QPointF(w->mapToGlobal(at)), QPoint(), QPoint(0, delta), Qt::NoButton, Qt::NoModifier,
                  Qt::NoScrollPhase, false);
    QApplication::sendEvent(w, &e);
}

Trace ramp(int n, double x0 = 0, double slope = 1, double offset = 0) {
    Trace t;
    for (int i = 0; i < n; ++i) t.append(x0 + i, offset + slope * i);
    return t;
}

/// Every label a number that is a round multiple of the spacing between labels.
bool round_labels(const QStringList& labels) {
    for (const QString& l : labels) {
        QString s = l;
        s.remove(QChar(0x200B));
        double scale = 1;
        if (s.endsWith('k')) scale = 1e3;
        if (s.endsWith('M')) scale = 1e6;
        if (scale != 1) s.chop(1);
        bool ok = false;
        const double v = s.toDouble(&ok) * scale;
        if (!ok) return false;
        // a round number has at most two significant digits here
        const double mag = v == 0 ? 1 : std::pow(10.0, std::floor(std::log10(std::abs(v))) - 1);
        if (std::abs(v / mag - std::round(v / mag)) > 1e-6) return false;
    }
    return true;
}

/// The labels' values (SI prefix and `suffix` read back), evenly spaced by 1, 2 or 5 times a power
/// of ten, each a multiple of that step: what a reader calls round ticks.
bool one_two_five(const QStringList& labels, const QString& suffix = {}) {
    std::vector<double> v;
    for (const QString& l : labels) {
        QString s = l;
        s.remove(QChar(0x200B));
        if (!suffix.isEmpty()) {
            if (!s.endsWith(suffix)) return false;
            s.chop(suffix.size());
        }
        double scale = 1;
        const QString prefixes = QStringLiteral("pnµmkMGT");
        const double scales[] = {1e-12, 1e-9, 1e-6, 1e-3, 1e3, 1e6, 1e9, 1e12};
        if (!s.isEmpty() && prefixes.contains(s.back())) {
            scale = scales[prefixes.indexOf(s.back())];
            s.chop(1);
        }
        bool ok = false;
        v.push_back(s.toDouble(&ok) * scale);
        if (!ok) return false;
    }
    if (v.size() < 2) return false;
    const double step = v[1] - v[0];
    if (!(step > 0)) return false;
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    if (std::abs(mantissa - 1) > 1e-6 && std::abs(mantissa - 2) > 1e-6 && std::abs(mantissa - 5) > 1e-6) return false;
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (std::abs(v[i] - v[0] - static_cast<double>(i) * step) > 1e-6 * step) return false;
        if (std::abs(v[i] / step - std::round(v[i] / step)) > 1e-6) return false;
    }
    return true;
}

}  // namespace

class TestUseFaults : public QObject {
    Q_OBJECT
private slots:
    void wheel_edits_a_field_only_once_it_has_focus() {
        DesignerView view;
        view.resize(1200, 800);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        auto* seq = view.findChild<QSpinBox*>(QStringLiteral("seq_length"));
        QVERIFY(seq);
        const int before = seq->value();
        view.setFocus();
        wheel(seq, -120);  // scrolling the form over the box
        QCOMPARE(seq->value(), before);
        QTest::mouseClick(seq, Qt::LeftButton, {}, QPoint(5, seq->height() / 2));  // now it is the user's
        QVERIFY(seq->hasFocus());
        wheel(seq, -120);
        QVERIFY(seq->value() != before);
    }

    void full_recompute_gets_megatrons_defaults() {
        DesignerView view;
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        auto* gran = view.findChild<QComboBox*>(QStringLiteral("recompute_granularity"));
        QVERIFY(gran);
        const int full = gran->findData(QStringLiteral("full"));
        QVERIFY(full >= 0);
        gran->setFocus();
        while (gran->currentIndex() != full) QTest::keyClick(gran, gran->currentIndex() < full ? Qt::Key_Down : Qt::Key_Up);
        QTRY_COMPARE(view.config().training.recompute_method, std::string("uniform"));
        QCOMPARE(view.config().training.recompute_num_layers, 1);
        QTest::qWait(400);  // the replan timer
        const auto* method = view.findChild<QWidget*>(QStringLiteral("recompute_method"));
        QVERIFY(method);
        // no problem under the two fields
        for (auto* label : view.findChildren<QLabel*>())
            if (label->isVisible() && label->text().contains(QStringLiteral("recompute_method")))
                QFAIL(qPrintable(label->text()));
    }

    void a_preset_asks_before_discarding_an_edited_design() {
        DesignerView view;
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        auto* layers = view.findChild<QSpinBox*>(QStringLiteral("num_layers"));
        QVERIFY(layers);
        layers->setFocus();
        QTest::keyClick(layers, Qt::Key_Up);
        QVERIFY(view.modified());
        const int edited = layers->value();
        // the question comes up; the user cancels: the design stays
        bool asked = false;
        QTimer::singleShot(200, [&] {
            auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
            asked = box != nullptr;
            if (box) QTest::mouseClick(box->button(QMessageBox::Cancel), Qt::LeftButton);
        });
        QVERIFY(!view.confirmDiscard());
        QVERIFY(asked);
        QCOMPARE(layers->value(), edited);
        // discarding goes on
        QTimer::singleShot(200, [&] {
            if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget()))
                QTest::mouseClick(box->button(QMessageBox::Discard), Qt::LeftButton);
        });
        QVERIFY(view.confirmDiscard());
    }

    void a_one_device_cluster_with_tp2_offers_to_resize() {
        DesignerView view;
        view.resize(1300, 900);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QCOMPARE(view.cluster().world_size(), 1);  // the tiny CPU demo
        auto* tp = view.findChild<QSpinBox*>(QStringLiteral("tensor_model_parallel_size"));
        QVERIFY(tp);
        QTest::mouseClick(tp, Qt::LeftButton, {}, QPoint(5, tp->height() / 2));
        QTest::keyClick(tp, Qt::Key_A, Qt::ControlModifier);
        QTest::keyClicks(tp, QStringLiteral("2"));
        QTRY_VERIFY(view.findChild<QWidget*>(QStringLiteral("resize_banner"))->isVisible());
        auto* resize = view.findChild<QPushButton*>(QStringLiteral("resize_cluster"));
        QVERIFY(resize->text().contains(QStringLiteral("2 devices")));
        QTest::mouseClick(resize, Qt::LeftButton);
        QCOMPARE(view.cluster().world_size(), 2);
        QCOMPARE(view.cluster().nodes, 1);
        QVERIFY(!view.findChild<QWidget*>(QStringLiteral("resize_banner"))->isVisible());
    }

    void auto_configure_keeps_a_stated_headroom_and_explains_near_ties() {
        const mwb::Config base = mwb::planner::load_preset("gpt3-1.3b");
        const auto& cat = mwb::planner::device_catalogue();
        const auto cluster = mwb::planner::make_cluster(mwb::planner::find_device(cat, "A100-80GB"), 8, 1);
        AutoConfigureDialog dialog(base, cluster);
        dialog.waitForResult();
        QCOMPARE(dialog.headroom(), 0.05);
        const auto& ranked = dialog.result().ranked;
        QVERIFY(!ranked.empty());
        const double usable = static_cast<double>(cluster.memory_limit());
        for (const auto& r : ranked) QVERIFY(static_cast<double>(r.plan.most_loaded().peak_total) <= 0.95 * usable);
        // a headroom below the fullest layout's peak drops exactly the layouts above it
        dialog.setHeadroom(0);
        dialog.start();
        dialog.waitForResult();
        double fullest = 0;
        for (const auto& r : dialog.result().ranked)
            fullest = std::max(fullest, static_cast<double>(r.plan.most_loaded().peak_total) / usable);
        QVERIFY(fullest > 0.1);
        const double h = std::floor(100 * (1 - fullest) + 1) / 100;  // just enough to exclude it
        dialog.setHeadroom(h);
        dialog.start();
        dialog.waitForResult();
        QVERIFY(!dialog.result().ranked.empty());
        for (const auto& r : dialog.result().ranked)
            QVERIFY(static_cast<double>(r.plan.most_loaded().peak_total) <= (1 - h) * usable);
        // near ties are explained, one line each, from the plans' own numbers
        const auto& now = dialog.result().ranked;
        const double best = now.front().plan.time.tokens_per_s;
        int ties = 0;
        for (std::size_t i = 1; i < now.size(); ++i) ties += now[i].plan.time.tokens_per_s >= 0.98 * best;
        const QString text = dialog.nearTies();
        QCOMPARE(text.isEmpty() ? 0 : static_cast<int>(text.count('\n')), ties);
        if (ties) QVERIFY2(text.contains("behind"), qPrintable(text));
    }

    void presets_come_smallest_model_first() {
        DesignerView view;
        auto* presets = view.findChild<QComboBox*>(QStringLiteral("presets"));
        QVERIFY(presets && presets->count() > 3);
        int64_t last = 0;
        for (int i = 1; i < presets->count(); ++i) {
            const int64_t p = preset_parameters(presets->itemData(i).toString().toStdString());
            QVERIFY2(p >= last, qPrintable(presets->itemText(i)));
            QVERIFY(p > 0);
            last = p;
        }
        QCOMPARE(presets->itemData(1).toString(), QString("tiny-cpu-demo"));
        QVERIFY(presets->itemText(presets->count() - 1).contains(QStringLiteral(" T)")) ||
                presets->itemText(presets->count() - 1).contains(QStringLiteral(" B)")));
    }

    void ticks_are_round_numbers_with_si_prefixes_and_log_labels_between_decades() {
        QCOMPARE(format_tick(2500, 500), std::string("2.5k"));
        QCOMPARE(format_tick(3e-4, 1e-4), std::string("300µ"));
        QCOMPARE(format_tick(0.994, 0.002), std::string("0.994"));
        QCOMPARE(format_tick(0.005, 0.005, 0.025), std::string("0.005"));  // one prefix per axis
        QCOMPARE(format_tick(2000, 1000, 1.2e6), std::string("0.002M"));
        QCOMPARE(format_tick(5e8, 2.5e8), std::string("500M"));
        const auto t = nice_ticks(10, 300, 5);
        QCOMPARE(t, (std::vector<double>{50, 100, 150, 200, 250, 300}));
        const auto lt = log_ticks(1.5, 12, 5);
        QVERIFY(std::find(lt.begin(), lt.end(), 2.0) != lt.end() && std::find(lt.begin(), lt.end(), 5.0) != lt.end());

        PlotView plot(QStringLiteral("t"));
        plot.resize(600, 300);
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        plot.refresh();
        const QStringList empty = plot.tickLabels(QStringLiteral("y"));  // was "0 0 1 1 1"
        QVERIFY2(QSet<QString>(empty.begin(), empty.end()).size() == empty.size() && empty.size() >= 2, qPrintable(empty.join(' ')));
        Trace t1 = ramp(291, 10, 1, 10);  // x 10..300, y 10..300
        PlotView::LineStyle style;
        style.color = Qt::blue;
        plot.setTrace(plot.addLine(QStringLiteral("a"), style), &t1);
        plot.refresh();
        QVERIFY2(round_labels(plot.tickLabels(QStringLiteral("x"))), qPrintable(plot.tickLabels("x").join(' ')));
        QVERIFY2(round_labels(plot.tickLabels(QStringLiteral("y"))), qPrintable(plot.tickLabels("y").join(' ')));
        // big values: SI prefixes
        Trace big = ramp(100, 0, 2.5e6);
        plot.setTrace(0, &big);
        plot.refresh();
        QVERIFY2(plot.tickLabels(QStringLiteral("y")).join(' ').contains('M'), qPrintable(plot.tickLabels("y").join(' ')));
        // log scale by key press, labelled between the decades (a loss from 11 down to 2)
        Trace loss;
        for (int i = 0; i < 200; ++i) loss.append(i, 2 + 9 * std::exp(-i / 30.0));
        plot.setTrace(0, &loss);
        plot.setFocus();
        QTest::keyClick(&plot, Qt::Key_L);
        QVERIFY(plot.logY());
        const QStringList log_labels = plot.tickLabels(QStringLiteral("y"));
        QVERIFY2(log_labels.contains(QStringLiteral("2")) && log_labels.contains(QStringLiteral("5")) &&
                     log_labels.contains(QStringLiteral("10")),
                 qPrintable(log_labels.join(' ')));
        const auto pts = plot.drawnPoints(0);
        QVERIFY(!pts.isEmpty());
        QVERIFY(std::abs(pts.front().y() - std::log10(11.0)) < 1e-9);  // drawn as log10
    }

    void every_monitor_axis_has_round_ticks_the_mfu_axis_too() {
        MonitorView view;
        view.resize(1300, 800);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        RunTraces& tr = view.liveRun()->traces();
        const double peak = 98;  // MFU 26-56 %: the issue saw "10, 83, 155, 228, 300" and "3.1 %, 8.7 %"
        for (int i = 10; i <= 300; ++i) {
            const double tflops = 40 + 15 * std::sin(i / 20.0);
            tr[SeriesId::Loss].append(i, 3.0 - i * 1e-3);
            tr[SeriesId::Lr].append(i, 3e-4 * i / 300);
            tr[SeriesId::TokensPerSec].append(i, 1.2e6 + 3e4 * std::cos(i / 7.0));
            tr[SeriesId::Tflops].append(i, tflops);
            tr[SeriesId::Mfu].append(i, tflops / peak);
            tr[SeriesId::IterationTime].append(i, 0.25 + 0.01 * (i % 5));
        }
        view.redraw();
        QTest::qWait(30);  // the layout settles; the next tick draws at the final width
        view.redraw();
        for (auto c : {MetricCharts::LossChart, MetricCharts::LrChart, MetricCharts::ThroughputChart,
                       MetricCharts::TflopsChart, MetricCharts::IterationTimeChart}) {
            PlotView* p = view.charts()->chart(c);
            for (const char* axis : {"x", "y"})
                QVERIFY2(one_two_five(p->tickLabels(QLatin1String(axis))),
                         qPrintable(QStringLiteral("chart %1 %2: %3").arg(c).arg(axis, p->tickLabels(axis).join(' '))));
        }
        PlotView* tf = view.charts()->chart(MetricCharts::TflopsChart);
        QVERIFY(tf->hasRightAxis());
        const QStringList mfu = tf->tickLabels(QStringLiteral("right"));
        QVERIFY2(one_two_five(mfu, QStringLiteral("%")), qPrintable(mfu.join(' ')));
        // where they stand: the right axis' labels mark the left axis' values times 100 / peak
        const auto [lo, hi] = tf->yRange();
        QVERIFY2(mfu.size() >= 3, qPrintable(mfu.join(' ')));
        QString text = mfu.front();
        text.remove(QChar(0x200B)).chop(1);
        const double first = text.toDouble();
        QVERIFY2(first >= lo * 100 / peak - 1e-9 && first <= hi * 100 / peak + 1e-9,
                 qPrintable(QStringLiteral("%1 outside [%2, %3]").arg(mfu.join(' ')).arg(lo * 100 / peak).arg(hi * 100 / peak)));
        // the log scale too
        tf->setLogY(true);
        QVERIFY2(!tf->tickLabels(QStringLiteral("right")).isEmpty(), "no MFU ticks on the log scale");
        view.detach();
    }

    void an_idle_chart_does_not_redraw() {
        PlotView plot(QStringLiteral("t"));
        plot.resize(500, 300);
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        Trace t = ramp(1000);
        PlotView::LineStyle style;
        style.color = Qt::red;
        plot.setTrace(plot.addLine(QStringLiteral("a"), style), &t);
        plot.refresh();
        QTest::qWait(50);  // the chart lays out its new axis labels once
        plot.refresh();
        const int drawn = plot.redraws();
        for (int i = 0; i < 20; ++i) plot.refresh();  // the coalescing timer with nothing new
        QCOMPARE(plot.redraws(), drawn);
        t.append(1000, 5);
        plot.refresh();
        QCOMPARE(plot.redraws(), drawn + 1);
    }

    void the_next_run_does_not_keep_the_last_runs_zoom_or_mfu_axis() {
        MonitorView view;
        view.resize(1300, 800);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        RunTraces& tr = view.liveRun()->traces();
        for (int i = 4000; i < 7600; ++i) {
            tr[SeriesId::Loss].append(i, 3.0 - i * 1e-4);
            tr[SeriesId::Tflops].append(i, 50);
            tr[SeriesId::Mfu].append(i, 8.82);  // a peak of 5.67 TFLOP/s: "882 %"
        }
        view.redraw();
        PlotView* loss = view.charts()->chart(MetricCharts::LossChart);
        QVERIFY(view.charts()->chart(MetricCharts::TflopsChart)->hasRightAxis());
        wheel(loss->viewport(), 120, loss->viewport()->rect().center());  // zoom in
        QVERIFY(!loss->following());
        // another run starts (attach clears the traces)
        AttachOptions o;
        o.endpoint = (QDir::tempPath() + QStringLiteral("/mwb-no-run-here-%1").arg(QCoreApplication::applicationPid()))
                         .toStdString();
        view.attach(o);
        for (int i = 1; i <= 50; ++i) tr[SeriesId::Loss].append(i, 10.0 - i * 0.01);
        view.redraw();
        QVERIFY(loss->following());
        QVERIFY(!view.charts()->chart(MetricCharts::TflopsChart)->hasRightAxis());
        const auto [x0, x1] = loss->visibleXRange();
        QCOMPARE(x0, 1.0);
        QCOMPARE(x1, 50.0);
        QVERIFY(loss->drawnPoints(0).size() > 10);  // the new run is drawn, not an empty chart
        view.detach();
    }

    void any_recorded_metric_becomes_a_chart_and_the_arrangement_is_remembered() {
        QTemporaryDir settings;
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, settings.path());
        MainWindow w;
        w.resize(1400, 900);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        RunTraces& tr = w.monitor()->liveRun()->traces();
        Update u;
        u.run_id = "r";
        for (int i = 1; i <= 30; ++i) {
            mwb::ipc::Message m;
            m.topic = "step";
            m.run_id = "r";
            m.seq = i;
            m.body = {{"iteration", i},
                      {"lm_loss", 3.0},
                      {"skipped_iterations", 0},
                      {"ranks", {{{"rank", 0}, {"time", {{"forward_s", 0.1 * i}}}},
                                 {{"rank", 1}, {"time", {{"forward_s", 0.2 * i}}}}}}};
            digest(u, m);
        }
        tr.apply(std::move(u));
        MetricCharts* charts = w.monitor()->charts();
        QVERIFY(charts->availableMetrics().contains("rank1.time.forward_s"));
        // the Add chart menu lists them (per rank in a submenu); choosing one adds its chart
        emit charts->addMenu()->aboutToShow();
        QAction* pick = nullptr;
        for (QAction* a : charts->addMenu()->findChildren<QAction*>())
            if (a->text() == QLatin1String("rank1.time.forward_s")) pick = a;
        QVERIFY(pick);
        pick->trigger();
        emit charts->addMenu()->aboutToShow();
        for (QAction* a : charts->addMenu()->findChildren<QAction*>())
            if (a->text() == QLatin1String("skipped_iterations")) a->trigger();
        QCOMPARE(charts->customCharts(), (QStringList{"rank1.time.forward_s", "skipped_iterations"}));
        charts->setSmoothing(0);
        w.monitor()->redraw();
        const auto pts = charts->customChart(0)->drawnPoints(0);
        QCOMPARE(pts.size(), 30);
        QCOMPARE(pts.last().y(), 0.2 * 30);
        // rearranged from the chart's own menu, then remembered
        for (QAction* a : charts->customChart(1)->findChildren<QAction*>())
            if (a->text() == QLatin1String("Move left")) a->trigger();
        QCOMPARE(charts->customCharts(), (QStringList{"skipped_iterations", "rank1.time.forward_s"}));
        w.saveSettings();
        MainWindow again;
        again.restoreSettings();
        QCOMPARE(again.monitor()->charts()->customCharts(), (QStringList{"skipped_iterations", "rank1.time.forward_s"}));
        for (QAction* a : charts->customChart(0)->findChildren<QAction*>())
            if (a->text() == QLatin1String("Remove chart")) a->trigger();
        QCOMPARE(charts->customCharts(), QStringList{"rank1.time.forward_s"});
    }

    void the_crosshair_follows_the_mouse_on_every_chart_with_each_value() {
        MonitorView view;
        view.resize(1300, 800);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        RunTraces& tr = view.liveRun()->traces();
        for (int i = 1; i <= 100; ++i) {
            tr[SeriesId::Loss].append(i, 5.0 - i * 0.01);
            tr[SeriesId::Lr].append(i, 1e-4 * i);
        }
        view.charts()->setSmoothing(0);
        view.redraw();
        PlotView* loss = view.charts()->chart(MetricCharts::LossChart);
        PlotView* lr = view.charts()->chart(MetricCharts::LrChart);
        const QRectF area = loss->chart()->mapToScene(loss->chart()->plotArea()).boundingRect();
        const QPoint mid = loss->mapFromScene(area.center());
        QTest::mouseMove(loss->viewport(), mid);
        QTRY_VERIFY(lr->crosshair().has_value());
        const double x = *lr->crosshair();
        QVERIFY(x > 1 && x < 100);
        const QStringList values = lr->crosshairValues();
        QCOMPARE(values.size(), 1);
        const double at = std::floor(x + 1e-9);
        QVERIFY2(values[0].contains(format_value(1e-4 * at)), qPrintable(values[0] + " at " + QString::number(x)));
        QVERIFY(!loss->crosshairValues().isEmpty());
    }

    void the_status_line_says_paused_and_a_long_error_stays_one_line() {
        StatusLine line;
        line.resize(600, 40);
        line.show();
        QVERIFY(QTest::qWaitForWindowExposed(&line));
        RunTraces t;
        t.run_id = "r";
        RunStart s;
        s.config = {{"train_iters", 100}};
        t.start = s;
        t.last_step.iteration = 10;
        t.last_step.iteration_time_s = 1;
        for (int i = 1; i <= 10; ++i) t[SeriesId::IterationTime].append(i, 1);
        LinkState link;
        link.connected = true;
        line.update(t, link, true, true);
        QCOMPARE(line.part("link"), QString("paused"));
        QVERIFY(line.part("eta").contains("paused"));
        // the first step after resuming took the whole pause: the ETA does not jump with it
        t[SeriesId::IterationTime].append(11, 600);
        t.last_step.iteration = 11;
        t.last_step.iteration_time_s = 600;
        QCOMPARE(eta_seconds(t), 89.0);
        const int one_line = line.sizeHint().height();
        link.error = std::string(600, 'e');
        line.update(t, link, true);
        QCOMPARE(line.sizeHint().height(), one_line);
        QVERIFY(line.sizeHint().width() <= 600 || line.sizePolicy().horizontalPolicy() == QSizePolicy::Ignored);
        QVERIFY(line.toolTip().contains(QString(600, 'e')));
        QVERIFY(line.fullText().contains(QString(600, 'e')));
    }

    void the_control_buttons_stay_put_when_the_answer_changes() {
        ControlBar bar;
        bar.show();
        QVERIFY(QTest::qWaitForWindowExposed(&bar));
        const QPoint before = bar.button("stop")->pos();
        bar.stateLabel()->setText(QString(300, 'w'));
        bar.adjustSize();
        QCOMPARE(bar.button("stop")->pos(), before);
        QCOMPARE(bar.stateLabel()->width(), bar.stateLabel()->minimumWidth());
    }

    void the_launch_view_says_where_checkpoints_go() {
        QCOMPARE(checkpoint_location("srun mwb-train --config c.json --save /scratch/ckpt --run-dir x"),
                 QString("/scratch/ckpt"));
        QCOMPARE(checkpoint_location("cat <<'EOF'\n{\n  \"save\": \"/lustre/me/ckpt\"\n}\nEOF"), QString("/lustre/me/ckpt"));
        QVERIFY(checkpoint_location("RUN_DIR=\"$HOME/mwb-runs/${SLURM_JOB_NAME}\"\n").contains("$HOME/mwb-runs"));
        // The generated script names its checkpoint directory through shell variables: expanded.
        QCOMPARE(checkpoint_location("RUN_DIR=\"/lustre/runs/job\"\nCKPT=\"$RUN_DIR/checkpoints\"\n"
                                     "srun mwb-train --save \"$CKPT\" --load \"$CKPT\"\n"),
                 QString("/lustre/runs/job/checkpoints"));
        LaunchView view;
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        auto* label = view.findChild<QLabel*>(QStringLiteral("slurm_checkpoints"));
        QVERIFY(label);
        QCOMPARE(label->text(), QString("Checkpoints go to %1").arg(checkpoint_location(view.slurmScript())));
        QVERIFY2(label->text().contains("/checkpoints") && !label->text().contains("$CKPT") &&
                     !label->text().contains("$RUN_DIR"),
                 qPrintable(label->text()));
    }

    void a_kill_is_reported_once_as_interrupted() {
        QCOMPARE(describe_exit(SIGKILL, true), QString("killed by signal 9 (SIGKILL)"));
        const ProcessEnd kill = process_end(SIGKILL, true);
        QCOMPARE(kill.status, std::string("interrupted"));
        QCOMPARE(kill.reason, std::string("killed by signal 9 (SIGKILL)"));
        QCOMPARE(process_end(SIGSEGV, true).status, std::string("failed"));
        QCOMPARE(process_end(1, false).status, std::string("failed"));
    }
};

MWB_TEST_SUITE_WIDGETS(test_use_faults, TestUseFaults)
}  // namespace test_use_faults
#include "test_use_faults.moc"
