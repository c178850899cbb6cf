#include "app/shell/main_window.h"

#include "app/core/paths.h"
#include "app/designer/designer_view.h"
#include "app/history/history_view.h"
#include "app/launch/attach_panel.h"
#include "app/launch/generate_dialog.h"
#include "app/launch/launch_view.h"
#include "app/launch/prediction.h"
#include "app/monitor/metric_charts.h"
#include "app/monitor/monitor_view.h"
#include "mwb/ipc/follower.h"
#include "mwb/planner/presets.h"
#include "mwb/store/store.h"
#include "app/plot/plot_view.h"
#include "app/shell/app_options.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDateTime>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QKeySequence>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>

namespace mwb::app {

namespace {

constexpr int kMaxRecent = 10;
/// How long a finished local process waits for the run's own run.end before the app says how it ended.
constexpr int kEndGraceMs = 2000;

const char* tab_key(MainWindow::Tab t) {
    switch (t) {
        case MainWindow::DesignerTab:
            return "designer";
        case MainWindow::LaunchTab:
            return "launch";
        case MainWindow::MonitorTab:
            return "monitor";
        case MainWindow::HistoryTab:
            return "history";
    }
    return "designer";
}

int tab_from_key(const QString& key) {
    for (int t = MainWindow::DesignerTab; t <= MainWindow::HistoryTab; ++t)
        if (key == QLatin1String(tab_key(static_cast<MainWindow::Tab>(t)))) return t;
    return -1;
}

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
    setObjectName(QStringLiteral("main_window"));
    setWindowTitle(tr("Megatron Workbench"));
    designer_ = new DesignerView;
    launch_ = new LaunchView;
    monitor_ = new MonitorView;
    history_ = new HistoryView;
    tabs_ = new QTabWidget;
    tabs_->setObjectName(QStringLiteral("main_tabs"));
    tabs_->setDocumentMode(true);
    tabs_->addTab(designer_, tr("&Designer"));
    tabs_->addTab(launch_, tr("&Launch"));
    tabs_->addTab(monitor_, tr("&Monitor"));
    tabs_->addTab(history_, tr("&History"));
    setCentralWidget(tabs_);

    store_label_ = new QLabel;
    store_label_->setObjectName(QStringLiteral("status_store"));
    run_label_ = new QLabel;
    run_label_->setObjectName(QStringLiteral("status_run"));
    statusBar()->addPermanentWidget(run_label_);
    statusBar()->addPermanentWidget(store_label_);

    connect(designer_, &DesignerView::designChanged, this,
            [this] { launch_->setDesign(designer_->config(), designer_->cluster(), designer_->plan()); });
    connect(designer_, &DesignerView::fileUsed, this, &MainWindow::addRecentFile);
    connect(designer_, &DesignerView::message, this, &MainWindow::showMessage);
    connect(launch_, &LaunchView::message, this, &MainWindow::showMessage);
    connect(monitor_, &MonitorView::message, this, &MainWindow::showMessage);
    connect(history_, &HistoryView::message, this, &MainWindow::showMessage);
    connect(launch_, &LaunchView::runStarted, this, [this](const QString& dir, int world) {
        onRunStarted(dir, world, demo_run_);
        demo_run_ = false;
    });
    connect(launch_, &LaunchView::runEnded, this, [this](int code, bool crashed, const QString& description) {
        run_label_->setText(tr("local run %1").arg(description));
        // A run that ends by itself publishes run.end; give it a moment to arrive, then say what the
        // process did if it did not (a crash, a kill, a refused configuration).
        const double ended = static_cast<double>(QDateTime::currentMSecsSinceEpoch()) / 1e3;
        const std::string run_dir = launch_->runDir().toStdString();
        QTimer::singleShot(kEndGraceMs, this, [this, code, crashed, ended, run_dir] {
            const ProcessEnd how = process_end(code, crashed);
            // the run's own run.end has been recorded by now; without one the store learns it here
            markGone(run_dir, how, ended);
            history_->reload();
            // only for the run it was about: the Monitor may follow another one by now
            if (monitor_->liveRun()->options().endpoint != run_dir || monitor_->liveRun()->traces().end) return;
            RunEnd end;
            end.status = how.status;
            end.reason = how.reason;
            end.time = ended;
            monitor_->noteEnded(end);
        });
    });
    connect(launch_, &LaunchView::attachRequested, this, &MainWindow::watch);
    connect(history_, &HistoryView::watchRun, this, [this](const QString& target) {
        AttachOptions o;
        o.endpoint = target.toStdString();
        watch(o);
    });
    connect(tabs_, &QTabWidget::currentChanged, this, [this](int i) {
        if (i == HistoryTab) history_->reload();
    });
    launch_->setDesign(designer_->config(), designer_->cluster(), designer_->plan());

