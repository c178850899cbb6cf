#include "launch/commands.h"

#include "core/config_file.h"

#include <QRegularExpression>

#include <cstring>

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

QString slurm_script(const Config& config, const SlurmOptions& o) {
    const int world = o.nodes * o.gpus_per_node;
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
    s += QStringLiteral("#SBATCH --job-name=%1\n").arg(o.job_name);
    s += QStringLiteral("#SBATCH --nodes=%1\n").arg(o.nodes);
    s += QStringLiteral("#SBATCH --ntasks-per-node=%1\n").arg(o.gpus_per_node);
    if (o.gpus) s += QStringLiteral("#SBATCH --gpus-per-node=%1\n").arg(o.gpus_per_node);
    s += QStringLiteral("#SBATCH --cpus-per-task=%1\n").arg(o.cpus_per_task);
    s += QStringLiteral("#SBATCH --time=%1\n").arg(o.time_limit);
    if (!o.partition.isEmpty()) s += QStringLiteral("#SBATCH --partition=%1\n").arg(o.partition);
    if (!o.account.isEmpty()) s += QStringLiteral("#SBATCH --account=%1\n").arg(o.account);
    s += QStringLiteral("#SBATCH --output=%x-%j.out\n\n");
    s += QStringLiteral("set -euo pipefail\n");
    s += QStringLiteral("RUN_DIR=\"%1/${SLURM_JOB_NAME}-${SLURM_JOB_ID}\"\n").arg(o.run_root);
    s += QStringLiteral("KEYS=\"%1\"            # run.key_secret (this job's pair) and clients/*.key (who may watch)\n")
             .arg(o.key_dir);
    s += QStringLiteral("mkdir -p \"$RUN_DIR\"\n");
    s += QStringLiteral("cat > \"$RUN_DIR/config.json\" <<'MWB_CONFIG'\n");
    s += QString::fromStdString(config_to_text(config));
    s += QStringLiteral("MWB_CONFIG\n\n");
    s += QStringLiteral(
        "# Rank 0 runs on the first node and binds telemetry there (CURVE: encrypted, admitted keys only).\n");
    s += QStringLiteral("HEAD=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n");
    s += QStringLiteral(
             "echo \"mwb: telemetry tcp://$HEAD:%1  snapshots tcp://$HEAD:%2  control tcp://$HEAD:%3  run dir "
             "$RUN_DIR\"\n\n")
             .arg(o.port)
             .arg(o.port + 1)
             .arg(o.port + 2);
    s += QStringLiteral("export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK\n");
    s += QStringLiteral("srun --mpi=%1 --kill-on-bad-exit=1 %2 \\\n").arg(o.mpi, double_quote(o.trainer));
    s += QStringLiteral("    --config \"$RUN_DIR/config.json\" --run-dir \"$RUN_DIR\" --device %1 \\\n")
             .arg(o.gpus ? QStringLiteral("cuda") : QStringLiteral("cpu"));
    s += QStringLiteral("    --telemetry-endpoint tcp://0.0.0.0:%1 --telemetry-snapshot-endpoint tcp://0.0.0.0:%2 \\\n")
             .arg(o.port)
             .arg(o.port + 1);
    s += QStringLiteral("    --control-endpoint tcp://0.0.0.0:%1 \\\n").arg(o.port + 2);
    if (config.logging.peak_tflops_per_device <= 0 && o.peak_tflops > 0)
        s += QStringLiteral("    --peak-tflops-per-device %1 \\\n").arg(o.peak_tflops, 0, 'g', 6);
    s += QStringLiteral("    --curve-secret-key-file \"$KEYS/run.key_secret\" --curve-client-keys \"$KEYS/clients\"\n");
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
             "2. Submit: sbatch %1.sbatch   (the job output names the head node: \"mwb: telemetry tcp://HEAD:%2 "
             "...\")\n")
             .arg(o.job_name)
             .arg(o.port);
    s += QObject::tr(
             "3. Watch it here: Attach, endpoint tcp://HEAD:%1, client key keys/$USER.key_secret, server key "
             "keys/run.key.\n")
             .arg(o.port);
    s += QObject::tr("   Snapshot (%1) and control (%2) ports are learned from the run's heartbeats.\n")
             .arg(o.port + 1)
             .arg(o.port + 2);
    s += QObject::tr(
             "   Behind a login node: ssh -N -L %1:HEAD:%1 -L %2:HEAD:%2 -L %3:HEAD:%3 LOGIN, then attach to\n"
             "   tcp://127.0.0.1:%1 with the same keys (the job still requires CURVE).\n")
             .arg(o.port)
             .arg(o.port + 1)
             .arg(o.port + 2);
    s += QObject::tr(
             "4. Headless, on the cluster: mwb-record --curve-key keys/$USER.key_secret --server-key keys/run.key "
             "tcp://HEAD:%1\n")
             .arg(o.port);
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
