// The History view over a temp SQLite store filled from three real mwb-train runs (two finished with
// different models, one stopped): the models pass QAbstractItemModelTester; rows, sorting and
// filtering agree with the runs' own metrics.jsonl; the overlay holds each selected run's series
// against iteration, tokens and wall time; the config diff agrees with the store's config_diff;
// CSV export equals the store's series; rename, tags, notes and delete persist in the file.
#include "test_monitor_fixtures.h"

#include "app/core/theme.h"
#include "app/history/compare_plot.h"
#include "app/history/config_diff_model.h"
#include "app/history/history_view.h"
#include "app/history/run_filter_proxy.h"
#include "app/history/run_list_model.h"
#include "app/history/scatter_plot.h"
#include "mwb/ipc/control_client.h"
#include "mwb/store/store.h"

#include "support/suite.h"

#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QLineEdit>
#include <QSignalSpy>
#include <QTableView>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace test_history {

using namespace mwb;
using namespace mwb::app;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

struct RunInfo {
    std::string uid;
    std::vector<ipc::Message> all, steps;
    double start_time = 0;
};

/// Runs the trainer into `dir` and stores its run directory (idempotent import, as mwb-record does).
RunInfo make_run(const fs::path& dir, const fs::path& db, const QStringList& args, bool stop_early) {
    test::Child trainer;
    trainer.start(test::trainer_exe(), args);
    if (stop_early) {
        [&] { QVERIFY(test::wait_gui([&] { return test::file_lines(dir / "metrics.jsonl") >= 40; })); }();
        ipc::ControlClient::for_run_dir(dir).request("stop", 20s);
        [&] { QCOMPARE(trainer.wait(), 3); }();
    } else {
        [&] { QCOMPARE(trainer.wait(), 0); }();
    }
    RunInfo r;
    r.all = test::run_dir_messages(dir);
    r.steps = test::of_topic(r.all, "step");
    r.uid = r.all.front().run_id;
    r.start_time = test::of_topic(r.all, "run.start").front().time;
    store::Store st(db);
    store::Store::Transaction tx(st);
    for (const auto& m : r.all) st.ingest(m);
    tx.commit();
    return r;
}

double last_of(const RunInfo& r, const char* key) {
    for (auto it = r.steps.rbegin(); it != r.steps.rend(); ++it)
        if (it->body.contains(key) && it->body[key].is_number()) return it->body[key].get<double>();
    return NAN;
}

QStringList parse_csv_line(const QString& line) {
    QStringList out;
    QString cur;
    bool quoted = false;
    for (int i = 0; i < line.size(); ++i) {
        const QChar c = line[i];
        if (quoted) {
            if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
                cur += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                cur += c;
            }
        } else if (c == '"') {
            quoted = true;
        } else if (c == ',') {
            out << cur;
            cur.clear();
        } else {
            cur += c;
        }
    }
    out << cur;
    return out;
}

}  // namespace

class TestHistory : public QObject {
    Q_OBJECT
    test::TempDir dir_;
    fs::path db_;
    RunInfo a_, b_, c_;  // hidden 64; hidden 32 with another lr; stopped

private slots:
    void initTestCase() {
        db_ = dir_ / "history.sqlite";
        a_ = make_run(dir_ / "a", db_,
                      test::tiny_run_args(dir_ / "a", 40, {"--eval-interval", "20", "--eval-iters", "1"}), false);
        b_ = make_run(dir_ / "b", db_, test::tiny_run_args(dir_ / "b", 50, {"--hidden-size", "32", "--lr", "0.0003"}),
                      false);
        c_ = make_run(dir_ / "c", db_, test::tiny_run_args(dir_ / "c", 1000000), true);
        QVERIFY(!a_.uid.empty() && !b_.uid.empty() && !c_.uid.empty());
    }