    buildMenus();
    setStoreFile(default_store_file());
    resize(1400, 900);
}

MainWindow::~MainWindow() = default;

void MainWindow::buildMenus() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* a = file->addAction(tr("&New design (tiny CPU demo)"), this, [this] {
        if (!designer_->confirmDiscard()) return;
        designer_->loadPreset(QStringLiteral("tiny-cpu-demo"));
        showTab(DesignerTab);
    });
    a->setShortcut(QKeySequence::New);
    a = file->addAction(tr("&Open configuration…"), this, [this] {
        showTab(DesignerTab);
        designer_->openDialog();
    });
    a->setShortcut(QKeySequence::Open);
    recent_menu_ = file->addMenu(tr("Open &recent"));
    a = file->addAction(tr("&Save configuration"), designer_, &DesignerView::save);
    a->setShortcut(QKeySequence::Save);
    a = file->addAction(tr("Save configuration &as…"), designer_, &DesignerView::saveAs);
    a->setShortcut(QKeySequence(QStringLiteral("Ctrl+Shift+S")));
    a = file->addAction(tr("Save Slurm &batch script…"), launch_, &LaunchView::saveSlurmScript);
    file->addSeparator();
    a = file->addAction(tr("&Quit"), this, &QWidget::close);
    a->setShortcut(QKeySequence(QStringLiteral("Ctrl+Q")));
    a->setMenuRole(QAction::QuitRole);

    QMenu* run = menuBar()->addMenu(tr("&Run"));
    a = run->addAction(tr("&Start a new run of the design"), this, [this] {
        showTab(LaunchTab);
        QString error;
        if (!launch_->startLocal(&error)) QMessageBox::warning(this, tr("Cannot start the run"), error);
    });
    a->setObjectName(QStringLiteral("action_new_run"));
    a->setShortcut(QKeySequence(QStringLiteral("Ctrl+R")));
    a = run->addAction(tr("Start the &demo run"), this, [this] {
        QString error;
        demo_run_ = true;
        if (!launch_->startDemo(&error)) {
            demo_run_ = false;
            QMessageBox::warning(this, tr("Cannot start the demo"), error);
        }
    });
    a->setShortcut(QKeySequence(QStringLiteral("Ctrl+Shift+D")));
    a = run->addAction(tr("S&top the local run"), launch_, &LaunchView::stop);
    a->setShortcut(QKeySequence(QStringLiteral("Ctrl+.")));
    a = run->addAction(tr("&Attach to a running job…"), this, [this] {
        showTab(LaunchTab);
        if (auto* e = launch_->attachPanel()->findChild<QWidget*>(QStringLiteral("attach_endpoint"))) e->setFocus();
    });
    a->setObjectName(QStringLiteral("action_attach"));
    a->setShortcut(QKeySequence(QStringLiteral("Ctrl+Shift+A")));
    a = run->addAction(tr("&Generate from a checkpoint…"), this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Checkpoint directory"));
        if (dir.isEmpty()) return;
        auto* dialog = new GenerateDialog(dir, QDir(dir).dirName(), this);
        dialog->setAttribute(Qt::WA_DeleteOnClose);
        dialog->show();
    });
    a->setObjectName(QStringLiteral("action_generate"));
    run->addSeparator();
    a = run->addAction(tr("Auto-&configure the layout…"), designer_, &DesignerView::autoConfigure);
    a->setShortcut(QKeySequence(QStringLiteral("Ctrl+Shift+L")));

    QMenu* view = menuBar()->addMenu(tr("&View"));
    const QStringList names{tr("&Designer"), tr("&Launch"), tr("&Monitor"), tr("&History")};
    for (int t = DesignerTab; t <= HistoryTab; ++t) {
        a = view->addAction(names[t], this, [this, t] { showTab(static_cast<Tab>(t)); });
        a->setShortcut(QKeySequence(QStringLiteral("Ctrl+%1").arg(t + 1)));
    }
    a = view->addAction(tr("Next tab"), this,
                        [this] { tabs_->setCurrentIndex((tabs_->currentIndex() + 1) % tabs_->count()); });
    a->setShortcut(QKeySequence(QStringLiteral("Ctrl+Tab")));
    view->addSeparator();
    // (no shortcut: the History view has F5 itself, and two owners of one key make it do nothing)
    view->addAction(tr("Reload the &history"), history_, &HistoryView::reload);
    a = view->addAction(tr("Dar&k palette"));
    a->setObjectName(QStringLiteral("action_dark"));
    a->setCheckable(true);
    a->setShortcut(QKeySequence(QStringLiteral("Ctrl+Shift+T")));
    connect(a, &QAction::toggled, this, [this](bool dark) { setTheme(dark ? Theme::Dark : Theme::Light); });

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&Keyboard shortcuts"), this, [this] {
        QStringList lines;
        for (QAction* m : menuBar()->actions())
            if (m->menu())
                for (QAction* x : m->menu()->actions())
                    if (!x->shortcut().isEmpty())
                        lines << QStringLiteral("<tr><td>%1</td><td><b>%2</b></td></tr>")
                                     .arg(x->text().remove('&'), x->shortcut().toString(QKeySequence::NativeText));
        QMessageBox::information(this, tr("Keyboard shortcuts"),
                                 QStringLiteral("<table>") + lines.join(QString()) + "</table>");
    });
    help->addAction(tr("&About"), this, [this] {
        QMessageBox::about(this, tr("About Megatron Workbench"),
                           tr("<b>mwb</b> %1<br>Design, launch, watch and compare Megatron-style GPT training runs.<br>"
                              "Runs: %2<br>History: %3")
                               .arg(QStringLiteral(MWB_APP_VERSION), to_qstring(runs_root()), to_qstring(store_)));
    });
    updateRecentMenu();
}

