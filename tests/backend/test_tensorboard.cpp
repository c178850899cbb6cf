// TensorBoard event files of a real mwb-train run, read back by an independent reader
// (tensorboard/read_events.py: the TFRecord framing checked with python3-crcmod's CRC-32C, the Event and
// Summary messages decoded by python3-protobuf from protoc-compiled .proto files): every scalar under
// Megatron-LM's tag must be exactly (as float32) the number the run wrote to metrics.jsonl.
// Exit 77 (skip) when /usr/bin/python3 with protobuf and crcmod, or protoc, is missing.
#include "support/fixtures.h"
#include "support/suite.h"
#include "support/trainer_process.h"

#include "backend/telemetry/tensorboard.h"

#include <QProcess>
#include <QtTest>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>

namespace test_backend_tensorboard {

namespace fs = std::filesystem;

namespace {

const QString kPython = "/usr/bin/python3";

bool reader_available() {
    QProcess p;
    p.start(kPython, {"-c", "import crcmod.predefined, google.protobuf"});
    if (!p.waitForFinished(30000) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) return false;
    QProcess protoc;
    protoc.start("protoc", {"--version"});
    return protoc.waitForFinished(30000) && protoc.exitStatus() == QProcess::NormalExit && protoc.exitCode() == 0;
}

const auto records = mwb::test::topic_records;

/// (tag, step) -> value of every scalar in the event file, as the independent reader decodes it.
struct Events {
    std::string file_version;
    std::map<std::pair<std::string, int64_t>, double> scalars;
    std::map<std::string, int> count;
};

Events read_events(const fs::path& file) {
    mwb::test::TempDir scratch;
    QProcess p;
    const fs::path protos = mwb::test::source_dir() / "tests" / "backend" / "tensorboard";
    p.start(kPython, {mwb::test::qpath(protos / "read_events.py"), mwb::test::qpath(file), mwb::test::qpath(protos),
                      mwb::test::qpath(scratch.path())});
    if (!p.waitForFinished(60000) || p.exitCode() != 0)
        throw std::runtime_error("read_events.py failed: " + p.readAllStandardError().toStdString());
    const auto j = nlohmann::json::parse(p.readAllStandardOutput().toStdString());
    Events e;
    e.file_version = j["file_version"].is_string() ? j["file_version"].get<std::string>() : "";
    for (const auto& s : j["scalars"]) {
        const auto key = std::make_pair(s[0].get<std::string>(), s[1].get<int64_t>());
        e.scalars.emplace(key, s[2].get<double>());  // the first one of a (tag, step)
        ++e.count[key.first];
    }
    return e;
}

}  // namespace

class TestTensorBoard : public QObject {
    Q_OBJECT
private slots:
    void crc32c_known_answers() {
        // RFC 3720 (iSCSI) B.4: the check value of "123456789" and 32 bytes of zeros.
        QCOMPARE(mwb::crc32c("123456789"), 0xE3069283u);
        QCOMPARE(mwb::crc32c(std::string(32, '\0')), 0x8A9136AAu);
        QCOMPARE(mwb::crc32c(std::string(32, '\xff')), 0x62A8AB43u);
    }

    void event_file_holds_the_runs_metrics() {
        mwb::test::TempDir t;
        mwb::test::Child c;
        c.start(mwb::test::trainer_exe(),
                mwb::test::tiny_run_args(t / "run", 6,
                                         {"--tensorboard-dir", mwb::test::qpath(t / "tb"), "--eval-interval", "3",
                                          "--eval-iters", "1", "--log-validation-ppl-to-tensorboard",
                                          "--log-timers-to-tensorboard", "--log-throughput",
                                          "--log-memory-to-tensorboard"}));
        QCOMPARE(c.wait(120000), 0);
        std::vector<fs::path> files;
        for (const auto& e : fs::directory_iterator(t / "tb"))
            if (e.path().filename().string().starts_with("events.out.tfevents.")) files.push_back(e.path());
        QCOMPARE(files.size(), std::size_t{1});
        const Events ev = read_events(files[0]);
        QCOMPARE(ev.file_version, std::string("brain.Event:2"));

        const auto f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
        const auto at = [&](const std::string& tag, int64_t step) {
            const auto it = ev.scalars.find({tag, step});
            if (it == ev.scalars.end()) throw std::runtime_error(tag + " missing at " + std::to_string(step));
            return it->second;
        };
        const auto steps = records(t / "run" / "metrics.jsonl", "step");
        QCOMPARE(steps.size(), std::size_t{6});
        for (const auto& s : steps) {
            const int64_t it = s["iteration"], samples = s["consumed_samples"];
            const std::pair<const char*, const char*> tags[] = {{"lm loss", "lm_loss"},
                                                                {"learning-rate", "lr"},
                                                                {"grad-norm", "grad_norm"},
                                                                {"loss-scale", "loss_scale"},
                                                                {"batch-size", "global_batch_size"}};
            for (const auto& [tag, key] : tags) {
                const double want = f32(s[key].get<double>());
                QCOMPARE(at(tag, it), want);
                QCOMPARE(at(std::string(tag) + " vs samples", samples), want);
            }
            QCOMPARE(at("iteration-time", it), f32(s["iteration_time_s"].get<double>()));
            QCOMPARE(at("throughput", it), f32(s["tflops_per_device"].get<double>()));
            QCOMPARE(at("mem-allocated-bytes", it), f32(s["mem_allocated_bytes"].get<double>()));
            QCOMPARE(at("mem-max-allocated-bytes", it), f32(s["mem_peak_bytes"].get<double>()));
        }
        for (const char* tag : {"lm loss", "learning-rate", "grad-norm", "loss-scale", "batch-size", "iteration-time"})
            QCOMPARE(ev.count.at(tag), 6);
        // Validation at 3 and 6, once more after training (at 6 too: the last value stands), and the test
        // split, which Megatron-LM writes under the same tag.
        const auto evals = records(t / "run" / "metrics.jsonl", "eval");
        QCOMPARE(evals.size(), std::size_t{4});
        QCOMPARE(evals[3]["split"], "test");
        QCOMPARE(at("lm loss validation", 3), f32(evals[0]["lm_loss"].get<double>()));
        QCOMPARE(at("lm loss validation ppl", 3), f32(std::exp(std::min(20.0, evals[0]["lm_loss"].get<double>()))));
        QCOMPARE(at("lm loss validation vs samples", evals[0]["consumed_samples"].get<int64_t>()),
                 f32(evals[0]["lm_loss"].get<double>()));
    }
};

int run_suite(int argc, char** argv) {
    QCoreApplication app(argc, argv);
    if (!reader_available()) {
        std::cerr << "skip: the independent reader needs /usr/bin/python3 with python3-protobuf and python3-crcmod, "
                     "and protoc (scripts/setup.sh installs them)\n";
        return 77;
    }
    TestTensorBoard t;
    return QTest::qExec(&t, argc, argv);
}

MWB_TEST_SUITE_MAIN(test_backend_tensorboard, run_suite)
}  // namespace test_backend_tensorboard
#include "test_tensorboard.moc"