    void settings_filter_group_scatter_and_export_every_metric() {
        HistoryView view;
        view.resize(1400, 900);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.setStoreFile(db_);
        auto* filter = view.findChild<QLineEdit*>(QStringLiteral("historyFilter"));
        QVERIFY(filter);
        // a setting typed into the filter: only run b has hidden size 32
        QTest::keyClicks(filter, QStringLiteral("hidden=32"));
        QCOMPARE(view.proxy()->rowCount(), 1);
        QCOMPARE(view.proxy()->data(view.proxy()->index(0, 0), RunListModel::UidRole).toString().toStdString(), b_.uid);
        filter->clear();
        QTest::keyClicks(filter, QStringLiteral("hidden_size>40 finished"));  // settings and words together
        QCOMPARE(view.proxy()->rowCount(), 1);
        QCOMPARE(view.proxy()->data(view.proxy()->index(0, 0), RunListModel::UidRole).toString().toStdString(), a_.uid);
        filter->clear();
        QCOMPARE(view.proxy()->rowCount(), 3);
        // group by hidden size: a Group column, one colour per value in the overlay
        QComboBox* group = view.groupChoice();
        const int by_hidden = group->findData(QStringLiteral("hidden_size"));
        QVERIFY2(by_hidden > 0, "hidden_size differs between the runs");
        group->setCurrentIndex(by_hidden);
        QVERIFY(!view.table()->isColumnHidden(RunListModel::Group));
        view.selectRuns({a_.uid, b_.uid, c_.uid});
        ComparePlot* plot = view.comparePlot();
        QCOMPARE(plot->runCount(), 3);
        std::map<std::string, QColor> colour;
        for (int i = 0; i < plot->runCount(); ++i) colour[plot->runs()[i].uid] = plot->plot()->lineColor(i);
        QCOMPARE(colour[a_.uid], colour[c_.uid]);  // both 64
        QVERIFY(colour[a_.uid] != colour[b_.uid]);
        QVERIFY(plot->plot()->chart()->legend()->isVisible());
        // the scatter: final loss of each run against hidden_size, as the rows say
        ScatterPlot* scatter = view.scatter();
        scatter->setKey(QStringLiteral("hidden_size"));
        QCOMPARE(scatter->key(), QString("hidden_size"));
        QCOMPARE(scatter->points().size(), std::size_t{3});
        QCOMPARE(scatter->points().x.front(), 32.0);
        QCOMPARE(scatter->points().y.front(), last_of(b_, "lm_loss"));
        scatter->plot()->refresh();
        QVERIFY(scatter->plot()->pointsDrawn() >= 2);
        // every metric of the selected runs, one row per step record
        view.selectRuns({a_.uid});
        const QString file = QString::fromStdString((dir_ / "all.csv").string());
        QString error;
        QVERIFY2(view.exportAllMetrics(file, &error), qPrintable(error));
        QFile f(file);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QStringList lines = QString::fromUtf8(f.readAll()).split('\n', Qt::SkipEmptyParts);
        const QStringList header = parse_csv_line(lines[0]);
        QCOMPARE(header.mid(0, 3), (QStringList{"run", "name", "iteration"}));
        const int loss_col = static_cast<int>(header.indexOf("lm_loss")), lr_col = static_cast<int>(header.indexOf("lr"));
        QVERIFY(loss_col > 2 && lr_col > 2 && header.contains("tokens_per_sec"));
        QCOMPARE(lines.size() - 1, static_cast<int>(a_.steps.size()));
        for (std::size_t i = 0; i < a_.steps.size(); ++i) {
            const QStringList row = parse_csv_line(lines[static_cast<int>(i) + 1]);
            QCOMPARE(row[2].toLongLong(), a_.steps[i].body["iteration"].get<long long>());
            QCOMPARE(row[loss_col].toDouble(), a_.steps[i].body["lm_loss"].get<double>());
            QCOMPARE(row[lr_col].toDouble(), a_.steps[i].body["lr"].get<double>());
        }
    }