bool MainWindow::applyOptions(const AppOptions& o, QString* error) {
    QStringList problems;
    if (!o.store.isEmpty()) setStoreFile(to_path(o.store));
    if (!o.theme.isEmpty()) setTheme(theme_from_name(o.theme));
    if (!o.config_file.isEmpty()) {
        QString e;
        if (designer_->openFile(o.config_file, &e))
            showTab(DesignerTab);
        else
            problems << tr("%1: %2").arg(o.config_file, e);
    }
    const int t = tab_from_key(o.tab);
    if (t >= 0) showTab(static_cast<Tab>(t));
    if (o.demo) {
        QString e;
        demo_run_ = true;
        if (!launch_->startDemo(&e)) {
            demo_run_ = false;
            problems << tr("demo: %1").arg(e);
        }
    }
    if (!o.attach.isEmpty()) {
        AttachOptions a;
        QString e;
        if (attach_options({o.attach, o.client_key, o.server_key, {}}, store_, a, &e))
            watch(a);
        else
            problems << tr("--attach: %1").arg(e);
    }
    if (!problems.isEmpty()) {
        showMessage(problems.join(QStringLiteral("; ")));
        if (error) *error = problems.join('\n');
        return false;
    }
    return true;
}

void MainWindow::setStoreFile(const std::filesystem::path& file) {
    store_ = file;
    history_->setStoreFile(file);
    store_label_->setText(tr("history: %1").arg(to_qstring(file)));
}

void MainWindow::watch(AttachOptions options) {
    if (options.store_file.empty()) options.store_file = store_;
    monitor_->setPrediction({}, 0);
    monitor_->attach(options);
    run_label_->setText(tr("watching %1").arg(QString::fromStdString(options.endpoint)));
    showTab(MonitorTab);
}

void MainWindow::onRunStarted(const QString& run_dir, int world, bool demo) {
    AttachOptions o;
    o.endpoint = run_dir.toStdString();
    o.store_file = store_;
    monitor_->attach(o);
    // the planner's prediction for what was launched: the design, or the demo preset on this CPU
    planner::Plan plan = launch_->plan();
    if (demo) {
        try {
            plan = planner::plan(planner::load_preset("tiny-cpu-demo"),
                                 planner::make_cluster(planner::find_device(planner::device_catalogue(), "cpu"), 1, 1));
        } catch (const std::exception& e) {
            plan = planner::Plan{};
            showMessage(tr("No prediction for the demo: %1").arg(QString::fromUtf8(e.what())));
        }
    }
    std::vector<double> peaks = predicted_peak_per_rank(plan);
    if (static_cast<int>(peaks.size()) != world) peaks.clear();  // the launch is not the planned layout
    monitor_->setPrediction(std::move(peaks), predicted_capacity(plan));
    run_label_->setText(
        tr("local run %1 (%2 rank%3)").arg(QDir(run_dir).dirName()).arg(world).arg(world == 1 ? "" : "s"));
    showTab(MonitorTab);
}

void MainWindow::markGone(const std::string& run_dir, const ProcessEnd& how, double when) {
    if (store_.empty() || how.status == "finished") return;
    std::string uid;
    if (monitor_->liveRun()->options().endpoint == run_dir) uid = monitor_->liveRun()->traces().run_id;
    try {
        if (uid.empty()) uid = ipc::read_run_endpoints(run_dir).run_id;  // it published, but nobody watched
        store::Store(store_).mark_gone(uid, how.status, how.reason, when);
    } catch (const std::exception& e) {  // the run never started publishing, or the store is unusable
        if (!uid.empty()) showMessage(tr("Could not mark run %1 %2 in the store: %3")
                                          .arg(QString::fromStdString(uid), QString::fromStdString(how.status),
                                               QString::fromUtf8(e.what())));
    }
}

