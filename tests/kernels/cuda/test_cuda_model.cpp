// The whole GPT (GptModel + AdamW Optimizer) on the GPU against the same model on the CPU: a few
// training iterations in fp32 with dropout (the same Philox masks on both devices) give the same
// losses and gradient norms within fp32 tolerance, and the GPU in deterministic mode repeats its
// losses and weights bit for bit. Then the train loop itself (what `mwb-train --device cuda` runs):
// its step records match the CPU run's, and a GPU checkpoint resumes bit-identically. Generation's
// decoder on the GPU gives the CPU decoder's tokens and logits, and fp16 steps with the f16 gradient
// arena the CPU's (cuda_model_check.h). Exits 77
// without a GPU.
#include "backend/config/validate.h"
#include "backend/data/mock_data.h"
#include "backend/model/gpt_model.h"
#include "backend/optim/optimizer.h"
#include "backend/telemetry/run_dir.h"
#include "backend/train/trainer.h"

#include "cuda_model_check.h"
#include "cuda_op_checks.h"
#include "mwb/kernels/device_runtime.h"

#include <QtTest>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <random>

using namespace mwb;

namespace {

Config loop_config(const std::string& device, int64_t iters, bool bf16 = false, const std::string& attention = "own") {
    Config c;
    c.model.num_layers = 2;
    c.model.hidden_size = 64;
    c.model.num_attention_heads = 4;  // head dim 16
    c.model.seq_length = 32;
    c.model.make_vocab_size_divisible_by = 64;
    c.model.vocab_size = 128;
    c.data.tokenizer_type = "NullTokenizer";
    c.data.mock_data = true;
    c.data.eval_interval = 2;
    c.data.eval_iters = 1;
    c.training.micro_batch_size = 2;
    c.training.global_batch_size = 4;
    c.training.train_iters = iters;
    c.training.lr = 1e-3;
    c.logging.log_interval = 1;
    c.runtime.device = device;
    c.training.bf16 = bf16;
    // The own kernels draw the CPU's attention dropout masks; cuDNN its own (its test runs without).
    c.runtime.attention_backend = attention;
    if (attention == "cudnn") c.model.attention_dropout = 0;
    resolve(c, 1, 128);
    check_config(c, 1);
    return c;
}

/// Runs the train loop into `dir`; returns the lm_loss of every step record.
std::vector<double> run_loop(Config c, const std::filesystem::path& dir, nlohmann::json* last_memory = nullptr) {
    TrainerInputs in;
    in.config = c;
    const int64_t vocab = model_vocab_size(c);
    in.train = std::make_unique<data::MockSampleSource>(c.model.seq_length, vocab, c.training.seed, 0);
    in.valid = std::make_unique<data::MockSampleSource>(c.model.seq_length, vocab, c.training.seed, 1);
    in.data_description = "mock";
    in.print_progress = false;
    RunDir rd(dir, "test");
    if (train(std::move(in), &rd) != RunStatus::Finished) return {};
    std::vector<double> losses;
    std::ifstream f(dir / "metrics.jsonl");
    std::string line;
    while (std::getline(f, line)) {
        const auto j = nlohmann::json::parse(line);
        if (j["topic"] == "step") losses.push_back(j["lm_loss"].get<double>());
        if (j["topic"] == "memory" && last_memory) *last_memory = j;
    }
    return losses;
}

}  // namespace

class TestCudaModel : public QObject {
    Q_OBJECT
private slots:
    void gpu_training_matches_cpu_loss() {
        const test::SmallGptRun cpu = test::train_small_gpt(Device::CPU, 4), gpu = test::train_small_gpt(Device::CUDA, 4);
        for (std::size_t i = 0; i < cpu.losses.size(); ++i) {
            QVERIFY2(std::abs(gpu.losses[i] - cpu.losses[i]) <= 1e-4 * std::abs(cpu.losses[i]),
                     qPrintable(QStringLiteral("iteration %1: loss %2 on the GPU, %3 on the CPU")
                                    .arg(i + 1).arg(gpu.losses[i], 0, 'g', 9).arg(cpu.losses[i], 0, 'g', 9)));
            QVERIFY2(std::abs(gpu.grad_norms[i] - cpu.grad_norms[i]) <= 1e-3 * cpu.grad_norms[i],
                     qPrintable(QStringLiteral("iteration %1: grad norm %2 on the GPU, %3 on the CPU")
                                    .arg(i + 1).arg(gpu.grad_norms[i]).arg(cpu.grad_norms[i])));
        }
        // Weights are not compared element by element: the key bias's gradient is zero in exact
        // arithmetic (softmax ignores a constant per row), so both devices hold rounding noise there,
        // and Adam's first steps move such elements by ±lr whatever the noise's size. The loss is
        // invariant to them.
    }

