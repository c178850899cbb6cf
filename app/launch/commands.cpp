#include "app/launch/commands.h"

#include "app/core/config_file.h"

#include <QRegularExpression>

#include <cstring>
#include <algorithm>
#include <cmath>

namespace mwb::app {

QString shell_quote(const QString& w) {
    static const QRegularExpression plain(QStringLiteral("^[A-Za-z0-9_./=:,+@%-]+$"));
    if (!w.isEmpty() && plain.match(w).hasMatch()) return w;
    QString q = w;
    q.replace(QStringLiteral("'"), QStringLiteral("'\\''"));
    return QStringLiteral("'") + q + QStringLiteral("'");
}

namespace {

/// "..." with ", \ and ` escaped: $VARIABLES in a path the user typed for the cluster still expand.
QString double_quote(const QString& word) {
    QString q = word;
    q.replace(QStringLiteral("\\"), QStringLiteral("\\\\"));
    q.replace(QStringLiteral("\""), QStringLiteral("\\\""));
    q.replace(QStringLiteral("`"), QStringLiteral("\\`"));
    return QStringLiteral("\"") + q + QStringLiteral("\"");
}

}  // namespace

QString LocalLaunch::display() const {
    QStringList words{shell_quote(program)};
    for (const QString& a : arguments) words << shell_quote(a);
    return words.join(' ');
}

bool local_launch(const LocalLaunchInputs& in, LocalLaunch& out, QString* error) {
    out = LocalLaunch{};
    if (in.trainer.isEmpty()) {
        if (error) *error = QObject::tr("mwb-train was not found next to mwb, in the build tree or on PATH");
        return false;
    }
    out.world = std::max(1, in.world);
    out.threads = in.threads > 0 ? in.threads : std::max(1, in.cores / out.world);
    out.run_dir = in.run_dir;
    out.config_file = in.config_file;
    QStringList train;
    // Without a file, the embedded demo (named: flags in `extra` must modify it, not Megatron-LM's defaults).
    if (!in.config_file.isEmpty()) train << QStringLiteral("--config") << in.config_file;
    else train << QStringLiteral("--preset") << QStringLiteral("tiny-cpu-demo");
    train << QStringLiteral("--run-dir") << in.run_dir << QStringLiteral("--threads") << QString::number(out.threads);
    train << in.extra;
    if (out.world == 1) {
        out.program = in.trainer;
        out.arguments = train;
        return true;
    }
    if (in.mpirun.isEmpty()) {
        if (error)
            *error =
                QObject::tr("this layout needs %1 processes, but mpirun is not installed (apt-get install openmpi-bin)")
                    .arg(out.world);
        return false;
    }
    out.program = in.mpirun;
    if (in.as_root) out.arguments << QStringLiteral("--allow-run-as-root");
    if (out.world > in.cores) out.arguments << QStringLiteral("--oversubscribe");
    out.arguments << QStringLiteral("-np") << QString::number(out.world) << in.trainer << train;
    return true;
}

QStringList slurm_warnings(const Config& config) {
    QStringList w;
    if (config.data.mock_data || config.data.data_path.empty())
        w << QObject::tr("this design has no dataset: the job trains on mock data (random tokens). Set data_path "
                         "(a Megatron-LM .bin/.idx prefix) for a real run.");
    if (config.checkpoint.save_interval > 0 || !config.checkpoint.save.empty() || !config.checkpoint.load.empty())
        w << QObject::tr("the design's save/load settings are replaced by the job's checkpoint plan.");
    return w;
}

int64_t planned_save_interval(const Config& config, const SlurmOptions& o) {
    if (o.iteration_seconds <= 0) return 1000;
    const double every = std::max(1, o.checkpoint_minutes) * 60.0 / o.iteration_seconds;
    return std::clamp<int64_t>(static_cast<int64_t>(every), 1, std::max<int64_t>(1, config.training.train_iters));
}

QString slurm_script(const Config& config, const SlurmOptions& o) {
    const int world = o.nodes * o.gpus_per_node;
    // SIGUSR1 this long before the limit: two iterations and a checkpoint's worth, at least signal_seconds.
    const int signal_lead = std::max(o.signal_seconds, static_cast<int>(std::ceil(2 * o.iteration_seconds)) + 120);
    QString s;
    s += QStringLiteral("#!/bin/bash\n");
    const QString unit = o.gpus ? QStringLiteral("GPU") : QStringLiteral("CPU rank");
    s += QStringLiteral("# Megatron Workbench job: %1 rank%2 (%3 node%4 x %5 %6%7), one mwb-train per %6.\n")
             .arg(world)
             .arg(world == 1 ? "" : "s")
             .arg(o.nodes)
             .arg(o.nodes == 1 ? "" : "s")
             .arg(o.gpus_per_node)
             .arg(unit)
             .arg(o.gpus_per_node == 1 ? "" : "s");
    const QStringList warnings = slurm_warnings(config);
    for (const QString& w : warnings) s += QStringLiteral("# WARNING: %1\n").arg(w);
    s += QStringLiteral("#SBATCH --job-name=%1\n").arg(o.job_name);
    s += QStringLiteral("#SBATCH --nodes=%1\n").arg(o.nodes);
    s += QStringLiteral("#SBATCH --ntasks-per-node=%1\n").arg(o.gpus_per_node);
    if (o.gpus) s += QStringLiteral("#SBATCH --gpus-per-node=%1\n").arg(o.gpus_per_node);
    s += QStringLiteral("#SBATCH --cpus-per-task=%1\n").arg(o.cpus_per_task);
    s += QStringLiteral("#SBATCH --time=%1\n").arg(o.time_limit);
    if (!o.partition.isEmpty()) s += QStringLiteral("#SBATCH --partition=%1\n").arg(o.partition);
    if (!o.account.isEmpty()) s += QStringLiteral("#SBATCH --account=%1\n").arg(o.account);
    s += QStringLiteral("#SBATCH --exclusive\n");
    s += QStringLiteral("#SBATCH --requeue\n");
    s += QStringLiteral("#SBATCH --signal=USR1@%1\n").arg(signal_lead);
    s += QStringLiteral("#SBATCH --open-mode=append\n");
    s += QStringLiteral("#SBATCH --output=%x-%j.out\n\n");
    s += QStringLiteral("set -euo pipefail\n");
    for (const QString& w : warnings) s += QStringLiteral("echo %1 >&2\n").arg(shell_quote(QStringLiteral("mwb: WARNING: ") + w));
    s += QStringLiteral("# One run directory per job name, shared by every resubmission and requeue of it: the metrics\n"
                        "# continue there and checkpoints/ is both --save and --load (empty at first: a fresh start).\n");
    s += QStringLiteral("RUN_DIR=%1\n").arg(double_quote(o.run_root + QStringLiteral("/") + o.job_name));
    s += QStringLiteral("CKPT=\"$RUN_DIR/checkpoints\"\n");
    s += QStringLiteral("KEYS=%1            # run.key_secret (this job's pair) and clients/*.key (who may watch)\n")
             .arg(double_quote(o.key_dir));
    s += QStringLiteral("mkdir -p \"$CKPT\"\n");
    s += QStringLiteral("cat > \"$RUN_DIR/config.json\" <<'MWB_CONFIG'\n");
    s += QString::fromStdString(config_to_text(config));
    s += QStringLiteral("MWB_CONFIG\n\n");
    s += QStringLiteral(
        "# Rank 0 runs on the first node and binds telemetry there (CURVE: encrypted, admitted keys only),\n"
        "# on ports of this job's own: two jobs on one node don't collide.\n");
    s += QStringLiteral("HEAD=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n");
    s += QStringLiteral("PORT=$((%1 + 3 * (SLURM_JOB_ID %% 1000)))\n").arg(o.port).replace(QStringLiteral("%%"), QStringLiteral("%"));
    s += QStringLiteral(
        "echo \"mwb: telemetry tcp://$HEAD:$PORT  snapshots tcp://$HEAD:$((PORT + 1))  control "
        "tcp://$HEAD:$((PORT + 2))  run dir $RUN_DIR\"\n\n");
    s += QStringLiteral("export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK\n");
    s += QStringLiteral("# SIGUSR1 (sent %1 s before the time limit, or by scancel --signal=USR1) makes every rank\n"
                        "# checkpoint at the next iteration and exit 130; the job then requeues itself and continues.\n")
             .arg(signal_lead);
    s += QStringLiteral("status=0\n");
    s += QStringLiteral("srun --mpi=%1 --kill-on-bad-exit=1 %2 \\\n").arg(o.mpi, double_quote(o.trainer));
    s += QStringLiteral("    --config \"$RUN_DIR/config.json\" --run-dir \"$RUN_DIR\" --device %1 \\\n")
             .arg(o.gpus ? QStringLiteral("cuda") : QStringLiteral("cpu"));
    s += QStringLiteral("    --save \"$CKPT\" --load \"$CKPT\" --save-interval %1 \\\n").arg(planned_save_interval(config, o));
    s += QStringLiteral("    --telemetry-endpoint \"tcp://0.0.0.0:$PORT\" --telemetry-snapshot-endpoint "
                        "\"tcp://0.0.0.0:$((PORT + 1))\" \\\n");
    s += QStringLiteral("    --control-endpoint \"tcp://0.0.0.0:$((PORT + 2))\" \\\n");
    if (config.telemetry.peak_tflops_per_device <= 0 && o.peak_tflops > 0)
        s += QStringLiteral("    --peak-tflops-per-device %1 \\\n").arg(o.peak_tflops, 0, 'g', 6);
    s += QStringLiteral(
        "    --curve-secret-key-file \"$KEYS/run.key_secret\" --curve-client-keys \"$KEYS/clients\" || status=$?\n");
    s += QStringLiteral("if [ \"$status\" -eq 130 ]; then\n");
    s += QStringLiteral("    echo \"mwb: checkpointed on a signal; requeueing job $SLURM_JOB_ID to continue\"\n");
    s += QStringLiteral("    scontrol requeue \"$SLURM_JOB_ID\"\n");
    s += QStringLiteral("fi\n");
    s += QStringLiteral("exit \"$status\"\n");
    return s;
}

QString slurm_connection_details(const SlurmOptions& o) {
    QString s;
    s += QObject::tr("1. Keys, once (on this machine):\n");
    s += QStringLiteral("     mwb-record keygen keys/run        # the job's key pair\n");
    s += QStringLiteral("     mwb-record keygen keys/$USER      # yours\n");
    s += QObject::tr(
             "   Copy keys/run.key_secret to %1/run.key_secret on the cluster and keys/$USER.key into %1/clients/.\n")
             .arg(o.key_dir);
    s += QObject::tr(
             "2. Submit: sbatch %1.sbatch   (the job output names the head node and the ports: \"mwb: telemetry "
             "tcp://HEAD:PORT ...\", PORT = %2 + 3·(job id mod 1000)).\n"
             "   Resubmit the same script to continue a finished or cancelled run from its last checkpoint.\n")
             .arg(o.job_name)
             .arg(o.port);
    s += QObject::tr(
             "3. Watch it here: Attach, endpoint tcp://HEAD:PORT, client key keys/$USER.key_secret, server key "
             "keys/run.key.\n");
    s += QObject::tr("   Snapshot (PORT + 1) and control (PORT + 2) ports are learned from the run's heartbeats.\n");
    s += QObject::tr(
        "   Behind a login node: ssh -N -L PORT:HEAD:PORT -L PORT+1:HEAD:PORT+1 -L PORT+2:HEAD:PORT+2 LOGIN (the\n"
        "   three numbers), then attach to tcp://127.0.0.1:PORT with the same keys (the job still requires CURVE).\n");
    s += QObject::tr(
        "4. Headless, on the cluster: mwb-record --curve-key keys/$USER.key_secret --server-key keys/run.key "
        "tcp://HEAD:PORT\n");
    return s;
}

QString describe_exit(int code, bool crashed) {
    if (crashed) {  // QProcess gives the signal's number as the exit code of a crashed process
        const char* name = sigabbrev_np(code);
        return name ? QObject::tr("killed by signal %1 (SIG%2)").arg(code).arg(QString::fromLatin1(name))
                    : QObject::tr("killed by signal %1").arg(code);
    }
    switch (code) {
        case 0:
            return QObject::tr("finished");
        case 1:
            return QObject::tr("failed with a runtime error (exit status 1)");
        case 2:
            return QObject::tr("refused the configuration (exit status 2)");
        case 3:
            return QObject::tr("stopped on request (exit status 3)");
        case 130:
            return QObject::tr("interrupted by a signal, after checkpointing (exit status 130)");
        default:
            return QObject::tr("exited with status %1").arg(code);
    }
}

}  // namespace mwb::app