void MainWindow::showTab(Tab tab) {
    tabs_->setCurrentIndex(static_cast<int>(tab));
}

MainWindow::Tab MainWindow::currentTab() const {
    return static_cast<Tab>(tabs_->currentIndex());
}

void MainWindow::addRecentFile(const QString& path) {
    const QString abs = QFileInfo(path).absoluteFilePath();
    recent_.removeAll(abs);
    recent_.prepend(abs);
    while (recent_.size() > kMaxRecent) recent_.removeLast();
    updateRecentMenu();
}

void MainWindow::updateRecentMenu() {
    if (!recent_menu_) return;
    recent_menu_->clear();
    for (int i = 0; i < recent_.size(); ++i) {
        const QString path = recent_[i];
        QAction* a = recent_menu_->addAction(
            QStringLiteral("&%1 %2").arg(i + 1 < 10 ? QString::number(i + 1) : QStringLiteral("0"), path), this,
            [this, path] {
                QString e;
                if (designer_->openFile(path, &e))
                    showTab(DesignerTab);
                else
                    QMessageBox::warning(this, tr("Cannot open %1").arg(path), e);
            });
        a->setData(path);
    }
    recent_menu_->setEnabled(!recent_.isEmpty());
}

void MainWindow::setTheme(Theme theme) {
    apply_theme(theme);
    if (auto* a = findChild<QAction*>(QStringLiteral("action_dark")); a && a->isChecked() != (theme == Theme::Dark)) {
        const QSignalBlocker block(a);
        a->setChecked(theme == Theme::Dark);
    }
    // widgets repaint with the new palette by themselves; charts keep the colours they were styled with
    for (PlotView* plot : findChildren<PlotView*>()) plot->restyle();
    update();
}

void MainWindow::saveSettings() const {
    QSettings s;
    s.setValue(QStringLiteral("window/geometry"), saveGeometry());
    s.setValue(QStringLiteral("window/state"), saveState());
    s.setValue(QStringLiteral("window/tab"), QString::fromLatin1(tab_key(currentTab())));
    if (auto* split = designer_->findChild<QSplitter*>(QStringLiteral("designer_split")))
        s.setValue(QStringLiteral("designer/split"), split->saveState());
    if (auto* split = launch_->findChild<QSplitter*>(QStringLiteral("launch_split")))
        s.setValue(QStringLiteral("launch/split"), split->saveState());
    s.setValue(QStringLiteral("recent_files"), recent_);
    s.setValue(QStringLiteral("monitor/charts"), monitor_->charts()->customCharts());
    s.setValue(QStringLiteral("theme"), theme_name(current_theme()));
    s.sync();
}

void MainWindow::restoreSettings() {
    QSettings s;
    if (s.contains(QStringLiteral("window/geometry")))
        restoreGeometry(s.value(QStringLiteral("window/geometry")).toByteArray());
    if (s.contains(QStringLiteral("window/state"))) restoreState(s.value(QStringLiteral("window/state")).toByteArray());
    const int t = tab_from_key(s.value(QStringLiteral("window/tab")).toString());
    if (t >= 0) showTab(static_cast<Tab>(t));
    if (auto* split = designer_->findChild<QSplitter*>(QStringLiteral("designer_split")))
        split->restoreState(s.value(QStringLiteral("designer/split")).toByteArray());
    if (auto* split = launch_->findChild<QSplitter*>(QStringLiteral("launch_split")))
        split->restoreState(s.value(QStringLiteral("launch/split")).toByteArray());
    recent_.clear();
    for (const QString& f : s.value(QStringLiteral("recent_files")).toStringList())
        if (!f.isEmpty() && recent_.size() < kMaxRecent) recent_ << f;
    updateRecentMenu();
    monitor_->charts()->setCustomCharts(s.value(QStringLiteral("monitor/charts")).toStringList());
    if (s.contains(QStringLiteral("theme"))) setTheme(theme_from_name(s.value(QStringLiteral("theme")).toString()));
}

void MainWindow::quitNow() {
    launch_->stop();
    saveSettings();
    monitor_->detach();
    QApplication::quit();
}

void MainWindow::showMessage(const QString& text) {
    statusBar()->showMessage(text, 8000);
}

void MainWindow::closeEvent(QCloseEvent* event) {
    if (launch_->running()) {
        const auto answer = QMessageBox::question(
            this, tr("A run is going"),
            tr("The local run %1 is still going. Stop it (it checkpoints and exits) and quit?").arg(launch_->runDir()),
            QMessageBox::Yes | QMessageBox::Cancel);
        if (answer != QMessageBox::Yes) {
            event->ignore();
            return;
        }
        launch_->stop();
    }
    saveSettings();
    monitor_->detach();
    event->accept();
}

}  // namespace mwb::app
