#include "app/core/paths.h"

#include "backend/core/files.h"
#include "mwb/store/store.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QFileInfo>
#include <QStandardPaths>
#include <QThread>

namespace mwb::app {

namespace {

bool executable(const QString& path) {
    const QFileInfo f(path);
    return f.exists() && f.isFile() && f.isExecutable();
}

/// One of the engine's programs: $ENV, next to mwb, in a build tree's backend/, then PATH.
QString find_engine_program(const QString& name, const char* env_name) {
    const QString env = qEnvironmentVariable(env_name);
    if (!env.isEmpty() && executable(env)) return QFileInfo(env).absoluteFilePath();
    QStringList candidates;
    if (QCoreApplication::instance()) {
        const QString dir = QCoreApplication::applicationDirPath();
        candidates << dir + "/" + name << dir + "/../backend/" + name << dir + "/../../backend/" + name;
    }
    candidates << QStringLiteral(MWB_BUILD_DIR "/backend/") + name;
    for (const QString& c : candidates)
        if (executable(c)) return QFileInfo(c).canonicalFilePath();
    return QStandardPaths::findExecutable(name);
}

}  // namespace

QString find_trainer() {
    return find_engine_program(QStringLiteral("mwb-train"), "MWB_TRAIN");
}

QString find_generator() {
    return find_engine_program(QStringLiteral("mwb-generate"), "MWB_GENERATE");
}

QString find_mpirun() {
    return QStandardPaths::findExecutable(QStringLiteral("mpirun"));
}

std::filesystem::path default_store_file() {
    const QString env = qEnvironmentVariable("MWB_STORE");
    if (!env.isEmpty()) return to_path(env);
    return store::default_store_path();
}

std::filesystem::path runs_root() {
    return user_data_dir() / "runs";
}

std::filesystem::path new_run_dir(const QString& name) {
    QString clean;
    for (const QChar c : name) clean += (c.isLetterOrNumber() || c == '-' || c == '_' || c == '.') ? c : QChar('-');
    if (clean.isEmpty()) clean = QStringLiteral("gpt");
    const QString stamp = QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss"));
    std::filesystem::path p = runs_root() / to_path(stamp + "-" + clean);
    for (int i = 2; std::filesystem::exists(p); ++i)
        p = runs_root() / to_path(QStringLiteral("%1-%2-%3").arg(stamp, clean).arg(i));
    return p;
}

int local_cores() {
    return std::max(1, QThread::idealThreadCount());
}

QString to_qstring(const std::filesystem::path& p) {
    return QString::fromStdString(p.string());
}

std::filesystem::path to_path(const QString& s) {
    return std::filesystem::path(s.toStdString());
}

}  // namespace mwb::app
