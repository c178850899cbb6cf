#pragma once
// The command lines the Launch view runs or writes: a local run (mwb-train, or mpirun -np N
// mwb-train for a multi-rank layout on this machine), a Slurm batch script (sbatch + srun mwb-train)
// with telemetry on CURVE, and how to connect to it. Pure functions, tested on their own.
#include "backend/config/config.h"

#include <QString>
#include <QStringList>

namespace mwb::app {

struct LocalLaunch {
    QString program;  ///< mpirun or mwb-train
    QStringList arguments;
    int world = 1;
    int threads = 1;  ///< per rank
    QString run_dir, config_file;
    /// The command as one would type it (arguments shell-quoted).
    QString display() const;
};

struct LocalLaunchInputs {
    QString trainer;      ///< mwb-train
    QString mpirun;       ///< "" when not installed
    QString config_file;  ///< the design, saved (mwb-train --config); "": mwb-train's embedded demo
    QString run_dir;
    int world = 1;         ///< ranks: TP × PP × DP
    int cores = 1;         ///< this machine's cores, shared among the ranks
    int threads = 0;       ///< per rank; 0: cores / world (at least 1)
    bool as_root = false;  ///< Open MPI refuses root without --allow-run-as-root
    QStringList extra;     ///< more mwb-train flags (they override the file)
};

/// The local command; `error` set (and false) when a multi-rank run has no mpirun or no trainer exists.
bool local_launch(const LocalLaunchInputs& in, LocalLaunch& out, QString* error);

struct SlurmOptions {
    QString job_name = QStringLiteral("mwb");
    QString partition, account;
    QString time_limit = QStringLiteral("24:00:00");
    int nodes = 1, gpus_per_node = 8, cpus_per_task = 8;  ///< gpus_per_node: ranks per node
    bool gpus = true;                                     ///< false: CPU ranks (--device cpu, no GPUs requested)
    QString trainer = QStringLiteral("mwb-train");        ///< path of mwb-train on the cluster
    QString run_root = QStringLiteral("$HOME/mwb-runs");
    QString key_dir = QStringLiteral("$HOME/.mwb/keys");  ///< run.key_secret and clients/ on the cluster
    /// Telemetry base port: the job binds port + 3·(job id mod 1000) (snapshots + 1, control + 2), so
    /// jobs sharing a node don't collide; the job output names the ports.
    int port = 5555;
    QString mpi = QStringLiteral("pmix");
    double peak_tflops = 0;  ///< per GPU, for MFU (--peak-tflops-per-device) when the config has none
    /// The checkpoint plan. iteration_seconds: the planner's time per iteration (0: unknown); a
    /// checkpoint about every checkpoint_minutes, and SIGUSR1 early enough before the time limit for
    /// two iterations and a save (at least signal_seconds).
    double iteration_seconds = 0;
    int checkpoint_minutes = 30;
    int signal_seconds = 300;
};

/// The sbatch script: resources, the configuration embedded as a heredoc, the head node's address,
/// srun with one task per GPU, telemetry bound on all interfaces with CURVE, and a checkpoint plan: one
/// run directory per job name that every resubmission shares, --save/--load in it (a first job starts
/// fresh), --save-interval from the planned iteration time, SIGUSR1 before the time limit (mwb-train
/// checkpoints and exits 130) and then a requeue that continues from that checkpoint.
QString slurm_script(const Config& config, const SlurmOptions& o);
/// What the user must know about a design before submitting it (e.g. that it trains on mock data);
/// the script carries the same lines as comments and prints them.
QStringList slurm_warnings(const Config& config);
/// Iterations between checkpoints for a planned iteration time (a fixed 1000 when it is unknown).
int64_t planned_save_interval(const Config& config, const SlurmOptions& o);
/// What to do on each side to follow and control the job from this machine.
QString slurm_connection_details(const SlurmOptions& o);

/// Quotes one shell word when needed ('...').
QString shell_quote(const QString& word);

/// What an mwb-train exit status means (docs/config.md: 0, 1, 2, 3, 130).
QString describe_exit(int code, bool crashed);

}  // namespace mwb::app
