// Drawing stays bounded by pixels, not by points: a 1M-point trace is drawn as at most two points per
// pixel column (counted, not timed), with every column's true minimum and maximum kept (checked
// against a brute-force pass over the points, for the decimation and for what a zoomed PlotView
// draws, whose pixels are then looked at); the Monitor's charts over a 1M-point run do the same;
// the min/max index agrees with a linear scan on random ranges.
#include "app/live/run_traces.h"
#include "app/monitor/metric_charts.h"
#include "app/plot/plot_view.h"
#include "app/plot/trace.h"
#include "mwb/ipc/metrics.h"

#include "support/suite.h"

#include <QElapsedTimer>

#include <QtTest>

#include <cmath>
#include <random>
#include <set>

namespace test_plot {

using namespace mwb::app;

namespace {

Trace noisy_trace(std::size_t n, std::size_t spike_at) {
    Trace t;
    std::mt19937 rng(7);
    std::normal_distribution<double> noise(0, 0.05);
    for (std::size_t i = 0; i < n; ++i) {
        const double x = static_cast<double>(i);
        t.append(x, 10.0 * std::exp(-x / 3e5) + noise(rng) + (i == spike_at ? 50.0 : 0.0));
    }
    return t;
}

}  // namespace

class TestPlot : public QObject {
    Q_OBJECT
private slots:
    void the_index_agrees_with_a_scan() {
        const Trace t = noisy_trace(100000, 4321);
        std::mt19937 rng(1);
        for (int k = 0; k < 200; ++k) {
            std::size_t i0 = rng() % t.size(), i1 = rng() % t.size();
            if (i0 > i1) std::swap(i0, i1);
            ++i1;
            const auto [imin, imax] = t.index.argminmax(t.y, i0, i1);
            const auto mm = std::minmax_element(t.y.begin() + static_cast<std::ptrdiff_t>(i0),
                                                t.y.begin() + static_cast<std::ptrdiff_t>(i1));
            QCOMPARE(t.y[imin], *mm.first);
            QCOMPARE(t.y[imax], *mm.second);
        }
    }

    void a_million_points_decimate_to_the_columns_with_their_extremes() {
        const std::size_t n = 1000000;
        const Trace t = noisy_trace(n, 777777);
        const int columns = 800;
        std::vector<PlotPoint> out;
        decimate_minmax(t, 0, static_cast<double>(n - 1), columns, out);
        QVERIFY(out.size() <= static_cast<std::size_t>(2 * columns + 2));
        QVERIFY(out.size() >= static_cast<std::size_t>(columns));
        // brute force: each column's min and max are among the drawn points
        const double width = static_cast<double>(n - 1) / columns;
        std::vector<double> lo(columns, INFINITY), hi(columns, -INFINITY);
        for (std::size_t i = 0; i < n; ++i) {
            const int c = std::min(columns - 1, static_cast<int>(t.x[i] / width));
            lo[static_cast<std::size_t>(c)] = std::min(lo[static_cast<std::size_t>(c)], t.y[i]);
            hi[static_cast<std::size_t>(c)] = std::max(hi[static_cast<std::size_t>(c)], t.y[i]);
        }
        std::vector<double> dlo(columns, INFINITY), dhi(columns, -INFINITY);
        for (const auto& p : out) {
            const int c = std::clamp(static_cast<int>(p.x / width), 0, columns - 1);
            dlo[static_cast<std::size_t>(c)] = std::min(dlo[static_cast<std::size_t>(c)], p.y);
            dhi[static_cast<std::size_t>(c)] = std::max(dhi[static_cast<std::size_t>(c)], p.y);
        }
        int exact = 0;
        for (int c = 0; c < columns; ++c)
            exact += dlo[static_cast<std::size_t>(c)] == lo[static_cast<std::size_t>(c)] &&
                     dhi[static_cast<std::size_t>(c)] == hi[static_cast<std::size_t>(c)];
        // column edges may be rounded differently by one point; the extremes must survive nearly everywhere
        QVERIFY2(exact >= columns - 2, qPrintable(QString("%1 of %2 columns exact").arg(exact).arg(columns)));
        QVERIFY(std::any_of(out.begin(), out.end(), [](const PlotPoint& p) { return p.y > 50; }));  // the spike
    }

