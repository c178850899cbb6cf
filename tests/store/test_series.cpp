// Downsampling: the block-accelerated series() against series_brute_force(), which reads every point,
// over random runs (log intervals, NULLs, iterations repeated by a resumed run, values arriving over
// several transactions), random ranges and bucket counts. min, max, counts and first/last iteration
// per bucket must be identical; means agree to rounding.
#include "ipc/wire_fixtures.h"
#include "support/fixtures.h"
#include "support/suite.h"

#include "mwb/store/error.h"
#include "mwb/store/store.h"

#include <QtTest>

#include <map>
#include <random>

namespace test_store_series {

using namespace mwb;
using nlohmann::json;

namespace {

/// Ingests `n` step records of run `uid` every `interval` iterations from `first`, some losses NULL.
void add_steps(store::Store& s, const std::string& uid, int64_t& seq, int64_t first, int64_t n, int64_t interval,
               std::mt19937& rng) {
    std::normal_distribution<double> noise(0, 0.3);
    std::uniform_int_distribution<int> p(0, 99);
    store::Store::Transaction tx(s);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t it = first + i * interval;
        json f = {
            {"iteration", it}, {"lr", 1e-4 * static_cast<double>(it % 1000)}, {"tokens_per_sec", 1000 + noise(rng)}};
        f["lm_loss"] = p(rng) < 5 ? json(nullptr) : json(3.0 + 2.0 / (1 + 0.01 * static_cast<double>(it)) + noise(rng));
        s.ingest(*ipc::parse_message(test::wire_message(uid, seq++, "step", f)));
    }
    tx.commit();
}

void compare(store::Store& s, const std::string& uid, const std::string& metric, const store::SeriesQuery& q) {
    const auto fast = s.series(uid, metric, q), slow = s.series_brute_force(uid, metric, q);
    const QString what =
        QString("%1 %2 [%3, %4] / %5 buckets")
            .arg(QString::fromStdString(uid), QString::fromStdString(metric))
            .arg(q.x_from ? QString::number(*q.x_from) : "min", q.x_to ? QString::number(*q.x_to) : "max")
            .arg(q.buckets);
    QVERIFY2(fast.points == slow.points,
             qPrintable(what + QString(": points %1 vs %2").arg(fast.points).arg(slow.points)));
    QVERIFY2(fast.raw == slow.raw, qPrintable(what));
    QVERIFY2(fast.buckets.size() == slow.buckets.size(), qPrintable(what));
    for (std::size_t i = 0; i < fast.buckets.size(); ++i) {
        const auto &a = fast.buckets[i], &b = slow.buckets[i];
        QVERIFY2(a.x_min == b.x_min && a.x_max == b.x_max && a.n == b.n && a.y_min == b.y_min && a.y_max == b.y_max,
                 qPrintable(what + QString(": bucket %1").arg(i)));
        QVERIFY2(std::abs(a.y_mean - b.y_mean) <= 1e-12 * (1 + std::abs(b.y_mean)), qPrintable(what + " mean"));
    }
}

}  // namespace

class TestStoreSeries : public QObject {
    Q_OBJECT
private slots:
    void block_downsampling_equals_brute_force() {
        test::TempDir t;
        store::Store s(t / "h.sqlite");
        std::mt19937 rng(11);
        struct Case {
            std::string uid;
            int64_t log_interval, steps;
        };
        for (const Case& c : {Case{"every", 1, 5000}, Case{"seven", 7, 3000}, Case{"hundred", 100, 2000}}) {
            int64_t seq = 0;
            s.ingest(*ipc::parse_message(test::wire_message(
                c.uid, seq++, "run.start", {{"config", {{"log_interval", c.log_interval}}}, {"iteration", 0}})));
            add_steps(s, c.uid, seq, c.log_interval, c.steps / 2, c.log_interval, rng);
            // Resumed from an earlier checkpoint: some iterations come again, in another transaction.
            const int64_t back = c.log_interval * (c.steps / 2 - 40);
            add_steps(s, c.uid, seq, back, c.steps / 2, c.log_interval, rng);
            const int64_t last = back + c.log_interval * (c.steps / 2 - 1);
            std::uniform_int_distribution<int64_t> x(0, last + 10);
            for (const int buckets : {1, 2, 3, 17, 100, 1000, 100000}) {
                compare(s, c.uid, "lm_loss", {std::nullopt, std::nullopt, buckets});
                compare(s, c.uid, "tokens_per_sec", {std::nullopt, std::nullopt, buckets});
            }
            for (int trial = 0; trial < 60; ++trial) {
                int64_t a = x(rng), b = x(rng);
                if (a > b) std::swap(a, b);
                const int buckets = std::uniform_int_distribution<int>(1, 400)(rng);
                compare(s, c.uid, trial % 2 ? "lm_loss" : "lr", {a, b, buckets});
            }
        }
    }

