#pragma once
// What the Monitor and History suites share: a real mwb-train with a tiny model (about 5 ms per
// iteration on one thread), a child process whose output goes to a file, the run directory's own
// messages as the reference, and waiting that keeps the Qt event loop turning.
#include "support/trainer_process.h"

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