    void a_zoomed_plot_view_draws_the_envelope_of_every_pixel_column() {
        const Trace t = noisy_trace(1000000, 345678);
        PlotView view("loss");
        view.resize(900, 500);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        const QColor blue(0, 0, 255);
        PlotView::LineStyle style{blue, 1.0};
        style.smooth = false;
        view.setTrace(view.addLine("loss", style), &t);
        view.refresh();
        QTest::qWait(20);
        const double x0 = 300000, x1 = 400000;
        view.setXRange(x0, x1);
        const int columns = std::max(50, static_cast<int>(view.chart()->plotArea().width()));
        // brute force: the smallest and largest y of every column over the points inside [x0, x1]
        const double width = (x1 - x0) / columns;
        std::vector<double> lo(static_cast<std::size_t>(columns), INFINITY), hi(lo.size(), -INFINITY);
        for (std::size_t i = 0; i < t.size(); ++i) {
            if (t.x[i] < x0 || t.x[i] > x1) continue;
            const auto c = static_cast<std::size_t>(std::min(columns - 1, static_cast<int>((t.x[i] - x0) / width)));
            lo[c] = std::min(lo[c], t.y[i]);
            hi[c] = std::max(hi[c], t.y[i]);
        }
        std::vector<std::vector<double>> drawn(lo.size());
        const QList<QPointF> pts = view.drawnPoints(0);
        QCOMPARE(view.pointsDrawn(), static_cast<int>(pts.size()));
        for (const QPointF& p : pts) {
            if (p.x() < x0 || p.x() > x1) continue;  // the neighbours that carry the line to the edges
            const auto c = static_cast<std::size_t>(std::min(columns - 1, static_cast<int>((p.x() - x0) / width)));
            drawn[c].push_back(p.y());
        }
        for (std::size_t c = 0; c < lo.size(); ++c) {
            if (!std::isfinite(lo[c])) continue;
            QVERIFY2(drawn[c].size() <= 2, qPrintable(QString("column %1: %2 points").arg(c).arg(drawn[c].size())));
            const auto mm = std::minmax_element(drawn[c].begin(), drawn[c].end());
            QVERIFY2(!drawn[c].empty() && *mm.first == lo[c] && *mm.second == hi[c],
                     qPrintable(QString("column %1: drawn [%2, %3], data [%4, %5]")
                                    .arg(c)
                                    .arg(drawn[c].empty() ? NAN : *mm.first)
                                    .arg(drawn[c].empty() ? NAN : *mm.second)
                                    .arg(lo[c])
                                    .arg(hi[c])));
        }
        // the pixels: the spike's column is painted in the line's colour up to where the spike is
        const QImage img = view.grab().toImage();
        const auto line_pixel = [&img](int x, int y) {  // blue, antialiased edges included
            const QColor c(img.pixel(x, y));
            return c.blue() - std::max(c.red(), c.green()) > 60;
        };
        const QRect area = view.mapFromScene(view.chart()->mapToScene(view.chart()->plotArea())).boundingRect();
        const auto [ya, yb] = view.yRange();
        const int px = area.left() + static_cast<int>((345678 - x0) / (x1 - x0) * area.width());
        const int py = area.bottom() - static_cast<int>((t.y[345678] - ya) / (yb - ya) * area.height());
        int top = img.height();
        for (int x = px - 2; x <= px + 2; ++x)
            for (int y = area.top(); y <= area.bottom(); ++y)
                if (line_pixel(x, y)) top = std::min(top, y);
        QVERIFY2(std::abs(top - py) <= 3, qPrintable(QString("spike drawn up to row %1, expected %2").arg(top).arg(py)));
        // and nothing is painted above it
        int above = 0;
        for (int y = area.top(); y < py - 3; ++y)
            for (int x = area.left(); x <= area.right(); ++x) above += line_pixel(x, y);
        QCOMPARE(above, 0);
    }

    void a_plot_view_draws_a_bounded_number_of_points() {
        const Trace t = noisy_trace(1000000, 123456);
        PlotView view("loss");
        view.resize(1000, 600);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.setTrace(view.addLine("loss", {Qt::blue, 1.5}), &t);
        view.refresh();
        // the first refresh sets the axes' ranges, whose labels then take their width from the plot
        // area: draw again once the layout settled (as the Monitor's next timer tick would)
        QTest::qWait(20);
        view.refresh();
        const int columns = static_cast<int>(view.chart()->plotArea().width());
        QVERIFY(columns > 500);
        QVERIFY2(view.pointsDrawn() <= 2 * columns + 4, qPrintable(QString::number(view.pointsDrawn())));
        QVERIFY(view.pointsDrawn() > columns / 2);
        // zoomed into a tenth: still bounded by the pixels
        view.setXRange(100000, 200000);
        QVERIFY(view.pointsDrawn() <= 2 * columns + 4);
        qInfo("1M points -> %d drawn (%d columns), refresh %.1f ms", view.pointsDrawn(), columns, view.lastRefreshMs());
        std::vector<PlotPoint> out;
        QElapsedTimer timer;
        timer.start();
        for (int k = 0; k < 10; ++k) decimate_minmax(t, 0, 999999, columns, out);
        qInfo("decimate_minmax of 1M points to %d columns: %.2f ms", columns,
              static_cast<double>(timer.nsecsElapsed()) / 1e7);
    }

