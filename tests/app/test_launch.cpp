// Launch: the command lines (one process, mpirun for several ranks, the Slurm batch script and its
// connection details), the attach inputs (loopback, CURVE keys off loopback), the prediction per rank,
// and real local runs of mwb-train started through the Launch view that end with status finished.
#include "backend/config/config_io.h"
#include "app/core/config_file.h"
#include "app/core/paths.h"
#include "app/launch/attach_panel.h"
#include "app/launch/commands.h"
#include "app/launch/launch_view.h"
#include "app/launch/local_run.h"
#include "app/launch/prediction.h"
#include "mwb/ipc/curve.h"
#include "mwb/planner/presets.h"

#include <nlohmann/json.hpp>

#include <QDir>
#include <QFile>
#include <QLineEdit>
#include <QSignalSpy>
#include <QTemporaryDir>
#include "support/skip.h"
#include "support/suite.h"

#include <QtTest>

#include <fstream>

namespace test_launch {

using namespace mwb;
using namespace mwb::app;

namespace {

Config tiny_config() {
    Config c;
    c.model.num_layers = 2;
    c.model.hidden_size = 64;
    c.model.num_attention_heads = 2;
    c.model.seq_length = 32;
    c.training.micro_batch_size = 4;
    c.training.global_batch_size = 8;  // 2 micro-batches on one rank, 1 per rank at DP 2
    c.training.train_iters = 6;
    c.training.lr = 1e-3;
    c.logging.log_interval = 2;
    c.data.eval_interval = 3;
    c.data.eval_iters = 1;
    c.data.mock_data = true;
    return c;
}

planner::Cluster cpu_cluster(int ranks) {
    return planner::make_cluster(planner::find_device(planner::device_catalogue(), "cpu"), ranks, 1);
}

/// The last line of a run directory's events.jsonl with topic run.end (null when none).
nlohmann::json run_end(const QString& run_dir) {
    std::ifstream in((run_dir + QStringLiteral("/events.jsonl")).toStdString());
    nlohmann::json last;
    for (std::string line; std::getline(in, line);) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.value("topic", "") == "run.end") last = j;
    }
    return last;
}

}  // namespace

