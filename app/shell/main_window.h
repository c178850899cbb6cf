#pragma once
// The shell: four tabs (Designer, Launch, Monitor, History) and the wiring between them, menus with
// keyboard shortcuts, the status bar, and what the app remembers (window geometry and state, the tab,
// recent files, the palette) in QSettings. The views do the work; this class only connects them.
#include "app/core/theme.h"
#include "app/launch/local_run.h"
#include "app/live/telemetry_worker.h"

#include <QMainWindow>
#include <QStringList>

#include <filesystem>

class QLabel;
class QMenu;
class QTabWidget;

namespace mwb::app {

struct AppOptions;
class DesignerView;
class LaunchView;
class MonitorView;
class HistoryView;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    enum Tab { DesignerTab, LaunchTab, MonitorTab, HistoryTab };

    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    DesignerView* designer() const { return designer_; }
    LaunchView* launch() const { return launch_; }
    MonitorView* monitor() const { return monitor_; }
    HistoryView* history() const { return history_; }
    QTabWidget* tabs() const { return tabs_; }

    /// Applies the command line: store, theme, config file, tab, then --demo or --attach. False (and
    /// `error`) when one of them fails; the window stays usable.
    bool applyOptions(const AppOptions& options, QString* error = nullptr);
    /// The store every view records into and reads.
    void setStoreFile(const std::filesystem::path& file);
    const std::filesystem::path& storeFile() const { return store_; }
    /// Follows a run in the Monitor (recording into the store) and shows the Monitor.
    void watch(AttachOptions options);

    void showTab(Tab tab);
    Tab currentTab() const;
    QStringList recentFiles() const { return recent_; }
    void addRecentFile(const QString& path);
    void setTheme(Theme theme);

    /// QSettings: window geometry and state, the tab, recent files, the palette, the designer's split.
    void saveSettings() const;
    void restoreSettings();
    /// Quits without asking (SIGINT/SIGTERM): saves the settings, stops a local run (it checkpoints).
    void quitNow();

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void buildMenus();
    void updateRecentMenu();
    void onRunStarted(const QString& run_dir, int world, bool demo);
    void showMessage(const QString& text);
    /// Marks the run of local run directory `run_dir` gone in the store (if it is still "running").
    void markGone(const std::string& run_dir, const ProcessEnd& how, double when);
    DesignerView* designer_ = nullptr;
    LaunchView* launch_ = nullptr;
    MonitorView* monitor_ = nullptr;
    HistoryView* history_ = nullptr;
    QTabWidget* tabs_ = nullptr;
    QMenu* recent_menu_ = nullptr;
    QLabel* store_label_ = nullptr;
    QLabel* run_label_ = nullptr;
    QStringList recent_;
    std::filesystem::path store_;
    bool demo_run_ = false;
};

}  // namespace mwb::app