    void train_loop_on_the_gpu_matches_the_cpu_and_resumes() {
        QTemporaryDir tmp;
        const std::filesystem::path root = tmp.path().toStdString();
        const auto cpu = run_loop(loop_config("cpu", 4), root / "cpu");
        Config whole = loop_config("cuda", 4);
        whole.checkpoint.save = (root / "ckpt").string();
        whole.checkpoint.save_interval = 2;
        nlohmann::json memory;
        const auto gpu = run_loop(whole, root / "gpu", &memory);
        // Device memory through the caching allocator, per category, plus the device's own totals.
        QVERIFY(memory["ranks"][0]["by_category"]["weights"]["current"].get<int64_t>() > 0);
        QVERIFY(memory["ranks"][0]["device_total"].get<int64_t>() > 0);
        QCOMPARE(gpu.size(), std::size_t{4});
        QCOMPARE(cpu.size(), gpu.size());
        for (std::size_t i = 0; i < cpu.size(); ++i)
            QVERIFY2(std::abs(gpu[i] - cpu[i]) <= 1e-4 * std::abs(cpu[i]),
                     qPrintable(QStringLiteral("step %1: %2 on the GPU, %3 on the CPU").arg(i + 1).arg(gpu[i]).arg(cpu[i])));
        // Resume the GPU run from its iteration-2 checkpoint: the same bits as the straight run.
        Config part = loop_config("cuda", 4);
        part.checkpoint.load = (root / "ckpt" / "iter_0000002").string();
        const auto resumed = run_loop(part, root / "gpu-resumed");
        QCOMPARE(resumed.size(), std::size_t{2});
        QCOMPARE(resumed[0], gpu[2]);
        QCOMPARE(resumed[1], gpu[3]);
    }

    void bf16_train_loop_on_the_gpu_follows_the_cpu() {
        // bf16 on the GPU runs its GEMMs on bf16 tensor cores (dropout-scaled gradients rounded to
        // bf16), the CPU emulation keeps them in fp32: the same training within bf16 tolerance.
        QTemporaryDir tmp;
        const std::filesystem::path root = tmp.path().toStdString();
        const auto cpu = run_loop(loop_config("cpu", 4, true), root / "cpu");
        const auto gpu = run_loop(loop_config("cuda", 4, true), root / "gpu");
        QCOMPARE(gpu.size(), std::size_t{4});
        for (std::size_t i = 0; i < cpu.size(); ++i)
            QVERIFY2(std::abs(gpu[i] - cpu[i]) <= 1e-2 * std::abs(cpu[i]),
                     qPrintable(QStringLiteral("step %1: %2 on the GPU, %3 on the CPU").arg(i + 1).arg(gpu[i]).arg(cpu[i])));
    }

    void bf16_train_loop_with_cudnn_attention_follows_the_cpu() {
        // attention_backend cudnn (attention dropout off: cuDNN's masks are its own): the GPU's losses
        // within bf16 tolerance of the CPU's, as with the own kernels.
        const AttentionBackendChoice c = resolve_attention_backend("cudnn", false, true);
        if (c.backend != AttentionBackend::Cudnn) QSKIP(qPrintable(QString::fromStdString("cuDNN does not run here: " + c.reason)));
        QTemporaryDir tmp;
        const std::filesystem::path root = tmp.path().toStdString();
        const auto cpu = run_loop(loop_config("cpu", 4, true, "cudnn"), root / "cpu");
        const auto gpu = run_loop(loop_config("cuda", 4, true, "cudnn"), root / "gpu");
        QCOMPARE(gpu.size(), std::size_t{4});
        for (std::size_t i = 0; i < cpu.size(); ++i)
            QVERIFY2(std::abs(gpu[i] - cpu[i]) <= 1e-2 * std::abs(cpu[i]),
                     qPrintable(QStringLiteral("step %1: %2 on the GPU, %3 on the CPU").arg(i + 1).arg(gpu[i]).arg(cpu[i])));
        QVERIFY2(cudnn_attention_refusals().empty(), cudnn_attention_refusals().c_str());
    }

    void deterministic_mode_repeats_bit_for_bit() {
        device::set_deterministic(true);
        const test::SmallGptRun a = test::train_small_gpt(Device::CUDA, 3), b = test::train_small_gpt(Device::CUDA, 3);
        device::set_deterministic(false);
        QCOMPARE(a.losses, b.losses);
        QVERIFY(a.weights == b.weights);
    }

    void fp16_steps_with_f16_gradients_match_the_cpu() {
        const auto r = mwb::test::check_model_fp16_gradients();
        QVERIFY2(r.passed, qPrintable(QString::fromStdString(r.detail) + QString(" error %1").arg(r.error)));
    }

    void generation_on_the_gpu_matches_the_cpu() {
        const auto r = mwb::test::check_generation_against_cpu();
        QVERIFY2(r.passed, qPrintable(QString::fromStdString(r.detail) + QString(" error %1").arg(r.error)));
    }
};

int main(int argc, char** argv) {
    const std::string reason = mwb::test::cuda_unavailable_reason();
    if (!reason.empty()) {
        std::printf("no CUDA device: %s\n", reason.c_str());
        return 77;
    }
    QCoreApplication app(argc, argv);
    TestCudaModel t;
    return QTest::qExec(&t, argc, argv);
}

#include "test_cuda_model.moc"
