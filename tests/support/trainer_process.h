#pragma once
// A real mwb-train for the tests that watch, record or control one: a tiny model (about 5 ms per
// iteration on one thread, a step record every iteration) and a child process whose output goes to a
// file, so nobody has to drain a pipe while the test waits (a trainer printing a line per iteration
// would otherwise block on a full pipe).
#include "support/fixtures.h"

#include <QProcess>
#include <QtTest>

#include <signal.h>

#include <fstream>

namespace mwb::test {

inline QString qpath(const std::filesystem::path& p) {
    return QString::fromStdString(p.string());
}

inline QString trainer_exe() {
    return qpath(binary_dir() / "backend" / "mwb-train");
}

/// A step record every iteration; `iterations` large = endless unless stopped.
inline QStringList tiny_run_args(const std::filesystem::path& run_dir, int iterations, const QStringList& extra = {}) {
    return QStringList{"--preset",  // the demo's optimizer settings under a tiny model
                       "tiny-cpu-demo",
                       "--mock-data",
                       "--tokenizer-type",
                       "NullTokenizer",
                       "--vocab-size",
                       "100",
                       "--num-layers",
                       "1",
                       "--hidden-size",
                       "64",
                       "--num-attention-heads",
                       "2",
                       "--seq-length",
                       "64",
                       "--micro-batch-size",
                       "4",
                       "--global-batch-size",
                       "4",
                       "--lr-warmup-iters",
                       "0",
                       "--log-interval",
                       "1",
                       "--eval-interval",
                       "0",
                       "--eval-iters",  // no evaluation at all (eval_interval 0 alone: once after training)
                       "0",
                       "--threads",
                       "1",
                       "--train-iters",
                       QString::number(iterations),
                       "--run-dir",
                       qpath(run_dir)} +
           extra;
}

/// A child process logging to a file (nobody has to drain a pipe while the test waits).
struct Child {
    QProcess p;
    TempDir logs;
    void start(const QString& program, const QStringList& args) {
        const QString log = qpath(logs / "output.log");
        p.setStandardOutputFile(log, QIODevice::Append);
        p.setStandardErrorFile(log, QIODevice::Append);
        p.start(program, args);
        QVERIFY2(p.waitForStarted(), qPrintable(program));
    }
    /// Exit code, or -1 when it did not end in time (then it is killed) or died by a signal.
    int wait(int ms = 30000) {
        // waitForFinished() is false for a process that ended already (the event loop saw it end)
        if (p.state() != QProcess::NotRunning && !p.waitForFinished(ms)) {
            p.kill();
            p.waitForFinished();
            return -1;
        }
        return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    }
    void signal(int sig) { ::kill(static_cast<pid_t>(p.processId()), sig); }
    QString output() const {
        std::ifstream in(logs / "output.log");
        return QString::fromStdString(std::string(std::istreambuf_iterator<char>(in), {}));
    }
    ~Child() {
        if (p.state() != QProcess::NotRunning) {
            p.kill();
            p.waitForFinished();
        }
    }
};

}  // namespace mwb::test