class TestLaunch : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        qputenv("XDG_DATA_HOME", tmp_.path().toUtf8());
        qputenv("MWB_STORE", (tmp_.path() + QStringLiteral("/history.sqlite")).toUtf8());
        qputenv("OMPI_ALLOW_RUN_AS_ROOT", "1");
        qputenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        qputenv("OMPI_MCA_rmaps_base_oversubscribe", "1");
    }

    void singleProcessCommand() {
        LocalLaunchInputs in;
        in.trainer = QStringLiteral("/opt/mwb/bin/mwb-train");
        in.config_file = QStringLiteral("/runs/a b/config.json");
        in.run_dir = QStringLiteral("/runs/a b");
        in.cores = 8;
        in.extra = {QStringLiteral("--device"), QStringLiteral("cpu")};
        LocalLaunch out;
        QString error;
        QVERIFY2(local_launch(in, out, &error), qPrintable(error));
        QCOMPARE(out.program, in.trainer);
        QCOMPARE(out.arguments, QStringList({"--config", "/runs/a b/config.json", "--run-dir", "/runs/a b", "--threads",
                                             "8", "--device", "cpu"}));
        QCOMPARE(out.display(),
                 QStringLiteral("/opt/mwb/bin/mwb-train --config '/runs/a b/config.json' --run-dir '/runs/a b' "
                                "--threads 8 --device cpu"));
        // the embedded demo: no --config
        in.config_file.clear();
        QVERIFY(local_launch(in, out, &error));
        QVERIFY(!out.arguments.contains(QStringLiteral("--config")));
    }

    void mpirunCommand() {
        LocalLaunchInputs in;
        in.trainer = QStringLiteral("mwb-train");
        in.mpirun = QStringLiteral("/usr/bin/mpirun");
        in.config_file = QStringLiteral("c.json");
        in.run_dir = QStringLiteral("r");
        in.world = 4;
        in.cores = 2;
        in.as_root = true;
        LocalLaunch out;
        QString error;
        QVERIFY2(local_launch(in, out, &error), qPrintable(error));
        QCOMPARE(out.program, in.mpirun);
        QCOMPARE(out.world, 4);
        QCOMPARE(out.threads, 1);  // 2 cores shared by 4 ranks: at least one each
        QCOMPARE(out.arguments, QStringList({"--allow-run-as-root", "--oversubscribe", "-np", "4", "mwb-train",
                                             "--config", "c.json", "--run-dir", "r", "--threads", "1"}));
        in.as_root = false;
        in.cores = 16;
        QVERIFY(local_launch(in, out, &error));
        QCOMPARE(out.arguments.mid(0, 3), QStringList({"-np", "4", "mwb-train"}));
        QCOMPARE(out.threads, 4);
        in.mpirun.clear();
        QVERIFY(!local_launch(in, out, &error));
        QVERIFY2(error.contains(QStringLiteral("mpirun")) && error.contains(QStringLiteral("4 processes")),
                 qPrintable(error));
        in.trainer.clear();
        QVERIFY(!local_launch(in, out, &error));
        QVERIFY2(error.contains(QStringLiteral("mwb-train")), qPrintable(error));
    }

    void slurmScript() {
        Config c = planner::load_preset("gpt3-175b");
        SlurmOptions o;
        o.job_name = QStringLiteral("gpt175");
        o.nodes = 128;
        o.gpus_per_node = 8;
        o.partition = QStringLiteral("batch");
        o.port = 6000;
        o.trainer = QStringLiteral("$HOME/mwb/bin/mwb-train");  // expands on the cluster
        const QString s = slurm_script(c, o);
        QVERIFY(s.startsWith(QStringLiteral("#!/bin/bash\n")));
        for (const char* line :
             {"#SBATCH --job-name=gpt175", "#SBATCH --nodes=128", "#SBATCH --ntasks-per-node=8",
              "#SBATCH --gpus-per-node=8", "#SBATCH --partition=batch",
              "srun --mpi=pmix --kill-on-bad-exit=1 \"$HOME/mwb/bin/mwb-train\" \\\n",
              "PORT=$((6000 + 3 * (SLURM_JOB_ID % 1000)))\n", "--telemetry-endpoint \"tcp://0.0.0.0:$PORT\"",
              "--telemetry-snapshot-endpoint \"tcp://0.0.0.0:$((PORT + 1))\"",
              "--control-endpoint \"tcp://0.0.0.0:$((PORT + 2))\"", "--curve-secret-key-file", "--curve-client-keys",
              "--device cuda", "scontrol show hostnames",
              // the checkpoint plan: one directory for every resubmission, a fresh start when it is empty
              "RUN_DIR=\"$HOME/mwb-runs/gpt175\"\n", "--save \"$CKPT\" --load \"$CKPT\" --save-interval 1000 \\\n",
              "#SBATCH --exclusive\n", "#SBATCH --requeue\n", "#SBATCH --signal=USR1@300\n",
              "scontrol requeue \"$SLURM_JOB_ID\""})
            QVERIFY2(s.contains(QString::fromLatin1(line)), line);
        QVERIFY(!s.contains(QStringLiteral("SLURM_JOB_NAME}-${SLURM_JOB_ID")));  // not one directory per job id
        {
            // From the planned iteration time: a checkpoint about every 30 minutes, and SIGUSR1 early
            // enough for two iterations and a save.
            SlurmOptions planned = o;
            planned.iteration_seconds = 400;
            const QString p = slurm_script(c, planned);
            QVERIFY(p.contains(QStringLiteral("--save-interval 4 \\\n")));
            QVERIFY(p.contains(QStringLiteral("#SBATCH --signal=USR1@920\n")));
        }
        {
            // A design without a dataset (the preset) says so, in the script and in the job's output.
            QCOMPARE(slurm_warnings(c).size(), 1);
            QVERIFY(s.contains(QStringLiteral("# WARNING: this design has no dataset: the job trains on mock data")));
            QVERIFY(s.contains(QStringLiteral("echo 'mwb: WARNING: this design has no dataset")));
            Config real = c;
            real.data.mock_data = false;
            real.data.data_path = {"/data/corpus_text_document"};
            QVERIFY(slurm_warnings(real).isEmpty());
            QVERIFY(!slurm_script(real, o).contains(QStringLiteral("WARNING")));
        }
        QVERIFY(!s.contains(QStringLiteral("#SBATCH --account")));         // not set: not written
        QVERIFY(!s.contains(QStringLiteral("--peak-tflops-per-device")));  // no peak given
        {
            SlurmOptions cpu = o;
            cpu.gpus = false;
            const QString c_script = slurm_script(c, cpu);
            QVERIFY(!c_script.contains(QStringLiteral("--gpus-per-node")));
            QVERIFY(c_script.contains(QStringLiteral("--device cpu")));
            QVERIFY(c_script.contains(QStringLiteral("#SBATCH --ntasks-per-node=8")));
        }
        {
            SlurmOptions with_peak = o;
            with_peak.peak_tflops = 312;
            QVERIFY(slurm_script(c, with_peak).contains(QStringLiteral("--peak-tflops-per-device 312 \\\n")));
        }
        // the embedded configuration is the design, byte for byte what mwb-train will parse
        const int begin = s.indexOf(QStringLiteral("<<'MWB_CONFIG'\n")) + 15;
        const int end = s.indexOf(QStringLiteral("\nMWB_CONFIG\n"));
        QVERIFY(begin > 15 && end > begin);
        const Config parsed = parse_config(s.mid(begin, end - begin).toStdString(), "the script");
        QVERIFY(same_config(parsed, c));
        // the script is valid bash
        QTemporaryDir dir;
        QFile f(dir.filePath(QStringLiteral("job.sbatch")));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(s.toUtf8());
        f.close();
        QProcess bash;
        bash.start(QStringLiteral("bash"), {QStringLiteral("-n"), f.fileName()});
        QVERIFY(bash.waitForFinished(10000));
        QVERIFY2(bash.exitCode() == 0, bash.readAllStandardError().constData());

        const QString d = slurm_connection_details(o);
        for (const char* part : {"mwb-record keygen", "tcp://HEAD:PORT", "key_secret", "run.key",
                                 "ssh -N -L PORT:HEAD:PORT", "sbatch gpt175.sbatch", "PORT = 6000 + 3"})
            QVERIFY2(d.contains(QString::fromLatin1(part)), part);
    }

    void attachInputs() {
        AttachOptions out;
        QString error;
        const auto store = to_path(tmp_.path() + QStringLiteral("/h.sqlite"));
        QVERIFY(attach_options({QStringLiteral("tcp://127.0.0.1:5555"), {}, {}, {}}, store, out, &error));
        QCOMPARE(out.endpoint, std::string("tcp://127.0.0.1:5555"));
        QVERIFY(!out.curve);
        QCOMPARE(out.store_file, store);
        QVERIFY(attach_options({QStringLiteral("/some/run/dir"), {}, {}, {}}, store, out, &error));
        QVERIFY(!attach_options({QStringLiteral("  "), {}, {}, {}}, store, out, &error));
        QVERIFY2(error.startsWith(QStringLiteral("endpoint")), qPrintable(error));
        QVERIFY(!attach_options({QStringLiteral("tcp://node7"), {}, {}, {}}, store, out, &error));  // no port
        // off loopback: CURVE keys or nothing
        QVERIFY(!attach_options({QStringLiteral("tcp://node7:5555"), {}, {}, {}}, store, out, &error));
        QVERIFY2(error.contains(QStringLiteral("client key")) && error.contains(QStringLiteral("CURVE")),
                 qPrintable(error));
        if (!ipc::curve_available()) MWB_SKIP("libzmq without CURVE");
        const auto base = to_path(tmp_.path());
        const auto me = ipc::write_key_files(base / "alice", ipc::generate_key_pair());
        const ipc::KeyPair run = ipc::generate_key_pair();
        const auto run_files = ipc::write_key_files(base / "run", run);
        QVERIFY(
            !attach_options({QStringLiteral("tcp://node7:5555"), to_qstring(me.second), {}, {}}, store, out, &error));
        QVERIFY2(error.startsWith(QStringLiteral("server key")), qPrintable(error));
        QVERIFY2(
            attach_options({QStringLiteral("tcp://node7:5555"), to_qstring(me.second), to_qstring(run_files.first), {}},
                           store, out, &error),
            qPrintable(error));
        QVERIFY(out.curve);
        QCOMPARE(out.curve->server_public_key, run.public_key);
        QVERIFY(!out.curve->client.secret_key.empty());
        // a public key file where the key pair belongs is refused, naming the file
        QVERIFY(
            !attach_options({QStringLiteral("tcp://node7:5555"), to_qstring(me.first), to_qstring(run_files.first), {}},
                            store, out, &error));
        QVERIFY2(error.contains(QStringLiteral("alice.key")), qPrintable(error));
    }

    void attachPanelEmits() {
        AttachPanel panel;
        QSignalSpy spy(&panel, &AttachPanel::attachRequested);
        panel.setInputs({QStringLiteral("tcp://10.1.2.3:5555"), {}, {}, {}});
        QVERIFY(!panel.requestAttach());
        QCOMPARE(spy.count(), 0);
        QVERIFY(panel.problem().contains(QStringLiteral("CURVE")));
        panel.setInputs({QStringLiteral("tcp://localhost:5555"), {}, {}, {}});
        QVERIFY(panel.requestAttach());
        QCOMPARE(spy.count(), 1);
        QCOMPARE(spy.at(0).at(0).value<AttachOptions>().endpoint, std::string("tcp://localhost:5555"));
    }

    void predictionPerRank() {
        Config c = planner::load_preset("gpt3-13b");
        c.parallel.tensor_model_parallel_size = 2;
        c.parallel.pipeline_model_parallel_size = 2;
        const auto cluster =
            planner::make_cluster(planner::find_device(planner::device_catalogue(), "A100-80GB"), 8, 1);
        const planner::Plan p = planner::plan(c, cluster);
        QVERIFY(p.estimated);
        QCOMPARE(p.memory.size(), std::size_t(2));
        const std::vector<double> peaks = predicted_peak_per_rank(p);
        QCOMPARE(peaks.size(), std::size_t(8));  // TP 2 × DP 2 × PP 2
        // rank = tp + TP·(dp + DP·pp): ranks 0..3 are stage 0, 4..7 stage 1
        for (std::size_t r = 0; r < 8; ++r) QCOMPARE(peaks[r], static_cast<double>(p.memory[r / 4].peak_total));
        QCOMPARE(predicted_capacity(p), static_cast<double>(cluster.device.memory_bytes));
        QVERIFY(predicted_peak_per_rank(planner::Plan{}).empty());
    }

    void localRunThroughTheLaunchView() {
        LaunchView view;
        const Config c = tiny_config();
        view.setDesign(c, cpu_cluster(1), planner::plan(c, cpu_cluster(1)));
        QSignalSpy started(&view, &LaunchView::runStarted);
        QSignalSpy ended(&view, &LaunchView::runEnded);
        QString error;
        QVERIFY2(view.startLocal(&error), qPrintable(error));
        QCOMPARE(started.count(), 1);
        const QString dir = started.at(0).at(0).toString();
        QCOMPARE(started.at(0).at(1).toInt(), 1);
        QVERIFY2(dir.startsWith(to_qstring(runs_root())), qPrintable(dir));
        QVERIFY(same_config(load_config_file(to_path(dir + QStringLiteral("/config.json"))), c));
        QVERIFY(ended.wait(60000));
        QCOMPARE(ended.at(0).at(0).toInt(), 0);
        QCOMPARE(ended.at(0).at(1).toBool(), false);
        QCOMPARE(ended.at(0).at(2).toString(), QStringLiteral("finished"));
        QVERIFY2(view.status().contains(QStringLiteral("finished")), qPrintable(view.status()));
        QVERIFY(!view.running());
        // the run says so itself, and the console shows the command and the trainer's output
        const auto end = run_end(dir);
        QCOMPARE(QString::fromStdString(end.value("status", "")), QStringLiteral("finished"));
        QCOMPARE(end.value("iteration", -1), 6);
        QVERIFY(view.console().startsWith(QStringLiteral("$ ")));
        const double peak = device_peak_tflops(cpu_cluster(1).device, c);
        QVERIFY(peak > 0);
        QVERIFY(view.localRun()->launch().arguments.contains(QStringLiteral("--peak-tflops-per-device")));
        {
            std::ifstream in((dir + QStringLiteral("/metrics.jsonl")).toStdString());
            bool mfu = false;
            for (std::string line; std::getline(in, line);) {
                const auto j = nlohmann::json::parse(line, nullptr, false);
                if (j.value("topic", "") == "step" && j.contains("mfu") && j["mfu"].is_number()) {
                    QCOMPARE(j["mfu"].get<double>(), j["tflops_per_device"].get<double>() / peak);
                    mfu = true;
                }
            }
            QVERIFY2(mfu, "no step record with mfu");
        }
        QVERIFY2(view.console().contains(QStringLiteral("iter      6/6")), qPrintable(view.console()));
    }

    void twoRanksUnderMpirun() {
        if (find_mpirun().isEmpty()) MWB_SKIP("Open MPI is not installed");
        LaunchView view;
        const Config c = tiny_config();
        const auto cluster = cpu_cluster(2);  // DP 2
        view.setDesign(c, cluster, planner::plan(c, cluster));
        QSignalSpy started(&view, &LaunchView::runStarted);
        QSignalSpy ended(&view, &LaunchView::runEnded);
        QString error;
        QVERIFY2(view.startLocal(&error), qPrintable(error));
        QCOMPARE(started.at(0).at(1).toInt(), 2);
        QVERIFY(view.localRun()->launch().program.endsWith(QStringLiteral("mpirun")));
        QVERIFY(view.localRun()->launch().arguments.contains(QStringLiteral("-np")));
        QVERIFY(ended.wait(120000));
        QVERIFY2(ended.at(0).at(0).toInt() == 0, qPrintable(view.console()));
        const auto run =
            nlohmann::json::parse(std::ifstream((started.at(0).at(0).toString() + "/run.json").toStdString()));
        QCOMPARE(run.at("topology").at("world_size").get<int>(), 2);
        QCOMPARE(run.at("topology").at("data_parallel_size").get<int>(), 2);
        QCOMPARE(QString::fromStdString(run_end(started.at(0).at(0).toString()).value("status", "")),
                 QStringLiteral("finished"));
    }

    void stopEndsTheRun() {
        LaunchView view;
        Config c = tiny_config();
        c.training.train_iters = 1000000;  // runs until stopped
        view.setDesign(c, cpu_cluster(1), planner::plan(c, cpu_cluster(1)));
        QSignalSpy ended(&view, &LaunchView::runEnded);
        QString error;
        QVERIFY2(view.startLocal(&error), qPrintable(error));
        QTRY_VERIFY_WITH_TIMEOUT(view.console().contains(QStringLiteral("iter ")), 30000);
        view.stop();
        QVERIFY(ended.wait(30000));
        const int code = ended.at(0).at(0).toInt();
        QVERIFY2(code == 130 || code == 3, qPrintable(QString::number(code)));  // checkpointed and exited
        QVERIFY(!view.running());
    }

    void designWithProblemsDoesNotStart() {
        LaunchView view;
        Config c = tiny_config();
        c.parallel.tensor_model_parallel_size = 3;  // 2 heads
        view.setDesign(c, cpu_cluster(3), planner::plan(c, cpu_cluster(3)));
        QString error;
        QVERIFY(!view.startLocal(&error));
        QVERIFY2(error.contains(QStringLiteral("tensor_model_parallel_size")) ||
                     error.contains(QStringLiteral("num_attention_heads")),
                 qPrintable(error));
        // a cluster-sized design is a Slurm job, not a local run
        const Config big = planner::load_preset("gpt3-175b");
        const auto cluster =
            planner::make_cluster(planner::find_device(planner::device_catalogue(), "A100-80GB"), 8, 128);
        view.setDesign(big, cluster, planner::plan(big, cluster));
        QVERIFY(!view.startLocal(&error));
        QVERIFY2(error.contains(QStringLiteral("1024 ranks")), qPrintable(error));
        QVERIFY(view.slurmScript().contains(QStringLiteral("#SBATCH --nodes=128")));
        // MFU against the A100's bf16 peak, as the planner predicts it
        QCOMPARE(device_peak_tflops(cluster.device, big), cluster.device.peak_flops_16bit / 1e12);
        QVERIFY(view.slurmScript().contains(
            QStringLiteral("--peak-tflops-per-device %1").arg(cluster.device.peak_flops_16bit / 1e12, 0, 'g', 6)));
    }

private:
    QTemporaryDir tmp_;
};

MWB_TEST_SUITE_WIDGETS(test_launch, TestLaunch)
}  // namespace test_launch
#include "test_launch.moc"
