// mwb-screenshots: renders each main view of the real app to docs/screenshots/*.png (1400×900):
// the Designer with a preset, auto-configure's ranking, problems under their fields, Launch after a real local run, the
// Monitor during and after that run (with the crosshair), the History with two runs overlaid and grouped by learning
// rate against their final loss, and the Designer and Monitor in the dark palette. Under Xvfb it is the UI check
// (scripts/ui-check.sh): a real window, real runs, every view. The runs
// are real, short mwb-train runs on the bundled corpus, recorded into a temporary store (the user's is never touched).
//   mwb-screenshots [--designer-only] [OUTPUT_DIR]   (default: the source tree's docs/screenshots)
#include "backend/config/fields.h"
#include "app/core/paths.h"
#include "app/core/theme.h"
#include "app/designer/auto_configure_dialog.h"
#include "app/designer/config_form.h"
#include "app/designer/designer_view.h"
#include "app/designer/field_editor.h"
#include "app/history/history_view.h"
#include "app/history/scatter_plot.h"
#include "app/launch/launch_view.h"
#include "app/monitor/metric_charts.h"
#include "app/monitor/monitor_view.h"
#include "app/monitor/samples_panel.h"
#include "mwb/planner/presets.h"
#include "app/shell/main_window.h"

#include <QAbstractItemView>
#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QItemSelectionModel>
#include <QSettings>
#include <QSpinBox>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QThread>

#include <cstdio>
#include <fstream>
#include <functional>

using namespace mwb;
using namespace mwb::app;

namespace {

/// Runs the event loop until `done` or `timeout_ms`; false on timeout.
bool wait_until(const std::function<bool()>& done, int timeout_ms) {
    QElapsedTimer t;
    t.start();
    while (!done()) {
        if (t.elapsed() > timeout_ms) return false;
        QApplication::processEvents(QEventLoop::AllEvents, 50);
        QThread::msleep(10);
    }
    return true;
}

void settle(int ms = 300) {
    wait_until([] { return false; }, ms);
}

bool save(QWidget* w, const QString& dir, const QString& name) {
    settle();
    const QString path = dir + QStringLiteral("/") + name;
    const bool ok = w->grab().save(path);
    std::printf("%s %s\n", ok ? "wrote" : "FAILED to write", qPrintable(path));
    return ok;
}

/// A small model that learns visibly within a minute on two cores (the bundled corpus, byte-level).
Config short_run(double lr) {
    Config c = planner::load_preset("tiny-cpu-demo");
    c.model.num_layers = 2;
    c.model.hidden_size = 128;
    c.model.num_attention_heads = 4;
    c.model.seq_length = 64;
    c.training.micro_batch_size = 8;
    c.training.global_batch_size = 16;
    c.training.train_iters = 80;
    c.training.lr = lr;
    c.training.lr_warmup_iters = 8;
    c.logging.log_interval = 2;
    c.data.eval_interval = 20;
    c.data.eval_iters = 2;
    return c;
}

/// Samples during training (issue 14) where this build's trainer has the fields: set by name through
/// the field table, so the tool builds with or without them.
void enable_sampling(Config& c, const std::string& prompts_file) {
    const auto set = [&](std::string_view name, int64_t number, const std::string& text) {
        const Field* f = find_config_field(name);
        if (!f) return false;
        std::visit(
            [&](auto* p) {
                using T = std::remove_pointer_t<decltype(p)>;
                if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) *p = static_cast<T>(number);
                if constexpr (std::is_same_v<T, std::string>) *p = text;
            },
            f->ref(c));
        return true;
    };
    if (set("sample_prompts", 0, prompts_file)) {
        set("sample_interval", 20, {});
        set("sample_max_new_tokens", 24, {});
    }
}

