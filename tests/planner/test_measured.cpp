// The planner against what mwb-train measures: for small models on the CPU backend, every memory
// category's current and peak bytes, the total peak (mem_peak_bytes), the parameter count and the
// FLOPs per iteration must equal what mwb-train writes into metrics.jsonl, run.end and run.json —
// exactly, for each recompute mode, fp32/bf16/fp16, micro/global batch, untied embeddings, RMSNorm.
#include "measured.h"
#include "support/fixtures.h"
#include "support/suite.h"

#include "backend/config/config_io.h"
#include "mwb/planner/plan.h"
#include "mwb/planner/report.h"

#include <QProcess>
#include <QtTest>

#include <fstream>

namespace test_planner_measured {

using namespace mwb;
using namespace mwb::planner;

namespace {

/// The flags of one run: a 3-layer model with random tokens, 2 iterations, no evaluation, 2 threads.
QStringList base_flags() {
    return {"--mock-data",
            "--tokenizer-type",
            "NullTokenizer",
            "--vocab-size",
            "100",
            "--num-layers",
            "3",
            "--hidden-size",
            "32",
            "--num-attention-heads",
            "4",
            "--seq-length",
            "16",
            "--micro-batch-size",
            "2",
            "--global-batch-size",
            "4",
            "--lr",
            "1e-3",
            "--lr-warmup-iters",
            "0",
            "--train-iters",
            "2",
            "--log-interval",
            "1",
            "--eval-interval",
            "0",
            "--threads",
            "2",
            "--device",
            "cpu"};
}

nlohmann::json last_line(const std::filesystem::path& file, const char* topic) {
    std::ifstream in(file);
    std::string line;
    nlohmann::json last;
    while (std::getline(in, line)) {
        auto j = nlohmann::json::parse(line);
        if (j["topic"] == topic) last = j;
    }
    return last;
}

}  // namespace

class TestPlannerMeasured : public QObject {
    Q_OBJECT
private slots:
    void memory_flops_and_parameters_equal_mwb_train_data() {
        QTest::addColumn<QStringList>("flags");
        QTest::newRow("fp32 no recompute") << QStringList{};
        QTest::newRow("selective") << QStringList{"--recompute-granularity", "selective"};
        QTest::newRow("full uniform 1") << QStringList{
            "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"};
        QTest::newRow("full uniform 2") << QStringList{
            "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "2"};
        QTest::newRow("full block 2") << QStringList{"--recompute-granularity", "full", "--recompute-method", "block",
                                                     "--recompute-num-layers",  "2"};
        QTest::newRow("bf16") << QStringList{"--bf16"};
        QTest::newRow("fp16 full block 1") << QStringList{
            "--fp16", "--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "1"};
        QTest::newRow("untied RMSNorm") << QStringList{"--untie-embeddings-and-output-weights", "--normalization",
                                                       "RMSNorm"};
        // 16-bit activations (residual stream, norm outputs, their gradients) next to fp32 probabilities,
        // logits and partial sums: every category byte for byte.
        QTest::newRow("bf16 dropout untied RMSNorm")
            << QStringList{"--bf16", "--hidden-dropout", "0.1", "--attention-dropout", "0.1",
                           "--untie-embeddings-and-output-weights", "--normalization", "RMSNorm"};
        QTest::newRow("fp16 selective") << QStringList{"--fp16", "--recompute-granularity", "selective"};
        QTest::newRow("bf16 logits in chunks of 7 rows") << QStringList{"--bf16", "--logits-chunk-bytes", "3584"};
        // fp16 with its main grads accumulated in fp32 (the rows above without the flag have an f16 arena).
        QTest::newRow("fp16 grads accumulated in fp32")
            << QStringList{"--fp16", "--accumulate-allreduce-grads-in-fp32"};
        QTest::newRow("micro 1 global 3") << QStringList{"--micro-batch-size", "1", "--global-batch-size", "3"};
        QTest::newRow("micro 3 global 6 bf16 selective") << QStringList{
            "--micro-batch-size", "3", "--global-batch-size", "6", "--bf16", "--recompute-granularity", "selective"};
        // Long sequence, small width: the attention probabilities (as²b) dominate the activations.
        QTest::newRow("s128 a8 none") << QStringList{"--seq-length",          "128", "--hidden-size", "16",
                                                     "--num-attention-heads", "8"};
        QTest::newRow("s128 a8 selective")
            << QStringList{"--seq-length",          "128", "--hidden-size",           "16",
                           "--num-attention-heads", "8",   "--recompute-granularity", "selective"};
        QTest::newRow("s128 a8 full uniform 3")
            << QStringList{"--seq-length",          "128",     "--hidden-size",           "16",
                           "--num-attention-heads", "8",       "--recompute-granularity", "full",
                           "--recompute-method",    "uniform", "--recompute-num-layers",  "3"};
        QTest::newRow("1 thread") << QStringList{"--threads", "1"};
        // The head's classifier over chunks of 7 rows (3584 bytes of fp32 logits over the 128 words of
        // the padded vocabulary) of the 32 rows, the last one of 4.
        QTest::newRow("logits in chunks of 7 rows") << QStringList{"--logits-chunk-bytes", "3584"};
        // Llama family: grouped-query attention (2 key/value heads of 4), SwiGLU, RoPE, RMSNorm, no
        // biases, untied output layer; and the variants that change what is stored or held.
        const QStringList llama = test::llama_flags();
        QTest::newRow("llama") << llama;
        QTest::newRow("llama selective") << llama + QStringList{"--recompute-granularity", "selective"};
        QTest::newRow("llama full uniform 1")
            << llama + QStringList{"--recompute-granularity", "full", "--recompute-method", "uniform",
                                   "--recompute-num-layers",  "1"};
        QTest::newRow("llama fp16") << llama + QStringList{"--fp16"};
        QTest::newRow("llama bf16 selective") << llama + QStringList{"--bf16", "--recompute-granularity", "selective"};
        QTest::newRow("llama bf16 full block 2")
            << llama + QStringList{"--bf16", "--recompute-granularity", "full", "--recompute-method",
                                   "block",  "--recompute-num-layers",  "2"};
        QTest::newRow("llama MQA qkv bias rope scaling half rotary") << llama + QStringList{"--num-query-groups",
                                                                                            "1",
                                                                                            "--add-qkv-bias",
                                                                                            "--use-rope-scaling",
                                                                                            "--rotary-percent",
                                                                                            "0.5",
                                                                                            "--max-position-embeddings",
                                                                                            "64"};
        QTest::newRow("llama s128 kv_channels 16") << llama + QStringList{"--seq-length", "128", "--kv-channels", "16"};
    }

    void memory_flops_and_parameters_equal_mwb_train() {
        QFETCH(QStringList, flags);
        test::TempDir dir;
        const QStringList args = base_flags() + flags;
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start(QString::fromStdString((test::binary_dir() / "backend" / "mwb-train").string()),
                args + QStringList{"--run-dir", QString::fromStdString(dir.path().string())});
        QVERIFY(p.waitForFinished(120000));
        QVERIFY2(p.exitCode() == 0, p.readAll().constData());

        Config c;  // the same flags onto Megatron-LM's defaults (the demo preset mwb-train starts from
        test::apply_flags(c, args);  // differs only in fields that change no allocation)
        DeviceSpec cpu = find_device(device_catalogue(), "cpu");
        cpu.threads = c.runtime.threads;
        const Plan plan_ = plan(c, make_cluster(cpu, 1, 1));
        QVERIFY(plan_.runnable());
        const nlohmann::json predicted = memory_json(plan_.most_loaded());

        const nlohmann::json step = last_line(dir / "metrics.jsonl", "step");
        const nlohmann::json end = last_line(dir / "events.jsonl", "run.end");
        for (const nlohmann::json& measured : {step["mem"], end["mem"]}) {
            for (const auto& [category, v] : measured["by_category"].items())
                for (const char* k : {"current", "peak"})
                    QVERIFY2(v[k] == predicted["by_category"][category][k],
                             qPrintable(QString("%1 %2: measured %3, predicted %4")
                                            .arg(category.c_str(), k)
                                            .arg(v[k].get<int64_t>())
                                            .arg(predicted["by_category"][category][k].get<int64_t>())));
            QCOMPARE(measured["peak"].get<int64_t>(), predicted["peak"].get<int64_t>());
            QCOMPARE(measured["allocated"].get<int64_t>(), predicted["allocated"].get<int64_t>());
        }
        QCOMPARE(step["mem_peak_bytes"].get<int64_t>(), plan_.most_loaded().peak_total);

        std::ifstream run_json(dir / "run.json");
        const auto run = nlohmann::json::parse(run_json);
        QCOMPARE(run["derived"]["parameters"].get<int64_t>(), plan_.parameters.total);
        QCOMPARE(run["derived"]["model_flops_per_iteration"].get<double>(), plan_.flops.model);
        QCOMPARE(run["derived"]["hardware_flops_per_iteration"].get<double>(), plan_.flops.hardware);
        QCOMPARE(run["derived"]["num_micro_batches"].get<int64_t>(), plan_.layout.micro_batches);
    }
};

MWB_TEST_SUITE_GUILESS(test_planner_measured, TestPlannerMeasured)
}  // namespace test_planner_measured
#include "test_measured.moc"
