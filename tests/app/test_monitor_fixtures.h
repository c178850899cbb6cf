#pragma once
// What the Monitor and History suites share: a real mwb-train with a tiny model (about 5 ms per
// iteration on one thread), a child process whose output goes to a file, the run directory's own
// messages as the reference, and waiting that keeps the Qt event loop turning.
#include "support/fixtures.h"

#include "mwb/ipc/message.h"
#include "mwb/ipc/run_dir_log.h"

#include <QProcess>
#include <QtTest>

#include <signal.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <vector>

namespace mwb::test {

inline QString qpath(const std::filesystem::path& p) {
    return QString::fromStdString(p.string());
}

inline QString trainer_exe() {
    return qpath(binary_dir() / "backend" / "mwb-train");
}

/// A step record every iteration; `iterations` large = endless unless stopped.
inline QStringList tiny_run_args(const std::filesystem::path& run_dir, int iterations, const QStringList& extra = {}) {
    return QStringList{"--mock-data",
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

/// Waits for `done` while the GUI thread's events are processed (the views update on timers).
inline bool wait_gui(const std::function<bool()>& done, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return done();
        QTest::qWait(10);
    }
    return true;
}

/// Every message the run directory holds, in seq order (the run's own record of what it published).
inline std::vector<ipc::Message> run_dir_messages(const std::filesystem::path& run_dir) {
    std::vector<ipc::Message> out;
    ipc::for_each_run_dir_message(run_dir, [&](ipc::Message&& m) { out.push_back(std::move(m)); });
    return out;
}

inline std::vector<ipc::Message> of_topic(const std::vector<ipc::Message>& all, const std::string& topic) {
    std::vector<ipc::Message> out;
    for (const auto& m : all)
        if (m.topic == topic) out.push_back(m);
    return out;
}

/// Saves `w` as NAME.png under $MWB_TEST_SHOTS when that is set (to look at a view as a user would).
inline void maybe_save_shot(QWidget& w, const QString& name) {
    const QByteArray dir = qgetenv("MWB_TEST_SHOTS");
    if (!dir.isEmpty()) w.grab().save(QString::fromUtf8(dir) + "/" + name + ".png");
}

inline int file_lines(const std::filesystem::path& file) {
    std::ifstream in(file);
    return static_cast<int>(std::count(std::istreambuf_iterator<char>(in), {}, '\n'));
}

}  // namespace mwb::test