/// Starts the design from the Launch view, grabs the Monitor half-way, waits for the end.
bool run_design(MainWindow& w, const Config& c, int ranks, const QString& name, const QString& out,
                const QString& live_shot) {
    w.designer()->setConfig(c);
    w.designer()->setCluster(QStringLiteral("cpu"), ranks, 1);
    w.launch()->findChild<QWidget*>(QStringLiteral("launch_name"))->setProperty("text", name);
    QString error;
    if (!w.launch()->startLocal(&error)) {
        std::fprintf(stderr, "mwb-screenshots: cannot start %s: %s\n", qPrintable(name), qPrintable(error));
        return false;
    }
    if (!live_shot.isEmpty()) {
        const RunTraces& t = w.monitor()->liveRun()->traces();
        if (wait_until([&] { return t.last_step.iteration >= c.training.train_iters / 2; }, 180000))
            save(&w, out, live_shot);
    }
    if (!wait_until([&] { return !w.launch()->running(); }, 300000)) {
        std::fprintf(stderr, "mwb-screenshots: %s did not finish\n", qPrintable(name));
        return false;
    }
    // the run's own run.end reaches the Monitor
    wait_until([&] { return w.monitor()->liveRun()->traces().end.has_value(); }, 10000);
    settle(500);
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM") && qEnvironmentVariableIsEmpty("DISPLAY") &&
        qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QTemporaryDir tmp;
    qputenv("XDG_DATA_HOME", tmp.path().toUtf8());
    qputenv("MWB_STORE", tmp.filePath(QStringLiteral("history.sqlite")).toUtf8());
    qputenv("OMPI_ALLOW_RUN_AS_ROOT", "1");
    qputenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    qputenv("OMPI_MCA_rmaps_base_oversubscribe", "1");
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("mwb-screenshots"));
    QApplication::setApplicationName(QStringLiteral("mwb-screenshots"));
    QSettings::setDefaultFormat(QSettings::IniFormat);
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, tmp.filePath(QStringLiteral("settings")));
    bool designer_only = false;
    QString out = QStringLiteral(MWB_SOURCE_DIR "/docs/screenshots");
    for (int i = 1; i < argc; ++i) {
        const QString a = QString::fromLocal8Bit(argv[i]);
        if (a == QLatin1String("--designer-only"))
            designer_only = true;  // no runs: seconds, for layout work
        else
            out = a;
    }
    QDir().mkpath(out);

    apply_theme(Theme::Light);
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    settle();
    bool ok = true;

    // Designer: GPT-3 175B on 1024 A100s (the preset's layout)
    w.designer()->loadPreset(QStringLiteral("gpt3-175b"));
    w.showTab(MainWindow::DesignerTab);
    ok &= save(&w, out, QStringLiteral("designer.png"));

    // Auto-configure: GPT-3 13B on two nodes of A100s, the ranked layouts
    w.designer()->loadPreset(QStringLiteral("gpt3-13b"));
    w.designer()->setCluster(QStringLiteral("A100-80GB"), 8, 2);
    {
        AutoConfigureDialog dialog(w.designer()->config(), w.designer()->cluster(), &w);
        dialog.resize(1300, 640);
        dialog.show();
        dialog.start();
        dialog.waitForResult();
        dialog.selectRow(0);
        ok &= save(&dialog, out, QStringLiteral("autoconfigure.png"));
    }

    // problems in words under the fields that cause them: 4 heads over 3 tensor-parallel ranks
    w.designer()->loadPreset(QStringLiteral("tiny-cpu-demo"));
    w.designer()->setCluster(QStringLiteral("cpu"), 4, 1);
    if (FieldEditor* e = w.designer()->form()->editor(QStringLiteral("tensor_model_parallel_size")))
        if (auto* spin = qobject_cast<QSpinBox*>(e->input())) spin->setValue(3);
    w.designer()->replan();
    w.designer()->form()->focusField(QStringLiteral("tensor_model_parallel_size"));
    ok &= save(&w, out, QStringLiteral("designer-problems.png"));

    if (designer_only) return ok ? 0 : 1;

    // two real runs: one process, then two data-parallel ranks under mpirun
    const std::string prompts = tmp.filePath(QStringLiteral("prompts.txt")).toStdString();
    std::ofstream(prompts) << "In the beginning\nAnd God said\nThe LORD is my shepherd\n";
    Config first = short_run(3e-3);
    enable_sampling(first, prompts);
    ok &= run_design(w, first, 1, QStringLiteral("lr3e-3"), out, QStringLiteral("monitor-live.png"));
    // what the model wrote as it learned (the Samples tab), where the trainer samples
    if (!w.monitor()->liveRun()->traces().samples.empty()) {
        w.monitor()->logTabs()->setCurrentWidget(w.monitor()->samples());
        settle(300);
        ok &= save(&w, out, QStringLiteral("monitor-samples.png"));
        w.monitor()->logTabs()->setCurrentIndex(0);
    } else {
        std::printf(
            "mwb-screenshots: the trainer wrote no samples (no --sample-interval in this build): "
            "no monitor-samples.png\n");
    }
    // the crosshair where the mouse would be: every chart's value at iteration 50
    for (int c = 0; c < MetricCharts::ChartCount; ++c)
        w.monitor()->charts()->chart(static_cast<MetricCharts::Chart>(c))->setCrosshair(50.0);
    ok &= save(&w, out, QStringLiteral("monitor.png"));
    for (int c = 0; c < MetricCharts::ChartCount; ++c)
        w.monitor()->charts()->chart(static_cast<MetricCharts::Chart>(c))->setCrosshair(std::nullopt);
    w.showTab(MainWindow::LaunchTab);
    ok &= save(&w, out, QStringLiteral("launch.png"));
    if (!find_mpirun().isEmpty())
        ok &= run_design(w, short_run(1e-3), 2, QStringLiteral("lr1e-3-dp2"), out, {});
    else
        ok &= run_design(w, short_run(1e-3), 1, QStringLiteral("lr1e-3"), out, {});

    // History: both runs, overlaid
    w.showTab(MainWindow::HistoryTab);
    w.history()->reload();
    settle(500);
    for (QAbstractItemView* v : w.history()->findChildren<QAbstractItemView*>()) {
        if (v->model() && v->model()->rowCount() >= 2 && v->selectionMode() == QAbstractItemView::ExtendedSelection) {
            v->selectAll();
            break;
        }
    }
    settle(800);
    ok &= save(&w, out, QStringLiteral("history.png"));
    // grouped by learning rate, the final loss against it
    w.history()->setGroupKey(QStringLiteral("lr"));
    for (auto* tabs : w.history()->findChildren<QTabWidget*>())
        if (tabs->indexOf(w.history()->scatter()) >= 0) tabs->setCurrentWidget(w.history()->scatter());
    w.history()->scatter()->setKey(QStringLiteral("lr"));
    settle(500);
    ok &= save(&w, out, QStringLiteral("history-scatter.png"));

    // the dark palette
    w.setTheme(Theme::Dark);
    w.designer()->loadPreset(QStringLiteral("gpt3-13b"));
    w.showTab(MainWindow::DesignerTab);
    ok &= save(&w, out, QStringLiteral("designer-dark.png"));
    w.showTab(MainWindow::MonitorTab);
    ok &= save(&w, out, QStringLiteral("monitor-dark.png"));
    w.setTheme(Theme::Light);
    w.monitor()->detach();
    return ok ? 0 : 1;
}
