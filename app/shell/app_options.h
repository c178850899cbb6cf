#pragma once
// The command line of `mwb`:
//   mwb [--demo] [--attach ENDPOINT|RUN_DIR [--client-key FILE --server-key FILE]] [--store FILE]
//       [--theme light|dark] [--tab designer|launch|monitor|history] [CONFIG.json]
// Parsed without exiting (QCommandLineParser::parse), so tests check every case.
#include <QString>
#include <QStringList>

namespace mwb::app {

struct AppOptions {
    bool demo = false;    ///< start mwb-train's embedded demo run and watch it in the Monitor
    QString attach;       ///< follow this endpoint or run directory at start
    QString client_key;   ///< CURVE key pair (NAME.key_secret) for --attach off loopback
    QString server_key;   ///< the run's public key for --attach off loopback
    QString store;        ///< the history store (default: $MWB_STORE, else ~/.local/share/mwb/history.sqlite)
    QString theme;        ///< "light" | "dark" | "" (the remembered one)
    QString tab;          ///< "designer" | "launch" | "monitor" | "history" | "" (the remembered one)
    QString config_file;  ///< a configuration to open in the Designer
    bool help = false, version = false;
    QString help_text;  ///< what --help prints
};

/// Parses `arguments` (arguments[0] is the program). False with `error` naming the option when they
/// are wrong (unknown option, bad value, two config files, keys without --attach).
bool parse_app_options(const QStringList& arguments, AppOptions& out, QString* error);

}  // namespace mwb::app
