// mwb: the Megatron Workbench desktop app (docs/app.md). Everything is in mwb_app_lib; this parses
// the command line, applies the palette and the remembered window, and shows the MainWindow.
#include "app/core/theme.h"
#include "app/shell/app_options.h"
#include "app/shell/main_window.h"

#include <QApplication>
#include <QSocketNotifier>

#include <sys/socket.h>
#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <memory>

namespace {

// SIGINT/SIGTERM end the app as quitting does (settings saved, a local run stopped so it checkpoints):
// the handler only writes a byte; the event loop reads it.
int g_signal_pipe[2] = {-1, -1};

void on_signal(int) {
    const char c = 1;
    [[maybe_unused]] const auto n = ::write(g_signal_pipe[0], &c, 1);
}

}  // namespace

int main(int argc, char** argv) {
    // The command line first: --help, --version and usage errors need no display.
    QStringList arguments;
    for (int i = 0; i < argc; ++i) arguments << QString::fromLocal8Bit(argv[i]);
    mwb::app::AppOptions options;
    QString error;
    if (!mwb::app::parse_app_options(arguments, options, &error)) {
        std::fprintf(stderr, "mwb: %s\n\n%s", qPrintable(error), qPrintable(options.help_text));
        return 2;
    }
    if (options.help) {
        std::printf("%s", qPrintable(options.help_text));
        return 0;
    }
    if (options.version) {
        std::printf("mwb %s\n", MWB_APP_VERSION);
        return 0;
    }
    if (qEnvironmentVariableIsEmpty("DISPLAY") && qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY") &&
        qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
        std::fprintf(stderr,
                     "mwb: no display ($DISPLAY and $WAYLAND_DISPLAY are unset). Run it on a desktop, under "
                     "xvfb-run, or with QT_QPA_PLATFORM=offscreen; without a display, scripts/demo.sh trains and "
                     "records headless and mwb-record follows runs.\n");
        return 1;
    }

    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("mwb"));
    QApplication::setApplicationName(QStringLiteral("mwb"));
    QApplication::setApplicationVersion(QStringLiteral(MWB_APP_VERSION));

    mwb::app::apply_theme(mwb::app::Theme::Light);
    mwb::app::MainWindow window;
    window.restoreSettings();
    if (!window.applyOptions(options, &error)) std::fprintf(stderr, "mwb: %s\n", qPrintable(error));
    window.show();

    std::unique_ptr<QSocketNotifier> signal_notifier;
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, g_signal_pipe) == 0) {
        signal_notifier = std::make_unique<QSocketNotifier>(g_signal_pipe[1], QSocketNotifier::Read);
        QObject::connect(signal_notifier.get(), &QSocketNotifier::activated, &window, [&window] {
            char c = 0;
            [[maybe_unused]] const auto n = ::read(g_signal_pipe[1], &c, 1);
            window.quitNow();
        });
        std::signal(SIGINT, on_signal);
        std::signal(SIGTERM, on_signal);
    }
    return QApplication::exec();
}
