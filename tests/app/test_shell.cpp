// Shell: the four tabs hold the four views, keyboard shortcuts switch them, QSettings (in a temp
// dir) keeps window geometry, the tab, recent files and the palette across windows, the command line
// parses (and refuses what it should), and --store / a config argument reach the views.
#include "app/core/config_file.h"
#include "app/core/paths.h"
#include "app/core/theme.h"
#include "app/designer/designer_view.h"
#include "app/history/history_view.h"
#include "app/launch/launch_view.h"
#include "app/monitor/monitor_view.h"
#include "mwb/planner/presets.h"
#include "mwb/store/store.h"
#include "app/plot/plot_view.h"
#include "app/shell/app_options.h"
#include "app/shell/main_window.h"

#include "support/suite.h"

#include <QAction>
#include <QLineSeries>
#include <QMenuBar>
#include <QSettings>
#include <QShortcut>
#include <QStatusBar>
#include <QTabWidget>
#include <QTemporaryDir>

#include <QtTest>

namespace test_shell {

using namespace mwb;
using namespace mwb::app;

namespace {

AppOptions parse_ok(const QStringList& args) {
    AppOptions o;
    QString error;
    const bool ok = parse_app_options(QStringList{QStringLiteral("mwb")} + args, o, &error);
    if (!ok) qWarning("unexpected error: %s", qPrintable(error));
    return ok ? o : AppOptions{};
}

QString parse_error(const QStringList& args) {
    AppOptions o;
    QString error;
    if (parse_app_options(QStringList{QStringLiteral("mwb")} + args, o, &error)) return QStringLiteral("<accepted>");
    return error;
}

}  // namespace

class TestShell : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        QCoreApplication::setOrganizationName(QStringLiteral("mwb-test"));
        QCoreApplication::setApplicationName(QStringLiteral("mwb-test"));
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, tmp_.filePath(QStringLiteral("settings")));
        qputenv("XDG_DATA_HOME", tmp_.path().toUtf8());
        qputenv("MWB_STORE", tmp_.filePath(QStringLiteral("history.sqlite")).toUtf8());
        apply_theme(Theme::Light);
    }

    void fourTabsHoldTheViews() {
        MainWindow w;
        QCOMPARE(w.tabs()->count(), 4);
        QCOMPARE(w.tabs()->widget(MainWindow::DesignerTab), static_cast<QWidget*>(w.designer()));
        QCOMPARE(w.tabs()->widget(MainWindow::LaunchTab), static_cast<QWidget*>(w.launch()));
        QCOMPARE(w.tabs()->widget(MainWindow::MonitorTab), static_cast<QWidget*>(w.monitor()));
        QCOMPARE(w.tabs()->widget(MainWindow::HistoryTab), static_cast<QWidget*>(w.history()));
        QStringList names;
        for (int i = 0; i < 4; ++i) names << w.tabs()->tabText(i).remove('&');
        QCOMPARE(names, QStringList({"Designer", "Launch", "Monitor", "History"}));
        QCOMPARE(w.storeFile(), default_store_file());
        QVERIFY(w.storeFile().string().find(tmp_.path().toStdString()) == 0);  // never the user's store
        // the Launch view follows the Designer's design
        QVERIFY(w.designer()->loadPreset(QStringLiteral("gpt3-1.3b")));
        QCOMPARE(w.launch()->design().model.num_layers, w.designer()->config().model.num_layers);
        QCOMPARE(w.launch()->plan().parameters.total, w.designer()->plan().parameters.total);
    }

    void shortcutsSwitchTabsAndMenusHaveThem() {
        MainWindow w;
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        w.activateWindow();
        const struct {
            Qt::Key key;
            MainWindow::Tab tab;
        } keys[] = {{Qt::Key_3, MainWindow::MonitorTab},
                    {Qt::Key_4, MainWindow::HistoryTab},
                    {Qt::Key_2, MainWindow::LaunchTab},
                    {Qt::Key_1, MainWindow::DesignerTab}};
        for (const auto& k : keys) {
            QTest::keyClick(&w, k.key, Qt::ControlModifier);
            QCOMPARE(w.currentTab(), k.tab);
        }
        QStringList shortcuts;
        for (QAction* m : w.menuBar()->actions())
            if (m->menu())
                for (QAction* a : m->menu()->actions()) shortcuts << a->shortcut().toString();
        for (const char* s :
             {"Ctrl+O", "Ctrl+S", "Ctrl+R", "Ctrl+Shift+A", "Ctrl+Q", "Ctrl+1", "Ctrl+4", "Ctrl+Shift+T"})
            QVERIFY2(shortcuts.contains(QString::fromLatin1(s)), s);
        // one owner per key across the menus and the views' own shortcuts (two make the key do nothing)
        for (const QShortcut* sc : w.findChildren<QShortcut*>()) shortcuts << sc->key().toString();
        shortcuts.removeAll(QString());
        for (const QString& k : shortcuts) QVERIFY2(shortcuts.count(k) == 1, qPrintable(k));
    }

    void settingsAreSavedAndRestored() {
        const QString recent = tmp_.filePath(QStringLiteral("a.json"));
        {
            MainWindow w;
            w.resize(1111, 777);
            w.show();
            QVERIFY(QTest::qWaitForWindowExposed(&w));
            w.showTab(MainWindow::HistoryTab);
            w.addRecentFile(recent);
            w.addRecentFile(tmp_.filePath(QStringLiteral("b.json")));
            w.addRecentFile(recent);  // again: moves to the top, not twice
            w.setTheme(Theme::Dark);
            w.close();  // closeEvent saves
        }
        QSettings s;
        QVERIFY(s.contains(QStringLiteral("window/geometry")));
        QCOMPARE(s.value(QStringLiteral("theme")).toString(), theme_name(Theme::Dark));
        apply_theme(Theme::Light);
        MainWindow w;
        w.restoreSettings();
        QCOMPARE(w.currentTab(), MainWindow::HistoryTab);
        QCOMPARE(w.recentFiles(), QStringList({recent, tmp_.filePath(QStringLiteral("b.json"))}));
        QCOMPARE(current_theme(), Theme::Dark);
        QCOMPARE(w.size(), QSize(1111, 777));
        // the palette is really dark: text is light on a dark window, and the charts follow
        QVERIFY(qApp->palette().color(QPalette::Window).lightness() < 80);
        const auto plots = w.findChildren<PlotView*>();
        QVERIFY(!plots.isEmpty());
        for (PlotView* p : plots) QVERIFY(p->chart()->backgroundBrush().color().lightness() < 80);
        // lines take the palette's series colours too (the smoothed loss is series colour 0)
        const auto smoothed_loss_colour = [&] {
            for (PlotView* p : plots)
                for (QAbstractSeries* series : p->chart()->series())
                    if (series->name() == QStringLiteral("train"))
                        return static_cast<QLineSeries*>(series)->pen().color();
            return QColor();
        };
        QCOMPARE(smoothed_loss_colour(), series_color(0));
        QVERIFY(qApp->palette().color(QPalette::WindowText).lightness() > 180);
        const QColor dark_colour = smoothed_loss_colour();
        w.setTheme(Theme::Light);
        QVERIFY(qApp->palette().color(QPalette::Window).lightness() > 180);
        QVERIFY(qApp->palette().color(QPalette::WindowText).lightness() < 80);
        for (PlotView* p : plots) QVERIFY(p->chart()->backgroundBrush().color().lightness() > 180);
        QCOMPARE(smoothed_loss_colour(), series_color(0));
        QVERIFY(smoothed_loss_colour() != dark_colour);
    }

    void optionParsing() {
        AppOptions o = parse_ok({});
        QVERIFY(!o.demo && o.attach.isEmpty() && o.store.isEmpty() && o.config_file.isEmpty());
        o = parse_ok({QStringLiteral("--demo"), QStringLiteral("--store"), QStringLiteral("/tmp/h.sqlite")});
        QVERIFY(o.demo);
        QCOMPARE(o.store, QStringLiteral("/tmp/h.sqlite"));
        o = parse_ok({QStringLiteral("--attach"), QStringLiteral("tcp://node7:5555"), QStringLiteral("--client-key"),
                      QStringLiteral("me.key_secret"), QStringLiteral("--server-key"), QStringLiteral("run.key")});
        QCOMPARE(o.attach, QStringLiteral("tcp://node7:5555"));
        QCOMPARE(o.client_key, QStringLiteral("me.key_secret"));
        QCOMPARE(o.server_key, QStringLiteral("run.key"));
        o = parse_ok({QStringLiteral("run.json"), QStringLiteral("--theme"), QStringLiteral("Dark"),
                      QStringLiteral("--tab=history")});
        QCOMPARE(o.config_file, QStringLiteral("run.json"));
        QCOMPARE(o.theme, QStringLiteral("dark"));
        QCOMPARE(o.tab, QStringLiteral("history"));
        QVERIFY(parse_ok({QStringLiteral("--help")}).help);
        QVERIFY(parse_ok({QStringLiteral("--help")}).help_text.contains(QStringLiteral("--attach")));
        QVERIFY(parse_error({QStringLiteral("--bogus")}).contains(QStringLiteral("bogus")));
        QVERIFY(parse_error({QStringLiteral("--store")}).contains(QStringLiteral("store")));
        QVERIFY(parse_error({QStringLiteral("a.json"), QStringLiteral("b.json")})
                    .contains(QStringLiteral("one configuration")));
        QVERIFY(parse_error({QStringLiteral("--theme"), QStringLiteral("blue")}).contains(QStringLiteral("blue")));
        QVERIFY(parse_error({QStringLiteral("--tab"), QStringLiteral("plots")}).contains(QStringLiteral("plots")));
        QVERIFY(
            parse_error({QStringLiteral("--client-key"), QStringLiteral("k")}).contains(QStringLiteral("--attach")));
        QVERIFY(parse_error({QStringLiteral("--demo"), QStringLiteral("--attach"), QStringLiteral("x")})
                    .contains(QStringLiteral("choose")));
    }

    void optionsReachTheViews() {
        const QString file = tmp_.filePath(QStringLiteral("design.json"));
        Config c = planner::load_preset("tiny-cpu-demo");
        c.model.num_layers = 3;
        save_config_file(to_path(file), c);
        const QString store = tmp_.filePath(QStringLiteral("other.sqlite"));
        MainWindow w;
        QString error;
        QVERIFY2(w.applyOptions(parse_ok({file, QStringLiteral("--store"), store, QStringLiteral("--tab"),
                                          QStringLiteral("launch")}),
                                &error),
                 qPrintable(error));
        QCOMPARE(w.storeFile(), to_path(store));
        QCOMPARE(w.designer()->config().model.num_layers, 3);
        QCOMPARE(w.designer()->currentFile(), file);
        QCOMPARE(w.currentTab(), MainWindow::LaunchTab);
        QVERIFY(w.recentFiles().contains(QFileInfo(file).absoluteFilePath()));
        // an attach that cannot work is reported, naming the option, and the window stays usable
        QVERIFY(!w.applyOptions(parse_ok({QStringLiteral("--attach"), QStringLiteral("tcp://10.9.8.7:5555")}), &error));
        QVERIFY2(error.contains(QStringLiteral("--attach")) && error.contains(QStringLiteral("CURVE")),
                 qPrintable(error));
        QVERIFY(!w.applyOptions(parse_ok({tmp_.filePath(QStringLiteral("missing.json"))}), &error));
        QVERIFY2(error.contains(QStringLiteral("missing.json")), qPrintable(error));
    }

    void demoStreamsIntoTheMonitor() {
        MainWindow w;
        QString error;
        AppOptions o = parse_ok({QStringLiteral("--demo")});
        QVERIFY2(w.applyOptions(o, &error), qPrintable(error));
        QCOMPARE(w.currentTab(), MainWindow::MonitorTab);
        QVERIFY(w.launch()->running());
        QVERIFY(w.monitor()->liveRun()->attached());
        QCOMPARE(QString::fromStdString(w.monitor()->liveRun()->options().endpoint), w.launch()->runDir());
        QCOMPARE(w.monitor()->liveRun()->options().store_file, w.storeFile());
        // the run's start arrives through the Monitor's worker (steps follow every 10 iterations)
        QTRY_VERIFY_WITH_TIMEOUT(w.monitor()->liveRun()->traces().start.has_value(), 60000);
        w.launch()->kill();
        QTRY_VERIFY_WITH_TIMEOUT(!w.launch()->running(), 10000);
        // killed: the run could not say how it ended, so the app does
        QTRY_VERIFY_WITH_TIMEOUT(w.monitor()->liveRun()->traces().end.has_value(), 10000);
        const RunEnd end = *w.monitor()->liveRun()->traces().end;
        QCOMPARE(QString::fromStdString(end.status), QStringLiteral("interrupted"));
        QCOMPARE(QString::fromStdString(end.reason), QStringLiteral("killed by signal 9 (SIGKILL)"));  // said once
        // and the store says so too (it stayed "running" before): History and mwb-record see it over
        const std::string uid = w.monitor()->liveRun()->traces().run_id;
        w.monitor()->detach();
        store::Store st(w.storeFile());
        QCOMPARE(QString::fromStdString(st.run(uid)->status), QStringLiteral("interrupted"));
        QCOMPARE(QString::fromStdString(st.run(uid)->reason), QStringLiteral("killed by signal 9 (SIGKILL)"));
    }

    void anEndedRunDoesNotEndTheNextOne() {
        MainWindow w;
        Config c = planner::load_preset("tiny-cpu-demo");
        c.model.num_layers = 1;
        c.model.hidden_size = 32;
        c.model.num_attention_heads = 2;
        c.model.seq_length = 16;
        c.training.micro_batch_size = 2;
        c.training.global_batch_size = 2;
        c.training.train_iters = 4;
        c.training.lr_warmup_iters = 1;
        c.logging.log_interval = 1;
        c.data.mock_data = true;
        w.designer()->setConfig(c);
        w.designer()->setCluster(QStringLiteral("cpu"), 1, 1);
        QString error;
        QVERIFY2(w.launch()->startLocal(&error), qPrintable(error));
        QTRY_VERIFY_WITH_TIMEOUT(!w.launch()->running(), 30000);
        QTRY_VERIFY_WITH_TIMEOUT(w.monitor()->liveRun()->traces().end.has_value(), 10000);
        const std::string first = w.monitor()->liveRun()->traces().run_id;
        // the next run starts at once; the first one's end must not be pinned on it. Checked by order,
        // not by waiting a while: once the new run's own steps have arrived, anything the ended run
        // left behind was seen before them.
        c.training.train_iters = 1000000;
        w.designer()->setConfig(c);
        QVERIFY2(w.launch()->startLocal(&error), qPrintable(error));
        QCOMPARE(QString::fromStdString(w.monitor()->liveRun()->options().endpoint), w.launch()->runDir());
        const auto new_steps = [&] {
            const RunTraces& t = w.monitor()->liveRun()->traces();
            return t.run_id != first && t[SeriesId::Loss].size() >= 3;
        };
        QTRY_VERIFY_WITH_TIMEOUT(new_steps(), 60000);
        QVERIFY(!w.monitor()->liveRun()->traces().end.has_value());
        w.launch()->kill();
        QTRY_VERIFY_WITH_TIMEOUT(!w.launch()->running(), 10000);
        w.monitor()->detach();
    }

private:
    QTemporaryDir tmp_;
};

MWB_TEST_SUITE_WIDGETS(test_shell, TestShell)
}  // namespace test_shell
#include "test_shell.moc"