    // The built-in charts are titled from the metric table (ipc/metrics.cpp): each chart's title and
    // value axis are its rows', every row's legend name is one of its series; rows sharing a chart
    // agree; and what the screen showed before the table did stays.
    void the_monitor_charts_take_their_texts_from_the_metric_table() {
        RunTraces traces;
        MetricCharts charts(traces);
        std::set<SeriesId> drawn;
        for (int c = 0; c < MetricCharts::ChartCount; ++c) {
            const auto chart = static_cast<MetricCharts::Chart>(c);
            PlotView* p = charts.chart(chart);
            QStringList names;
            for (const QAbstractSeries* s : p->chart()->series()) names << s->name();
            for (SeriesId s : MetricCharts::seriesOf(chart)) {
                QVERIFY(drawn.insert(s).second);  // each series in one chart
                const mwb::ipc::Metric& m = mwb::ipc::metric_of_series(s);
                const QString what = QString::fromLatin1(m.name.data(), static_cast<qsizetype>(m.name.size()));
                QCOMPARE(p->chart()->title(), QString::fromUtf8(std::string(mwb::ipc::chart_title(m)).c_str()));
                QCOMPARE(p->yTitle(), QString::fromUtf8(std::string(m.chart.axis).c_str()));
                QVERIFY2(names.contains(QString::fromUtf8(std::string(mwb::ipc::chart_line(m)).c_str())),
                         qPrintable(what + ": " + names.join(',')));
            }
        }
        const auto title = [&](MetricCharts::Chart c) { return charts.chart(c)->chart()->title(); };
        QCOMPARE(title(MetricCharts::LossChart), QStringLiteral("Loss"));
        QCOMPARE(charts.chart(MetricCharts::LossChart)->yTitle(), QStringLiteral("nats/token"));
        QCOMPARE(title(MetricCharts::LrChart), QStringLiteral("Learning rate"));
        QCOMPARE(title(MetricCharts::GradNormChart), QStringLiteral("Gradient norm"));
        QCOMPARE(title(MetricCharts::LossScaleChart), QStringLiteral("Loss scale"));
        QCOMPARE(title(MetricCharts::ThroughputChart), QStringLiteral("Tokens/s"));
        QCOMPARE(title(MetricCharts::TflopsChart), QStringLiteral("TFLOP/s per device"));
        QCOMPARE(title(MetricCharts::StepTimeChart), QStringLiteral("Step time"));
        QCOMPARE(title(MetricCharts::IterationTimeChart), QStringLiteral("Iteration time"));
        QCOMPARE(charts.chart(MetricCharts::IterationTimeChart)->yTitle(), QStringLiteral("s (wall, mean per record)"));
    }

    void the_monitor_charts_stay_bounded_for_a_million_point_run() {
        RunTraces traces;
        Update u;
        u.run_id = "big";
        for (int i = 1; i <= 1000000; ++i) {
            const double x = i;
            u.points[series_index(SeriesId::Loss)].push_back({x, 5.0 / std::sqrt(x)});
            u.points[series_index(SeriesId::TokensPerSec)].push_back({x, 1000.0 + (i % 97)});
            u.points[series_index(SeriesId::Compute)].push_back({x, 0.5});
            u.points[series_index(SeriesId::Communication)].push_back({x, 0.1});
            u.points[series_index(SeriesId::Bubble)].push_back({x, 0.05});
        }
        traces.apply(std::move(u));
        QCOMPARE(traces[SeriesId::Loss].size(), std::size_t{1000000});
        MetricCharts charts(traces);
        charts.resize(1500, 1000);
        charts.show();
        QVERIFY(QTest::qWaitForWindowExposed(&charts));
        charts.refresh();
        QTest::qWait(20);
        charts.refresh();
        for (int c = 0; c < MetricCharts::ChartCount; ++c) {
            PlotView* p = charts.chart(static_cast<MetricCharts::Chart>(c));
            const int columns = std::max(50, static_cast<int>(p->chart()->plotArea().width()));
            // every line raw (faint) + smoothed (validation: empty); step time: three stacked areas of two edges
            const int lines = c == MetricCharts::StepTimeChart ? 6 : 2;
            QVERIFY2(
                p->pointsDrawn() <= lines * (2 * columns + 4),
                qPrintable(QString("chart %1: %2 points for %3 columns").arg(c).arg(p->pointsDrawn()).arg(columns)));
        }
        QVERIFY(charts.chart(MetricCharts::LossChart)->pointsDrawn() > 0);
        QVERIFY(charts.chart(MetricCharts::StepTimeChart)->pointsDrawn() > 0);
        charts.setSmoothing(0.5);  // every chart draws again (an unchanged chart does not)
        QElapsedTimer timer;
        timer.start();
        charts.refresh();
        double sum = 0;
        for (int c = 0; c < MetricCharts::ChartCount; ++c)
            sum += charts.chart(static_cast<MetricCharts::Chart>(c))->lastRefreshMs();
        qInfo("Monitor charts over 1M-point series: refresh %.1f ms (PlotView::refresh total %.1f ms)",
              static_cast<double>(timer.nsecsElapsed()) / 1e6, sum);
        std::vector<double> paints;
        for (int k = 0; k < 5; ++k) {
            timer.restart();
            (void)charts.grab();  // paints every chart into an image, as a window update would
            paints.push_back(static_cast<double>(timer.nsecsElapsed()) / 1e6);
        }
        std::sort(paints.begin(), paints.end());
        qInfo("Monitor charts over 1M-point series: painting %.1f ms (median of 5)", paints[2]);
    }
};

MWB_TEST_SUITE_WIDGETS(test_plot, TestPlot)
}  // namespace test_plot
#include "test_plot.moc"
