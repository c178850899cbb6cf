#include "app/launch/local_run.h"

#include <QDir>

#include <csignal>

namespace mwb::app {

ProcessEnd process_end(int exit_code, bool crashed) {
    ProcessEnd e;
    e.reason = describe_exit(exit_code, crashed).toStdString();
    if (crashed)
        e.status = exit_code == SIGKILL || exit_code == SIGTERM || exit_code == SIGINT || exit_code == SIGHUP
                       ? "interrupted"
                       : "failed";
    else
        e.status = exit_code == 0 ? "finished" : "failed";
    return e;
}

LocalRun::LocalRun(QObject* parent) : QObject(parent) {
    process_.setProcessChannelMode(QProcess::MergedChannels);
    kill_timer_.setSingleShot(true);
    kill_timer_.setInterval(15000);
    connect(&kill_timer_, &QTimer::timeout, this, &LocalRun::kill);
    connect(&process_, &QProcess::readyReadStandardOutput, this,
            [this] { emit output(QString::fromUtf8(process_.readAllStandardOutput())); });
    connect(&process_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
        kill_timer_.stop();
        const QString rest = QString::fromUtf8(process_.readAllStandardOutput());
        if (!rest.isEmpty()) emit output(rest);
        const bool crashed = status == QProcess::CrashExit;
        emit finished(code, crashed, describe_exit(code, crashed));
    });
    connect(&process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
        if (e == QProcess::FailedToStart)
            emit output(tr("\n[mwb] could not start %1: %2\n").arg(launch_.program, process_.errorString()));
    });
}

LocalRun::~LocalRun() {
    // The app is going away: let the run checkpoint and exit (SIGTERM), kill it if it takes too long.
    if (running()) {
        ::kill(static_cast<pid_t>(process_.processId()), SIGTERM);
        if (!process_.waitForFinished(kill_timer_.interval())) {
            process_.kill();
            process_.waitForFinished(3000);
        }
    }
}

bool LocalRun::start(const LocalLaunch& launch, QString* error) {
    if (running()) {
        if (error) *error = tr("a run is already going");
        return false;
    }
    launch_ = launch;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    if (launch.world > 1) {
        // shared-memory transport without ptrace (containers); oversubscribed ranks must not spin
        if (!env.contains(QStringLiteral("OMPI_MCA_btl_vader_single_copy_mechanism")))
            env.insert(QStringLiteral("OMPI_MCA_btl_vader_single_copy_mechanism"), QStringLiteral("none"));
        env.insert(QStringLiteral("OMP_WAIT_POLICY"), QStringLiteral("PASSIVE"));
    }
    env.insert(QStringLiteral("MWB_LAUNCHED_BY"), QStringLiteral("mwb"));
    process_.setProcessEnvironment(env);
    QDir().mkpath(launch.run_dir);
    process_.start(launch.program, launch.arguments);
    if (!process_.waitForStarted(10000)) {
        if (error) *error = tr("could not start %1: %2").arg(launch.program, process_.errorString());
        return false;
    }
    emit output(QStringLiteral("$ %1\n").arg(launch.display()));
    return true;
}

void LocalRun::stop() {
    if (!running()) return;
    ::kill(static_cast<pid_t>(process_.processId()), SIGTERM);
    kill_timer_.start();
}

void LocalRun::kill() {
    if (running()) process_.kill();
}

}  // namespace mwb::app
