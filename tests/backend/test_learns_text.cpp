// It learns real text: mwb-train trains a small GPT (4 layers, hidden 128, seq 128, byte-level) on the
// bundled corpus and must reach a validation loss at or below what the same model, initial weights,
// token order and schedule reach in PyTorch (tests/fixtures/learns_text_kjv.json, made by
// tests/reference/make_learns_text_reference.py from this run's iteration-1 checkpoint and its
// GPTDataset index files), and follow PyTorch's training curve on the way.
#include "support/fixtures.h"
#include "support/skip.h"
#include "support/suite.h"
#include "support/trainer_process.h"

#include <QtTest>

#include <cmath>
#include <fstream>

namespace test_backend_learns_text {

using namespace mwb::test;

namespace {

std::vector<double> column(const nlohmann::json& run, const char* key) {
    return run.at(key).get<std::vector<double>>();
}

}  // namespace

class TestLearnsText : public QObject {
    Q_OBJECT
private slots:
    void reaches_pytorchs_validation_loss() {
        if (!QFile::exists("/usr/bin/bible") && !QFile::exists("/usr/games/bible"))
            MWB_SKIP("the bundled corpus needs Debian's bible-kjv and bible-kjv-text (scripts/setup.sh installs them)");
        const std::filesystem::path config_file = source_dir() / "tests" / "fixtures" / "learns_text_config.json";
        std::ifstream config_in(config_file);
        const auto config = nlohmann::json::parse(config_in);
        const auto fixture = load_fixture("learns_text_kjv.json");
        QVERIFY2(fixture.at("config") == config,
                 "tests/fixtures/learns_text_config.json changed: regenerate learns_text_kjv.json "
                 "(tests/reference/make_learns_text_reference.py)");
        const auto& ref = fixture.at("reference");  // float64
        const auto& f32 = fixture.at("float32");    // the same in float32: what rounding alone does

        TempDir tmp;
        QProcess p;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert("XDG_DATA_HOME", qpath(tmp / "xdg"));  // the bundled corpus prepared here, not in $HOME
        p.setProcessEnvironment(env);
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.setStandardOutputFile(qpath(tmp / "output.log"));
        p.start(trainer_exe(), {"--config", qpath(config_file), "--run-dir", qpath(tmp / "run"), "--data-cache-path",
                                qpath(tmp / "cache")});
        QVERIFY(p.waitForStarted());
        const bool finished = p.waitForFinished(280000);
        if (!finished) p.kill();
        std::ifstream log_in(tmp / "output.log");
        const std::string log((std::istreambuf_iterator<char>(log_in)), {});
        QVERIFY2(finished && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0, log.c_str());

        const auto steps = topic_records(tmp / "run" / "metrics.jsonl", "step");
        const auto evals = topic_records(tmp / "run" / "metrics.jsonl", "eval");
        const auto want = column(ref, "train_loss"), want_f32 = column(f32, "train_loss");
        const auto norms = column(ref, "grad_norm");
        QCOMPARE(steps.size(), want.size());
        QCOMPARE(evals.size(), std::size_t{1});
        std::vector<double> got;
        for (const auto& s : steps) got.push_back(s.at("lm_loss"));

        // Iteration 1 is one forward and backward of the same weights and tokens (its learning rate is 0):
        // float32 against float64, so the loss is PyTorch's to about 1e-7 relative and the gradient norm to
        // about 1e-6 (PyTorch's own float32 run: 7e-9 and 3e-7; mwb: 2e-10 and 5e-8). A different init, a
        // shifted sample or another shuffle moves the loss by 1e-3 relative or more (one sample later: 1.5e-3).
        QVERIFY2(
            std::abs(got[0] / want[0] - 1) < 1e-6,
            qPrintable(QString("iteration 1: loss %1, PyTorch %2").arg(got[0], 0, 'g', 9).arg(want[0], 0, 'g', 9)));
        const double norm0 = steps[0].at("grad_norm");
        QVERIFY2(std::abs(norm0 / norms[0] - 1) < 1e-5,
                 qPrintable(
                     QString("iteration 1: grad norm %1, PyTorch %2").arg(norm0, 0, 'g', 9).arg(norms[0], 0, 'g', 9)));
        QCOMPARE(double(steps[0].at("lr")), 0.0);

        // The curve: every iteration's loss is PyTorch's float64 one within max(5 x drift, 1e-4), drift the
        // largest |float32 - float64| of PyTorch's two runs so far. Training amplifies rounding differences
        // (PyTorch's float32 run is 4e-7 from float64 at iteration 10, 3.6e-4 after the loss spike at
        // iteration 23 that both runs and mwb go through), and any float32 implementation drifts by about
        // as much; mwb stays within 7.4e-5 of float64 throughout. A training difference does not: no
        // weight decay leaves the bound at iteration 6, a warm-up one iteration shorter at iteration 3,
        // clipping at 0.9 instead of 1.0 at iteration 14 (each tried once; every one of them ends with a
        // validation loss 0.01-0.02 *lower* than PyTorch's, which is why the curve is checked, not only
        // the verdict below).
        double drift = 0;  // the largest |float32 - float64| of PyTorch's runs so far
        for (std::size_t i = 0; i < got.size(); ++i) {
            drift = std::max(drift, std::abs(want_f32[i] - want[i]));
            const double bound = std::max(5 * drift, 1e-4);
            QVERIFY2(std::abs(got[i] - want[i]) <= bound,
                     qPrintable(QString("iteration %1: loss %2, PyTorch %3 (bound %4)")
                                    .arg(i + 1)
                                    .arg(got[i], 0, 'f', 6)
                                    .arg(want[i], 0, 'f', 6)
                                    .arg(bound, 0, 'g', 3)));
        }

        // The verdict: it learned (far below a uniform guess, ln 257 = 5.55 nats per byte) at least as well
        // as PyTorch: at or below PyTorch's float64 validation loss plus 5 times what rounding alone moves
        // it (PyTorch's float32 run ends 1.4e-5 from float64), at least 1e-4 nats.
        const double valid = evals[0].at("lm_loss"), want_valid = ref.at("valid_loss");
        const double tolerance = std::max(5 * std::abs(double(f32.at("valid_loss")) - want_valid), 1e-4);
        qInfo("validation loss %.6f, PyTorch float64 %.6f (float32 %.6f), tolerance %.1e", valid, want_valid,
              double(f32.at("valid_loss")), tolerance);
        QCOMPARE(int(evals[0].at("iteration")), int(want.size()));
        QVERIFY2(valid <= want_valid + tolerance, qPrintable(QString("validation loss %1, PyTorch %2 + %3")
                                                                 .arg(valid, 0, 'f', 6)
                                                                 .arg(want_valid, 0, 'f', 6)
                                                                 .arg(tolerance)));
        QVERIFY(want_valid < 0.5 * std::log(257.0));
    }
};

MWB_TEST_SUITE_APPLESS(test_backend_learns_text, TestLearnsText)
}  // namespace test_backend_learns_text
#include "test_learns_text.moc"
