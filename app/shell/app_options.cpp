#include "app/shell/app_options.h"

#include <QCommandLineParser>
#include <QObject>

namespace mwb::app {

bool parse_app_options(const QStringList& arguments, AppOptions& out, QString* error) {
    const auto fail = [error](const QString& text) {
        if (error) *error = text;
        return false;
    };
    out = AppOptions{};
    QCommandLineParser p;
    p.setApplicationDescription(
        QObject::tr("Megatron Workbench: design, launch, watch and compare GPT training runs."));
    const QCommandLineOption help({QStringLiteral("h"), QStringLiteral("help")}, QObject::tr("Show this help."));
    const QCommandLineOption version(QStringLiteral("version"), QObject::tr("Show the version."));
    const QCommandLineOption demo(
        QStringLiteral("demo"),
        QObject::tr("Start mwb-train's embedded demo run on the CPU and watch it in the Monitor "
                    "(recorded in the store)."));
    const QCommandLineOption attach(
        QStringLiteral("attach"),
        QObject::tr("Follow a running job: its telemetry endpoint (tcp://HOST:PORT) or run directory."),
        QStringLiteral("ENDPOINT"));
    const QCommandLineOption client_key(QStringLiteral("client-key"),
                                        QObject::tr("Your CURVE key pair (NAME.key_secret) for --attach off loopback."),
                                        QStringLiteral("FILE"));
    const QCommandLineOption server_key(QStringLiteral("server-key"),
                                        QObject::tr("The run's CURVE public key (run.key) for --attach off loopback."),
                                        QStringLiteral("FILE"));
    const QCommandLineOption store(QStringLiteral("store"),
                                   QObject::tr("The run history (SQLite) to record into and read (default $MWB_STORE, "
                                               "else ~/.local/share/mwb/history.sqlite)."),
                                   QStringLiteral("FILE"));
    const QCommandLineOption theme(QStringLiteral("theme"), QObject::tr("Palette: light or dark."),
                                   QStringLiteral("NAME"));
    const QCommandLineOption tab(QStringLiteral("tab"),
                                 QObject::tr("The tab to show: designer, launch, monitor or history."),
                                 QStringLiteral("NAME"));
    p.addOptions({help, version, demo, attach, client_key, server_key, store, theme, tab});
    p.addPositionalArgument(QStringLiteral("config"),
                            QObject::tr("A configuration (JSON, as mwb-train reads) to open."),
                            QStringLiteral("[CONFIG.json]"));
    out.help_text = p.helpText().replace(QStringLiteral("<executable_name>"), QStringLiteral("mwb"));
    if (!p.parse(arguments)) return fail(p.errorText());
    out.help = p.isSet(help);
    out.version = p.isSet(version);
    out.demo = p.isSet(demo);
    out.attach = p.value(attach);
    out.client_key = p.value(client_key);
    out.server_key = p.value(server_key);
    out.store = p.value(store);
    out.theme = p.value(theme).toLower();
    out.tab = p.value(tab).toLower();
    const QStringList rest = p.positionalArguments();
    if (rest.size() > 1)
        return fail(QObject::tr("one configuration file at most (got %1: %2)").arg(rest.size()).arg(rest.join(' ')));
    if (!rest.isEmpty()) out.config_file = rest.front();
    if (p.isSet(attach) && out.attach.trimmed().isEmpty())
        return fail(QObject::tr("--attach: give an endpoint or a run directory"));
    if (p.isSet(store) && out.store.trimmed().isEmpty()) return fail(QObject::tr("--store: give a file"));
    if ((!out.client_key.isEmpty() || !out.server_key.isEmpty()) && out.attach.isEmpty())
        return fail(QObject::tr("--client-key and --server-key go with --attach"));
    if (out.demo && !out.attach.isEmpty()) return fail(QObject::tr("--demo and --attach: choose one run to watch"));
    if (!out.theme.isEmpty() && out.theme != QLatin1String("light") && out.theme != QLatin1String("dark"))
        return fail(QObject::tr("--theme: '%1' is not light or dark").arg(out.theme));
    static const QStringList tabs{QStringLiteral("designer"), QStringLiteral("launch"), QStringLiteral("monitor"),
                                  QStringLiteral("history")};
    if (!out.tab.isEmpty() && !tabs.contains(out.tab))
        return fail(QObject::tr("--tab: '%1' is not one of %2").arg(out.tab, tabs.join(QStringLiteral(", "))));
    return true;
}

}  // namespace mwb::app
