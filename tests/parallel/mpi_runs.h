#pragma once
// Real mwb-train runs for the multi-rank suites: one process, or `mpirun -np N` on loopback, and the
// records of its metrics.jsonl.
#include "support/fixtures.h"

#include <QProcess>
#include <QString>
#include <QStringList>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace mwb::test {

/// Starts `exe` with `args`, under `mpirun -np ranks` when ranks > 1 (oversubscribed, shared memory only).
inline void start_ranks(QProcess& p, int ranks, const QString& exe, const QStringList& args) {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("OMPI_ALLOW_RUN_AS_ROOT", "1");
    env.insert("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    env.insert("OMPI_MCA_rmaps_base_oversubscribe", "1");
    env.insert("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
    env.insert("OMPI_MCA_btl", "self,vader");  // loopback only: shared memory between local processes
    p.setProcessEnvironment(env);
    if (ranks == 1)
        p.start(exe, args);
    else
        p.start(MWB_MPIEXEC, QStringList{"-np", QString::number(ranks), exe} + args);
}

/// Runs mwb-train (under mpirun when ranks > 1); returns its exit code, with its output in `log`.
inline int run_train(int ranks, const QStringList& args, QString& log) {
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    start_ranks(p, ranks, QString::fromStdString((binary_dir() / "backend" / "mwb-train").string()), args);
    if (!p.waitForFinished(240000)) p.kill();
    log = p.readAll();
    return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
}

inline std::vector<nlohmann::json> records(const std::filesystem::path& dir, const std::string& topic) {
    std::vector<nlohmann::json> out;
    std::ifstream in(dir / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
        auto j = nlohmann::json::parse(line);
        if (j["topic"] == topic) out.push_back(std::move(j));
    }
    return out;
}

/// The loss and gradient norm of one logged iteration.
struct Step {
    double loss, grad_norm;
};

inline std::vector<Step> steps_of(const std::filesystem::path& dir) {
    std::vector<Step> s;
    for (const auto& r : records(dir, "step")) s.push_back({r["lm_loss"], r["grad_norm"]});
    return s;
}

/// Saves the final checkpoint under <dir>/ckpt (for final_state.h).
inline QStringList save_args(const std::filesystem::path& dir) {
    return {"--save", QString::fromStdString((dir / "ckpt").string())};
}

}  // namespace mwb::test
