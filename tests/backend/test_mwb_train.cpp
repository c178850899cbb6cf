// mwb-train as a user runs it: a real process, its exit codes, its messages, its run directory.
#include "support/fixtures.h"

#include <QProcess>
#include <QtTest>

#include <csignal>
#include <fstream>
#include <thread>

namespace fs = std::filesystem;

namespace {

struct Result {
    int code = -1;
    QString out, err;
};

QString program() { return QString::fromStdString((mwb::test::binary_dir() / "backend" / "mwb-train").string()); }

Result run(const QStringList& args, int timeout_ms = 120000) {
    QProcess p;
    p.start(program(), args);
    if (!p.waitForFinished(timeout_ms)) p.kill();
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

QStringList tiny(const fs::path& run_dir) {
    return {"--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "100", "--num-layers", "1",
            "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16", "--micro-batch-size", "2",
            "--global-batch-size", "2", "--lr-warmup-iters", "0", "--log-interval", "1", "--eval-interval", "0",
            "--run-dir", QString::fromStdString(run_dir.string())};
}

int lines(const fs::path& file, const std::string& topic = "step") {
    std::ifstream in(file);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) n += line.find("\"topic\":\"" + topic + "\"") != std::string::npos;
    return n;
}

}  // namespace

class TestMwbTrain : public QObject {
    Q_OBJECT
private slots:
    void help_lists_megatron_flags() {
        const Result r = run({"--help"});
        QCOMPARE(r.code, 0);
        for (const char* flag : {"--num-layers", "--tensor-model-parallel-size", "--recompute-granularity", "--bf16",
                                 "--mock-data", "--save-interval", "--config"})
            QVERIFY2(r.out.contains(flag), flag);
    }

    void invalid_configs_stop_before_work_naming_the_field() {
        const std::pair<QStringList, QString> cases[] = {
            {{"--num-attention-heads", "5"}, "hidden_size (256) must be divisible by num_attention_heads (5)"},
            {{"--global-batch-size", "10", "--micro-batch-size", "4"}, "global_batch_size (10)"},
            {{"--bf16", "--fp16"}, "bf16 and fp16 cannot both be set"},
            {{"--recompute-granularity", "full"}, "recompute_method"},
            {{"--tensor-model-parallel-size", "2"}, "must divide the number of ranks (1)"},
            {{"--num-layers", "four"}, "--num-layers four: expected an integer"},
            {{"--lr-decay-style", "exp"}, "expected one of constant, linear, cosine"},
            {{"--config", "/nonexistent/run.json"}, "cannot read '/nonexistent/run.json'"},
            {{"--tokenizer-type", "GPT2BPETokenizer"}, "GPT2BPETokenizer needs vocab_file"},
            {{"--data-path", "/nonexistent/corpus"}, "'/nonexistent/corpus.idx' does not exist"},
        };
        for (const auto& [args, expected] : cases) {
            mwb::test::TempDir t;
            const Result r = run(args + QStringList{"--run-dir", QString::fromStdString(t.path().string())});
            QVERIFY2(r.code == 2, qPrintable(args.join(' ') + " -> exit " + QString::number(r.code) + ": " + r.err));
            QVERIFY2(r.err.contains(expected), qPrintable(args.join(' ') + ": " + r.err));
            QVERIFY2(!fs::exists(t / "metrics.jsonl"), "an invalid run must not start");
        }
    }

    void unknown_config_key_names_file_and_key() {
        mwb::test::TempDir t;
        std::ofstream(t / "cfg.json") << R"({"num_layers": 2, "hidden_sise": 64})";
        const Result r = run({"--config", QString::fromStdString((t / "cfg.json").string())});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("unknown key \"hidden_sise\"") && r.err.contains("cfg.json") &&
                     r.err.contains("did you mean \"hidden_size\""),
                 qPrintable(r.err));
    }

    void print_config_resolves_the_embedded_demo() {
        const Result r = run({"--print-config", "--train-iters", "70"});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        const auto j = nlohmann::json::parse(r.out.toStdString());
        QCOMPARE(j["train_iters"], 70);
        QCOMPARE(j["ffn_hidden_size"], 4 * j["hidden_size"].get<int>());
        QCOMPARE(j["tokenizer_type"], "ByteTokenizer");
    }

    void trains_and_writes_the_run_directory() {
        mwb::test::TempDir t;
        const Result r = run(tiny(t.path()) + QStringList{"--train-iters", "3"});
        QVERIFY2(r.code == 0, qPrintable(r.err + r.out));
        QVERIFY2(r.out.contains("iter      3/3") && r.out.contains("tok/s") && r.out.contains("ETA"), qPrintable(r.out));
        QVERIFY(r.out.contains(QString::fromStdString(t.path().string())));
        QCOMPARE(lines(t / "metrics.jsonl"), 3);
        QVERIFY(fs::exists(t / "run.json"));
    }

    void without_a_gpu_auto_trains_on_the_cpu_and_cuda_is_refused() {
        mwb::test::TempDir t;
        const Result a = run(tiny(t / "auto") + QStringList{"--train-iters", "1", "--device", "auto"});
        if ((a.out + a.err).contains("device auto: using the GPU")) QSKIP("this machine has a usable GPU");
        QVERIFY2(a.code == 0, qPrintable(a.err + a.out));
        QCOMPARE((a.out + a.err).count("device auto: using the CPU ("), 1);  // says why, once
        const Result c = run(tiny(t / "cuda") + QStringList{"--train-iters", "1", "--device", "cuda"});
        QCOMPARE(c.code, 2);  // a configuration error: nothing started
        QVERIFY2(c.err.contains("--device") && c.err.contains("device cuda: "), qPrintable(c.err));
        QVERIFY(!fs::exists(t / "cuda" / "metrics.jsonl"));
    }

    void sigterm_checkpoints_and_exits_130() {
        mwb::test::TempDir t;
        QProcess p;
        p.start(program(), tiny(t / "run") + QStringList{"--train-iters", "100000", "--save",
                                                        QString::fromStdString((t / "ckpt").string())});
        QVERIFY(p.waitForStarted());
        for (int i = 0; i < 600 && lines(t / "run" / "metrics.jsonl") < 1; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        QVERIFY(lines(t / "run" / "metrics.jsonl") >= 1);
        ::kill(static_cast<pid_t>(p.processId()), SIGTERM);
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 130);
        QVERIFY(fs::exists(t / "ckpt" / "latest"));
        std::ifstream events(t / "run" / "events.jsonl");
        std::string line, last;
        while (std::getline(events, line)) last = line;
        QVERIFY2(last.find("\"status\":\"interrupted\"") != std::string::npos, last.c_str());
    }
};

QTEST_GUILESS_MAIN(TestMwbTrain)
#include "test_mwb_train.moc"