    void the_models_pass_the_tester_and_list_every_run() {
        HistoryView view;
        QAbstractItemModelTester t1(view.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        QAbstractItemModelTester t2(view.proxy(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        QAbstractItemModelTester t3(view.configDiff(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        view.setStoreFile(db_);
        QCOMPARE(view.model()->rowCount(), 3);
        for (const RunInfo* r : {&a_, &b_, &c_}) {
            const RunRow* row = view.model()->row(view.model()->rowOf(r->uid));
            QVERIFY(row);
            QCOMPARE(*row->final_loss, last_of(*r, "lm_loss"));
            QCOMPARE(*row->tokens_per_sec, last_of(*r, "tokens_per_sec"));
            QCOMPARE(row->iteration, static_cast<int64_t>(last_of(*r, "iteration")));
            QCOMPARE(row->layout, "TP 1 · PP 1 · DP 1 (1 rank)");
            QCOMPARE(row->run_dir, fs::path(r == &a_ ? dir_ / "a" : r == &b_ ? dir_ / "b" : dir_ / "c").string());
        }
        QCOMPARE(view.model()->row(view.model()->rowOf(b_.uid))->model, "1 L · 32 H · 2 A · seq 64");
        QCOMPARE(view.model()->row(view.model()->rowOf(c_.uid))->status, "stopped");
        view.selectRuns({a_.uid, b_.uid, c_.uid});
        view.reload();  // keeps the selection
        QCOMPARE(view.selectedRuns().size(), std::size_t{3});
    }

    void sorts_by_value_and_filters() {
        HistoryView view;
        view.setStoreFile(db_);
        auto* proxy = view.proxy();
        view.table()->sortByColumn(RunListModel::FinalLoss, Qt::AscendingOrder);
        std::vector<double> shown, expected{last_of(a_, "lm_loss"), last_of(b_, "lm_loss"), last_of(c_, "lm_loss")};
        for (int r = 0; r < proxy->rowCount(); ++r)
            shown.push_back(proxy->data(proxy->index(r, RunListModel::FinalLoss), RunListModel::SortRole).toDouble());
        std::sort(expected.begin(), expected.end());
        QVERIFY(shown == expected);
        view.table()->sortByColumn(RunListModel::Date, Qt::AscendingOrder);  // the order they ran in
        QCOMPARE(proxy->data(proxy->index(0, 0), RunListModel::UidRole).toString().toStdString(), a_.uid);
        QCOMPARE(proxy->data(proxy->index(2, 0), RunListModel::UidRole).toString().toStdString(), c_.uid);

        proxy->setText("\"32 h\"");  // a phrase of the model column, case-insensitive
        QCOMPARE(proxy->rowCount(), 1);
        QCOMPARE(proxy->data(proxy->index(0, 0), RunListModel::UidRole).toString().toStdString(), b_.uid);
        proxy->setText("\"64 h\" finished");  // every word must match
        QCOMPARE(proxy->rowCount(), 1);
        QCOMPARE(proxy->data(proxy->index(0, 0), RunListModel::UidRole).toString().toStdString(), a_.uid);
        proxy->setText({});
        proxy->setStatus("stopped");
        QCOMPARE(proxy->rowCount(), 1);
        QCOMPARE(proxy->data(proxy->index(0, 0), RunListModel::UidRole).toString().toStdString(), c_.uid);
        proxy->setStatus("finished");
        QCOMPARE(proxy->rowCount(), 2);
        proxy->setStatus({});
        proxy->setText("no-such-run");
        QCOMPARE(proxy->rowCount(), 0);
    }

    void the_overlay_holds_each_selected_runs_series() {
        HistoryView view;
        view.resize(1200, 900);
        view.show();
        view.setStoreFile(db_);
        view.selectRuns({a_.uid, b_.uid});
        ComparePlot* plot = view.comparePlot();
        QCOMPARE(plot->runCount(), 2);
        QCOMPARE(plot->plot()->lineCount(), 2);
        const RunInfo* runs[2] = {&a_, &b_};
        if (plot->runs()[0].uid != a_.uid) std::swap(runs[0], runs[1]);
        const auto check = [&](CompareX x) {
            for (int i = 0; i < 2; ++i) {
                const Trace& t = plot->trace(i);
                const RunInfo& r = *runs[i];
                QCOMPARE(t.size(), r.steps.size());
                for (std::size_t k = 0; k < r.steps.size(); ++k) {
                    const auto& b = r.steps[k].body;
                    QCOMPARE(t.y[k], b["lm_loss"].get<double>());
                    double want = b["iteration"].get<double>();
                    if (x == CompareX::Tokens) want = b["consumed_tokens"].get<double>();
                    if (x == CompareX::WallTime) want = r.steps[k].time - r.start_time;
                    // (these runs last seconds: the wall-time axis is in seconds)
                    QVERIFY2(std::abs(t.x[k] - want) <= 1e-6 * std::max(1.0, std::abs(want)),
                             qPrintable(QString("run %1 point %2: %3 vs %4").arg(i).arg(k).arg(t.x[k]).arg(want)));
                }
            }
        };
        check(CompareX::Iteration);
        QVERIFY(plot->plot()->pointsDrawn() > 0);
        test::maybe_save_shot(view, "history-light");
        if (qEnvironmentVariableIsSet("MWB_TEST_SHOTS")) {
            apply_theme(Theme::Dark);
            QTest::qWait(20);
            plot->plot()->restyle();
            QTest::qWait(50);
            test::maybe_save_shot(view, "history-dark");
            apply_theme(Theme::Light);
            plot->plot()->restyle();
        }
        plot->setXAxis(CompareX::Tokens);
        check(CompareX::Tokens);
        plot->setXAxis(CompareX::WallTime);
        check(CompareX::WallTime);
        plot->setXAxis(CompareX::Iteration);
        plot->setMetric("val_loss");  // the evaluations: only run a has them
        const int ia = plot->runs()[0].uid == a_.uid ? 0 : 1;
        QCOMPARE(plot->trace(ia).size(), test::of_topic(a_.all, "eval").size());
        QCOMPARE(plot->trace(1 - ia).size(), std::size_t{0});

        QString error;
        const fs::path png = dir_ / "chart.png";
        QVERIFY2(plot->exportPng(test::qpath(png), &error), qPrintable(error));
        QImage img(test::qpath(png));
        QVERIFY(img.width() >= 800 && img.height() >= 500);
    }

    void the_config_diff_matches_the_stores() {
        HistoryView view;
        view.setStoreFile(db_);
        view.selectRuns({a_.uid, b_.uid});
        ConfigDiffModel* diff = view.configDiff();
        QCOMPARE(diff->columnCount(), 3);
        std::set<std::string> shown, expected;
        for (const auto& k : diff->differingKeys()) shown.insert(k);
        for (const auto& d : store::Store(db_).config_diff({a_.uid, b_.uid})) expected.insert(d.key);
        QCOMPARE(shown, expected);
        QVERIFY(shown.count("hidden_size") && shown.count("lr") && shown.count("run_dir"));
        QCOMPARE(static_cast<std::size_t>(diff->rowCount()), shown.size());  // only the differences
        const auto keys = diff->differingKeys();
        const int row =
            static_cast<int>(std::find(keys.begin(), keys.end(), std::string("hidden_size")) - keys.begin());
        QVERIFY(diff->data(diff->index(row, 0), ConfigDiffModel::DiffersRole).toBool());
        const QSet<QString> sizes{diff->data(diff->index(row, 1)).toString(),
                                  diff->data(diff->index(row, 2)).toString()};
        QCOMPARE(sizes, (QSet<QString>{"64", "32"}));
        diff->setOnlyDifferences(false);
        QVERIFY(static_cast<std::size_t>(diff->rowCount()) > shown.size());
        QVERIFY(!diff->data(diff->index(diff->rowCount() - 1, 0), ConfigDiffModel::DiffersRole).toBool());
    }

    void csv_export_equals_the_stores_series() {
        HistoryView view;
        view.setStoreFile(db_);
        view.selectRuns({a_.uid, c_.uid});
        ComparePlot* plot = view.comparePlot();
        const fs::path file = dir_ / "series.csv";
        QString error;
        QVERIFY2(plot->exportCsv(test::qpath(file), &error), qPrintable(error));
        QFile f(test::qpath(file));
        QVERIFY(f.open(QIODevice::ReadOnly | QIODevice::Text));
        const QStringList lines = QString::fromUtf8(f.readAll()).split('\n', Qt::SkipEmptyParts);
        QCOMPARE(lines.front(), QString("run,name,iteration,lm_loss"));
        std::map<std::string, std::vector<std::pair<int64_t, double>>> rows;
        for (int i = 1; i < lines.size(); ++i) {
            const QStringList cells = parse_csv_line(lines[i]);
            QCOMPARE(cells.size(), 4);
            rows[cells[0].toStdString()].emplace_back(cells[2].toLongLong(), cells[3].toDouble());
        }
        QCOMPARE(rows.size(), std::size_t{2});
        store::Store st(db_);
        for (const auto& uid : {a_.uid, c_.uid}) {
            const auto s = st.series(uid, "lm_loss");
            QVERIFY(s.raw);
            QCOMPARE(rows[uid].size(), s.buckets.size());
            for (std::size_t k = 0; k < s.buckets.size(); ++k) {
                QCOMPARE(rows[uid][k].first, s.buckets[k].x_min);
                QCOMPARE(rows[uid][k].second, s.buckets[k].y_mean);  // 17 significant digits: exact
            }
        }
        // against tokens: a column with each step's consumed_tokens
        plot->setXAxis(CompareX::Tokens);
        const QStringList tok = plot->csv().split('\n', Qt::SkipEmptyParts);
        QCOMPARE(tok.front(), QString("run,name,iteration,tokens,lm_loss"));
        const QStringList first = parse_csv_line(tok[1]);
        const auto& step0 = (first[0].toStdString() == a_.uid ? a_ : c_).steps.front().body;
        QCOMPARE(first[3].toDouble(), step0["consumed_tokens"].get<double>());
    }

    void a_running_run_can_be_watched_from_its_row() {
        // run a's messages up to (not including) its end: the store holds it as running
        test::TempDir t;
        const fs::path db = t / "running.sqlite";
        {
            store::Store st(db);
            for (const auto& m : a_.all)
                if (m.topic != "run.end") st.ingest(m);
        }
        HistoryView view;
        view.setStoreFile(db);
        QSignalSpy watch(&view, &HistoryView::watchRun);
        QCOMPARE(view.model()->row(0)->status, "running");
        view.selectRuns({a_.uid});
        view.watchSelected();
        QCOMPARE(watch.count(), 1);
        QCOMPARE(watch.first().first().toString(), test::qpath(dir_ / "a"));
    }

    void edits_and_deletion_persist_in_the_store() {
        HistoryView view;
        view.setStoreFile(db_);
        auto* proxy = view.proxy();
        const auto index_of = [&](const std::string& uid, int column) {
            return proxy->mapFromSource(view.model()->index(view.model()->rowOf(uid), column));
        };
        // as the table's editors write them
        QVERIFY(proxy->setData(index_of(a_.uid, RunListModel::Name), "baseline 64"));
        QVERIFY(proxy->setData(index_of(a_.uid, RunListModel::Tags), "baseline, tiny ,baseline"));
        QVERIFY(proxy->setData(index_of(a_.uid, RunListModel::Notes), "first try\nsecond line"));
        QVERIFY(proxy->setData(index_of(b_.uid, RunListModel::Tags), "tiny"));
        {
            store::Store st(db_);
            const auto r = st.run(a_.uid);
            QCOMPARE(r->name, "baseline 64");
            QCOMPARE(r->tags, (std::vector<std::string>{"baseline", "tiny"}));
            QCOMPARE(r->notes, "first try\nsecond line");
        }
        QVERIFY(proxy->setData(index_of(a_.uid, RunListModel::Tags), "tiny"));  // removes "baseline"
        QCOMPARE(store::Store(db_).run(a_.uid)->tags, std::vector<std::string>{"tiny"});
        proxy->setTag("tiny");
        QCOMPARE(proxy->rowCount(), 2);
        proxy->setTag({});
        proxy->setText("baseline 64");  // the new name
        QCOMPARE(proxy->rowCount(), 1);
        proxy->setText({});

        view.selectRuns({b_.uid});
        QString error;
        QVERIFY2(view.deleteRuns({b_.uid}, &error), qPrintable(error));
        QCOMPARE(view.model()->rowCount(), 2);
        QVERIFY(!store::Store(db_).run(b_.uid));
        view.reload();
        QCOMPARE(view.model()->rowCount(), 2);
        QCOMPARE(view.model()->row(view.model()->rowOf(a_.uid))->name, "baseline 64");
    }
};

MWB_TEST_SUITE_WIDGETS(test_history, TestHistory)
}  // namespace test_history
#include "test_history.moc"