    void wall_clock_reads_the_time_of_each_anchor_iteration() {
        test::TempDir t;
        store::Store s(t / "h.sqlite");
        const double t0 = 1.8e9;
        int64_t seq = 0;
        s.ingest(*ipc::parse_message(test::wire_message("w", seq++, "run.start", {{"iteration", 0}}, t0)));
        // every 7th iteration, 0.25 s per iteration, then resumed from iteration 700 (those come again, later)
        std::map<int64_t, double> first_time;  // the reference: the first stored step of each iteration
        auto step = [&](int64_t it, double time) {
            s.ingest(*ipc::parse_message(test::wire_message("w", seq++, "step", {{"iteration", it}}, time)));
            first_time.emplace(it, time);
        };
        for (int64_t it = 7; it <= 1400; it += 7) step(it, t0 + 0.25 * static_cast<double>(it));
        for (int64_t it = 700; it <= 2100; it += 7) step(it, t0 + 400 + 0.25 * static_cast<double>(it));
        for (const int anchors : {2, 3, 50, 5000}) {
            const auto points = s.wall_clock("w", anchors);
            QVERIFY(points.size() >= 2 && points.size() <= static_cast<std::size_t>(anchors));
            QCOMPARE(points.front().iteration, int64_t{7});
            QCOMPARE(points.back().iteration, int64_t{2100});
            for (std::size_t i = 0; i < points.size(); ++i) {
                if (i > 0) QVERIFY(points[i].iteration > points[i - 1].iteration);
                QVERIFY(first_time.count(points[i].iteration));
                QCOMPARE(points[i].seconds, first_time[points[i].iteration] - t0);
            }
            if (anchors == 5000) QCOMPARE(points.size(), first_time.size());  // every stored iteration
        }
        QVERIFY_THROWS_EXCEPTION(store::Error, s.wall_clock("no such run"));
    }

    void buckets_are_exact_on_a_known_series() {
        test::TempDir t;
        store::Store s(t / "h.sqlite");
        int64_t seq = 0;
        store::Store::Transaction tx(s);
        for (int64_t it = 1; it <= 1000; ++it)
            s.ingest(*ipc::parse_message(
                test::wire_message("k", seq++, "step", {{"iteration", it}, {"lm_loss", static_cast<double>(it)}})));
        tx.commit();
        const auto r = s.series("k", "lm_loss", {std::nullopt, std::nullopt, 10});
        QCOMPARE(r.points, 1000);
        QVERIFY(!r.raw);
        QCOMPARE(r.buckets.size(), std::size_t{10});
        for (int k = 0; k < 10; ++k) {  // iterations 1..1000 in ten buckets of 100
            QCOMPARE(r.buckets[k].x_min, 100 * k + 1);
            QCOMPARE(r.buckets[k].x_max, 100 * k + 100);
            QCOMPARE(r.buckets[k].y_min, 100.0 * k + 1);
            QCOMPARE(r.buckets[k].y_max, 100.0 * k + 100);
            QCOMPARE(r.buckets[k].y_mean, 100.0 * k + 50.5);
        }
        const auto raw = s.series("k", "lm_loss", {250, 259, 100});
        QVERIFY(raw.raw);
        QCOMPARE(raw.buckets.size(), std::size_t{10});
        QCOMPARE(raw.buckets.front().x_min, 250);
        QVERIFY(s.series("k", "lm_loss", {2000, 3000, 10}).buckets.empty());
        QVERIFY(s.series("k", "lm_loss", {500, 400, 10}).buckets.empty());
        const auto runs = s.series(std::vector<std::string>{"k", "k"}, "lm_loss", {std::nullopt, std::nullopt, 4});
        QCOMPARE(runs.size(), std::size_t{2});
        QCOMPARE(runs[1].buckets.size(), std::size_t{4});
    }
};

MWB_TEST_SUITE_GUILESS(test_store_series, TestStoreSeries)
}  // namespace test_store_series
#include "test_series.moc"
