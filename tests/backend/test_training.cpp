// The train loop end to end on mock data: reproducibility (same seed -> same bits, any thread count),
// checkpoints (resume continues bit-identically; corrupt, truncated or mismatched ones are refused
// with the file named), interruption, and the run directory's records.
#include "support/child_process.h"
#include "support/fixtures.h"
#include "support/jsonl.h"
#include "support/suite.h"

#include "backend/checkpoint/checkpoint.h"
#include "backend/config/validate.h"
#include "backend/data/mock_data.h"
#include "backend/optim/lr_schedule.h"
#include "mwb/kernels/ops.h"
#include "backend/telemetry/run_dir.h"
#include "backend/train/trainer.h"

#include <QtTest>

#include <sys/resource.h>

#include <csignal>
#include <fstream>
#include <functional>

namespace test_backend_training {

using namespace mwb;
using test::jsonl_records;
namespace fs = std::filesystem;

namespace {

Config tiny_config() {
    Config c;
    c.model.num_layers = 2;
    c.model.hidden_size = 32;
    c.model.num_attention_heads = 4;
    c.model.seq_length = 16;
    c.model.make_vocab_size_divisible_by = 64;
    c.model.vocab_size = 64;  // EOD is id 63
    c.data.tokenizer_type = "NullTokenizer";
    c.data.mock_data = true;
    c.data.eval_interval = 3;
    c.data.eval_iters = 1;
    c.training.micro_batch_size = 2;
    c.training.global_batch_size = 4;
    c.training.train_iters = 6;
    c.training.lr = 1e-3;
    c.training.lr_warmup_iters = 2;
    c.logging.log_interval = 1;
    resolve(c, 1, 64);
    check_config(c, 1);
    return c;
}

/// Releases scripted requests at iteration boundaries: request k is returned by the first poll after
/// `boundary` empty polls (one empty poll per boundary while running, one per wait while paused).
class ScriptedControl final : public ControlSource {
public:
    void add(int boundary, ControlAction action) { script_.push_back({boundary, ControlRequest{action, std::to_string(script_.size())}}); }
    std::optional<ControlRequest> poll() override {
        for (auto& [when, req] : script_)
            if (when == empty_polls_ && !req.id.empty()) {
                ControlRequest r = req;
                req.id.clear();
                return r;
            }
        ++empty_polls_;
        return std::nullopt;
    }
    void reply(const ControlRequest& r, const nlohmann::json& result) override { replies.push_back({r.id, result}); }
    std::vector<std::pair<std::string, nlohmann::json>> replies;

private:
    std::vector<std::pair<int, ControlRequest>> script_;
    int empty_polls_ = 0;
};

/// Samples of consecutive ids from a per-sample start (k, k+1, ... mod the vocabulary): learnable data.
class ConsecutiveIds final : public data::SampleSource {
public:
    explicit ConsecutiveIds(const Config& c) : tokens_(c.model.seq_length + 1), vocab_(model_vocab_size(c)) {}
    int64_t sample_tokens() const override { return tokens_; }
    int64_t size() const override { return int64_t{1} << 30; }
    void read(int64_t index, std::span<int32_t> out) const override {
        const int64_t start =
            static_cast<int64_t>((static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull) >> 40) % vocab_;
        for (int64_t j = 0; j < tokens_; ++j)
            out[static_cast<std::size_t>(j)] = static_cast<int32_t>((start + j) % vocab_);
    }
    std::string describe() const override { return "consecutive ids"; }

private:
    int64_t tokens_, vocab_;
};

RunStatus run(Config c, const fs::path& run_dir, const std::atomic<bool>* stop = nullptr,
              ControlSource* control = nullptr, bool with_test_split = false,
              std::unique_ptr<data::SampleSource> train_samples = nullptr) {
    TrainerInputs in;
    in.config = c;
    const int64_t vocab = model_vocab_size(c);
    in.train = train_samples ? std::move(train_samples)
                             : std::make_unique<data::MockSampleSource>(c.model.seq_length, vocab, c.training.seed, 0);
    in.valid = std::make_unique<data::MockSampleSource>(c.model.seq_length, vocab, c.training.seed, 1);
    if (with_test_split)
        in.test = std::make_unique<data::MockSampleSource>(c.model.seq_length, vocab, c.training.seed, 2);
    in.data_description = "mock";
    in.print_progress = false;
    in.stop_requested = stop;
    in.control = control;
    RunDir dir(run_dir, "test");
    return train(std::move(in), dir);
}

const auto records = test::topic_records;

/// The deterministic part of a step record (timings and memory vary, the rest must not).
nlohmann::json numbers(const nlohmann::json& r) {
    return {r["iteration"], r["consumed_tokens"], r["lm_loss"], r["lr"], r["grad_norm"], r["loss_scale"]};
}

std::string bytes_of(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

void expect_load_error(const fs::path& dir, const std::string& expected) {
    Config c = tiny_config();
    c.checkpoint.load = dir.string();
    test::TempDir out;
    try {
        run(c, out.path());
        QFAIL(qPrintable(QString::fromStdString("no error for " + expected)));
    } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find(expected) != std::string::npos, e.what());
    }
}

}  // namespace

class TestTraining : public QObject {
    Q_OBJECT
private slots:
    void cleanup() { ops::set_num_threads(2); }

    void run_directory_has_the_documented_records() {
        test::TempDir t;
        Config c = tiny_config();
        QCOMPARE(run(c, t.path()), RunStatus::Finished);
        for (const char* f : {"run.json", "metrics.jsonl", "events.jsonl"}) QVERIFY(fs::exists(t / f));
        const auto steps = jsonl_records(t / "metrics.jsonl", "step");
        QCOMPARE(steps.size(), std::size_t{6});
        for (const char* key : {"schema", "run_id", "seq", "time", "iteration", "consumed_tokens", "lm_loss", "lr",
                                "grad_norm", "loss_scale", "iteration_time_s", "tokens_per_sec", "tflops_per_device",
                                "mem_allocated_bytes", "mem_peak_bytes"})
            QVERIFY2(steps.back().contains(key), key);
        QCOMPARE(steps.back()["consumed_tokens"].get<int64_t>(), int64_t{6 * 4 * 16});
        QVERIFY(steps.back()["mfu"].is_null());  // no peak configured
        // Iterations 3 and 6, and once more after training (Megatron-LM's pretrain(); fresh samples each time).
        QCOMPARE(records(t / "metrics.jsonl", "eval").size(), std::size_t{3});
        const auto ends = records(t / "events.jsonl", "run.end");
        QCOMPARE(ends.size(), std::size_t{1});
        QCOMPARE(ends[0]["status"], "finished");
        // One sequence across both files, without gaps.
        std::vector<int64_t> seqs;
        for (const char* f : {"metrics.jsonl", "events.jsonl"}) {
            std::ifstream in(t / f);
            std::string line;
            while (std::getline(in, line)) seqs.push_back(nlohmann::json::parse(line)["seq"]);
        }
        std::sort(seqs.begin(), seqs.end());
        for (std::size_t i = 0; i < seqs.size(); ++i) QCOMPARE(seqs[i], static_cast<int64_t>(i));
        const auto run_json = nlohmann::json::parse(bytes_of(t / "run.json"));
        QCOMPARE(run_json["config"]["num_layers"], 2);
        QVERIFY(run_json["build"].contains("git_commit"));
        QVERIFY(steps.back()["lm_loss"].get<double>() < steps.front()["lm_loss"].get<double>());
    }

    // ---- Megatron-LM's semantics ------------------------------------------------------------------

    void skipped_steps_leave_the_learning_rate() {
        // fp16 from a loss scale that overflows: the first steps are skipped, and Megatron-LM's scheduler
        // only advances on successful ones.
        test::TempDir t;
        Config c = tiny_config();
        c.training.fp16 = true;
        c.training.initial_loss_scale = 4194304.0;  // 2^22: fp16 gradients overflow until it has halved enough
        c.training.hysteresis = 1;
        c.training.train_iters = 16;
        c.training.lr_warmup_iters = 4;
        c.training.lr_decay_iters = 16;
        QCOMPARE(run(c, t.path()), RunStatus::Finished);
        const auto steps = records(t / "metrics.jsonl", "step");
        QCOMPARE(steps.size(), std::size_t{16});
        const LrSchedule schedule(c.training);
        int64_t successful = 0, skipped = 0;
        for (const auto& s : steps) {
            QCOMPARE(s["lr"].get<double>(), schedule.lr(static_cast<double>(successful * 4)));
            const int64_t k = s["skipped_iterations"];
            skipped += k;
            successful += 1 - k;
        }
        QVERIFY2(skipped >= 2 && successful >= 2, qPrintable(QString("%1 skipped").arg(skipped)));
    }

    void batch_rampup_changes_the_micro_batches() {
        test::TempDir t;
        Config c = tiny_config();
        c.training.global_batch_size = 6;
        c.training.rampup_batch_size = {"2", "2", "8"};  // 2, 2, 4, 6, ... (test_config has the formula)
        c.data.eval_iters = 0;
        check_config(c, 1);
        QCOMPARE(run(c, t.path()), RunStatus::Finished);
        const auto steps = records(t / "metrics.jsonl", "step");
        const int64_t batches[] = {2, 2, 4, 6, 6, 6}, consumed[] = {2, 4, 8, 14, 20, 26};
        QCOMPARE(steps.size(), std::size_t{6});
        const LrSchedule schedule(c.training);
        for (std::size_t i = 0; i < 6; ++i) {
            QCOMPARE(steps[i]["global_batch_size"].get<int64_t>(), batches[i]);
            QCOMPARE(steps[i]["consumed_samples"].get<int64_t>(), consumed[i]);
            QCOMPARE(steps[i]["lr"].get<double>(), schedule.lr(static_cast<double>(i == 0 ? 0 : consumed[i - 1])));
        }
        // The first iteration is one micro-batch: the loss of a run with global batch 2.
        test::TempDir u;
        Config two = tiny_config();
        two.training.global_batch_size = 2;
        two.training.train_iters = 1;
        two.training.lr_warmup_iters = 2;
        two.data.eval_iters = 0;
        c.training.train_iters = 1;
        test::TempDir v;
        QCOMPARE(run(two, u.path()), RunStatus::Finished);
        QCOMPARE(run(c, v.path()), RunStatus::Finished);
        QCOMPARE(records(u / "metrics.jsonl", "step")[0]["lm_loss"], records(v / "metrics.jsonl", "step")[0]["lm_loss"]);
    }

    void validation_reads_fresh_samples_and_the_test_split_ends_the_run() {
        test::TempDir t;
        Config c = tiny_config();  // eval_interval 3, eval_iters 1, global batch 4
        QCOMPARE(run(c, t.path(), nullptr, nullptr, true), RunStatus::Finished);
        const auto evals = records(t / "metrics.jsonl", "eval");
        QCOMPARE(evals.size(), std::size_t{4});
        const int64_t iteration[] = {3, 6, 6, 6}, consumed_valid[] = {4, 8, 12, 12};
        for (std::size_t i = 0; i < 4; ++i) {
            QCOMPARE(evals[i]["iteration"].get<int64_t>(), iteration[i]);
            QCOMPARE(evals[i]["consumed_valid_samples"].get<int64_t>(), consumed_valid[i]);
            QCOMPARE(evals[i]["split"], i == 3 ? "test" : "valid");
        }
        // The two evaluations of the same weights (at 6) read different samples, so differ.
        QVERIFY(evals[1]["lm_loss"] != evals[2]["lm_loss"]);
        // Resumed at 3: validation goes on with the samples after the first evaluation's.
        test::TempDir r;
        Config first = c;
        first.training.train_iters = 3;
        first.checkpoint.save = (r / "ckpt").string();
        QCOMPARE(run(first, r / "a"), RunStatus::Finished);
        // Megatron-LM's tracker file beside our marker.
        QCOMPARE(bytes_of(r / "ckpt" / "latest_checkpointed_iteration.txt"), std::string("3"));
        Config second = c;
        second.checkpoint.load = (r / "ckpt").string();
        QCOMPARE(run(second, r / "b", nullptr, nullptr, true), RunStatus::Finished);
        const auto resumed = records(r / "b" / "metrics.jsonl", "eval");
        QCOMPARE(resumed.size(), std::size_t{3});
        QCOMPARE(resumed[0]["consumed_valid_samples"].get<int64_t>(), int64_t{8});
        QCOMPARE(resumed[0]["lm_loss"], evals[1]["lm_loss"]);
    }

    void exit_interval_stops_with_a_checkpoint() {
        test::TempDir t;
        Config c = tiny_config();
        c.checkpoint.exit_interval = 4;
        c.checkpoint.save = (t / "ckpt").string();
        QCOMPARE(run(c, t / "run"), RunStatus::Finished);
        QCOMPARE(records(t / "run" / "metrics.jsonl", "step").size(), std::size_t{4});
        QCOMPARE(bytes_of(t / "ckpt" / "latest"), std::string("iter_0000004\n"));
        const auto ends = records(t / "run" / "events.jsonl", "run.end");
        QCOMPARE(ends.back()["status"], "stopped");
        QVERIFY(ends.back()["reason"].get<std::string>().find("exit_interval 4") != std::string::npos);
        // exit_duration_in_mins: a duration that has passed after the first iteration ends the run there.
        Config d = tiny_config();
        d.checkpoint.exit_duration_in_mins = 1e-9;
        QCOMPARE(run(d, t / "duration"), RunStatus::Finished);
        QCOMPARE(records(t / "duration" / "metrics.jsonl", "step").size(), std::size_t{1});
        QVERIFY(records(t / "duration" / "events.jsonl", "run.end").back()["reason"].get<std::string>().find(
                    "exit_duration_in_mins") != std::string::npos);
    }

    void finetune_and_no_load_optim_start_over_as_megatron() {
        test::TempDir t;
        Config c = tiny_config();
        c.checkpoint.save = (t / "ckpt").string();
        QCOMPARE(run(c, t / "a"), RunStatus::Finished);
        Config fine = tiny_config();
        fine.training.train_iters = 2;
        fine.checkpoint.load = c.checkpoint.save;
        fine.checkpoint.finetune = true;
        QCOMPARE(run(fine, t / "fine"), RunStatus::Finished);
        const auto steps = records(t / "fine" / "metrics.jsonl", "step");
        QCOMPARE(steps.size(), std::size_t{2});
        QCOMPARE(steps[0]["iteration"].get<int64_t>(), int64_t{1});
        QCOMPARE(steps[0]["lr"].get<double>(), 0.0);  // the warm-up starts again
        Config no_optim = tiny_config();
        no_optim.training.train_iters = 8;
        no_optim.checkpoint.load = c.checkpoint.save;
        no_optim.checkpoint.no_load_optim = true;
        QCOMPARE(run(no_optim, t / "no_optim"), RunStatus::Finished);
        const auto resumed = records(t / "no_optim" / "metrics.jsonl", "step");
        QCOMPARE(resumed.size(), std::size_t{2});
        QCOMPARE(resumed[0]["iteration"].get<int64_t>(), int64_t{7});
        QCOMPARE(resumed[0]["lr"].get<double>(), 0.0);  // the schedule starts over too
        // A checkpoint without the optimizer state (no_save_optim) is smaller and loads weights only.
        Config lean = tiny_config();
        lean.checkpoint.save = (t / "lean").string();
        lean.checkpoint.no_save_optim = true;
        QCOMPARE(run(lean, t / "b"), RunStatus::Finished);
        const auto meta = nlohmann::json::parse(bytes_of(t / "lean" / "iter_0000006" / "metadata.json"));
        for (const auto& tensor : meta["tensors"]) QVERIFY(tensor["name"].get<std::string>().starts_with("param/"));
        Config from_lean = tiny_config();
        from_lean.training.train_iters = 7;
        from_lean.checkpoint.load = lean.checkpoint.save;
        QCOMPARE(run(from_lean, t / "c"), RunStatus::Finished);
        QCOMPARE(records(t / "c" / "metrics.jsonl", "step")[0]["lr"].get<double>(), 0.0);
    }

    void mfu_is_reported_against_the_configured_peak() {
        test::TempDir t;
        Config c = tiny_config();
        c.training.train_iters = 2;
        c.telemetry.peak_tflops_per_device = 0.5;
        QCOMPARE(run(c, t.path()), RunStatus::Finished);
        const auto last = jsonl_records(t / "metrics.jsonl", "step").back();
        QVERIFY(std::abs(last["mfu"].get<double>() - last["tflops_per_device"].get<double>() / 0.5) < 1e-12);
    }

    void same_seed_same_bits_for_any_thread_count() {
        test::TempDir a, b, c;
        Config cfg = tiny_config();
        cfg.checkpoint.save = (a / "ckpt").string();
        cfg.runtime.threads = 2;
        QCOMPARE(run(cfg, a.path()), RunStatus::Finished);
        cfg.checkpoint.save = (b / "ckpt").string();
        QCOMPARE(run(cfg, b.path()), RunStatus::Finished);
        cfg.checkpoint.save = (c / "ckpt").string();
        cfg.runtime.threads = 1;
        QCOMPARE(run(cfg, c.path()), RunStatus::Finished);
        const auto ra = jsonl_records(a / "metrics.jsonl", "step");
        for (const fs::path& other : {b.path(), c.path()}) {
            const auto ro = jsonl_records(other / "metrics.jsonl", "step");
            QCOMPARE(ro.size(), ra.size());
            for (std::size_t i = 0; i < ra.size(); ++i) QCOMPARE(numbers(ro[i]), numbers(ra[i]));
            QVERIFY(bytes_of(a / "ckpt/iter_0000006/tp00_pp00.bin") ==
                    bytes_of(other / "ckpt/iter_0000006/tp00_pp00.bin"));
        }
    }

    void resume_continues_bit_identically_data() {
        QTest::addColumn<QString>("precision");
        QTest::newRow("fp32") << "fp32";
        QTest::newRow("bf16") << "bf16";
        // fp16 from a loss scale that overflows at first: the scaler's trackers must resume too.
        QTest::newRow("fp16, dynamic loss scale") << "fp16";
    }
    void resume_continues_bit_identically() {
        QFETCH(QString, precision);
        const auto with_precision = [&](Config c) {
            c.training.bf16 = precision == "bf16";
            c.training.fp16 = precision == "fp16";
            if (c.training.fp16) {
                c.training.initial_loss_scale = 4194304.0;  // 2^22: the first iterations overflow
                c.training.loss_scale_window = 2;
            }
            return c;
        };
        test::TempDir whole, part;
        Config c = with_precision(tiny_config());
        c.checkpoint.save = (whole / "ckpt").string();
        c.checkpoint.save_interval = 3;
        QCOMPARE(run(c, whole.path()), RunStatus::Finished);
        QCOMPARE(bytes_of(whole / "ckpt/latest"), std::string("iter_0000006\n"));

        Config r = with_precision(tiny_config());
        r.checkpoint.load = (whole / "ckpt/iter_0000003").string();
        r.checkpoint.save = (part / "ckpt").string();
        QCOMPARE(run(r, part.path()), RunStatus::Finished);
        const auto full = jsonl_records(whole / "metrics.jsonl", "step");
        const auto resumed = jsonl_records(part / "metrics.jsonl", "step");
        QCOMPARE(resumed.size(), std::size_t{3});
        for (std::size_t i = 0; i < 3; ++i) QCOMPARE(numbers(resumed[i]), numbers(full[i + 3]));
        QVERIFY(bytes_of(whole / "ckpt/iter_0000006/tp00_pp00.bin") ==
                bytes_of(part / "ckpt/iter_0000006/tp00_pp00.bin"));
        // Nothing half-written is left beside the checkpoints.
        for (const auto& e : fs::directory_iterator(whole / "ckpt"))
            QVERIFY2(!e.path().filename().string().starts_with("."), e.path().c_str());
    }

    // ---- 16-bit runs (the one-step numerics against PyTorch: test_backend_gpt_reference) ------------

    void bf16_tracks_the_fp32_loss_curve() {
        // 50 iterations from the same initial weights and samples: the bf16 curve stays on the fp32
        // one. One step's loss is within 2 sqrt(K) u = 3.5e-2 relative (u = 2^-8, K = 20 roundings for
        // 2 layers, test_backend_gpt_reference); across iterations the two trajectories drift apart
        // only by what those errors steer, so each iteration within 5e-2, and the mean of the last 10
        // (where rounding noise averages out) within 1e-2. A bf16 path that broke training (a
        // gradient rounded to zero, weights not refreshed from the master copy) leaves the curve by
        // far more: fp32 falls by about 0.4 here.
        // Learnable samples (runs of consecutive ids: a bigram the model picks up within 50 iterations),
        // so the curve falls and "tracks" means something; mock data is uniform noise.
        test::TempDir f32, b16;
        Config c = tiny_config();
        c.training.train_iters = 50;
        c.training.lr = 1e-2;
        c.data.eval_interval = 0;
        QCOMPARE(run(c, f32.path(), nullptr, nullptr, false, std::make_unique<ConsecutiveIds>(c)), RunStatus::Finished);
        c.training.bf16 = true;
        QCOMPARE(run(c, b16.path(), nullptr, nullptr, false, std::make_unique<ConsecutiveIds>(c)), RunStatus::Finished);
        const auto a = records(f32 / "metrics.jsonl", "step"), b = records(b16 / "metrics.jsonl", "step");
        QCOMPARE(a.size(), std::size_t{50});
        QCOMPARE(b.size(), std::size_t{50});
        double worst = 0, tail_a = 0, tail_b = 0;
        for (std::size_t i = 0; i < 50; ++i) {
            const double x = a[i]["lm_loss"], y = b[i]["lm_loss"];
            worst = std::max(worst, std::abs(y - x) / x);
            QVERIFY2(std::abs(y - x) <= 5e-2 * x,
                     qPrintable(QString("iteration %1: bf16 %2, fp32 %3").arg(i + 1).arg(y).arg(x)));
            if (i >= 40) tail_a += x / 10, tail_b += y / 10;
        }
        qInfo("bf16 vs fp32: worst relative difference %.2e; last 10 iterations %.4f vs %.4f (first %.4f)", worst,
              tail_b, tail_a, a[0]["lm_loss"].get<double>());
        QVERIFY2(std::abs(tail_b - tail_a) <= 1e-2 * tail_a, qPrintable(QString("%1 vs %2").arg(tail_b).arg(tail_a)));
        QVERIFY2(tail_a < a[0]["lm_loss"].get<double>() - 0.3, "the fp32 run learns (else the comparison says little)");
    }

    void fp16_loss_scale_halves_skips_and_grows_back() {
        // From a loss scale of 2^22 the fp16 gradients overflow; Megatron-LM's DynamicGradScaler
        // (megatron/core/optimizer/grad_scaler.py), replayed here from the step records' skip flags:
        // an overflow resets the growth count and spends one hysteresis credit; with none left the
        // scale halves (not below min_loss_scale); loss_scale_window clean iterations in a row double
        // it and refill the credits. The logged scale of every iteration must be the replay's, the
        // run must both halve and grow back, and a skipped iteration leaves the learning rate.
        test::TempDir t;
        Config c = tiny_config();
        c.training.fp16 = true;
        c.training.initial_loss_scale = 4194304.0;
        c.training.hysteresis = 2;
        c.training.loss_scale_window = 3;
        c.training.train_iters = 24;
        c.training.lr_warmup_iters = 4;
        c.training.lr_decay_iters = 24;
        c.data.eval_interval = 0;
        QCOMPARE(run(c, t.path()), RunStatus::Finished);
        const auto steps = records(t / "metrics.jsonl", "step");
        QCOMPARE(steps.size(), std::size_t{24});
        double scale = c.training.initial_loss_scale;
        int growth = 0, credits = c.training.hysteresis, halvings = 0, growths = 0, skips = 0;
        for (std::size_t i = 0; i < steps.size(); ++i) {
            const double logged = steps[i]["loss_scale"];
            QVERIFY2(
                logged == scale,
                qPrintable(QString("iteration %1: scale %2, Megatron's rule %3").arg(i + 1).arg(logged).arg(scale)));
            const bool found_inf = steps[i]["skipped_iterations"].get<int64_t>() == 1;
            if (found_inf) {
                ++skips;
                QVERIFY(steps[i]["grad_norm"].is_null() || !std::isfinite(steps[i]["grad_norm"].get<double>()));
                if (i + 1 < steps.size())  // the schedule did not advance
                    QCOMPARE(steps[i + 1]["lr"].get<double>(), steps[i]["lr"].get<double>());
                growth = 0;
                if (--credits <= 0) {
                    scale = std::max(scale * 0.5, c.training.min_loss_scale);
                    ++halvings;
                }
            } else if (++growth == c.training.loss_scale_window) {
                growth = 0;
                credits = c.training.hysteresis;
                scale *= 2;
                ++growths;
            }
        }
        qInfo("%d skipped, %d halvings, %d doublings; final scale %g", skips, halvings, growths, scale);
        QVERIFY2(halvings >= 1 && growths >= 1 && skips >= 2, "the run must overflow, halve and grow back");
        QVERIFY2(records(t / "events.jsonl", "event").size() >= static_cast<std::size_t>(skips), "one event per skip");
    }

    void non_finite_losses_stop_an_unscaled_run_after_ten() {
        // fp16 with a static loss scale and weights so large (std 1000) that the MLP's output overflows
        // fp16's 65504: every loss is NaN, every step is skipped (non-finite gradient norm), each is an
        // event, and without a dynamic loss scale that could recover, the tenth in a row ends the run
        // with an error naming the count. (In fp32, huge weights give a finite loss: the norm's variance
        // overflows to inf, its output is 0, only the gradients are NaN: the skip path, not this one.)
        test::TempDir t;
        Config c = tiny_config();
        c.training.fp16 = true;
        c.training.loss_scale = 1;  // static
        c.model.init_method_std = 1000;
        c.training.train_iters = 20;
        c.data.eval_interval = 0;
        try {
            run(c, t.path());
            QFAIL("a run with non-finite losses did not stop");
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find("not finite for 10 iterations in a row") != std::string::npos,
                     e.what());
        }
        int nan_events = 0, skip_events = 0;
        for (const auto& e : records(t / "events.jsonl", "event")) {
            nan_events += e["kind"] == "nan_loss";
            skip_events += e["kind"] == "skipped_iteration";
        }
        QCOMPARE(nan_events, 10);
        QCOMPARE(skip_events, 10);
        for (const auto& s : records(t / "metrics.jsonl", "step")) QVERIFY(s["lm_loss"].is_null());
    }

    // A batch ramp with skipped fp16 steps during it: resumed halfway, the run repeats the uninterrupted
    // one record for record (batch sizes, consumed samples, learning rate, loss scale, skipped steps,
    // losses and validation samples), because the scheduler's position and consumed_valid_samples are
    // in the checkpoint. (Recomputing the scheduler from the final batch size, as before, is off by
    // 4 samples per step skipped at batch 2: the learning rate differs after the resume.)
    void resume_repeats_the_run_through_a_ramp_and_skipped_steps() {
        for (const bool fp16 : {false, true}) {
            test::TempDir whole, part;
            Config c = tiny_config();
            c.training.global_batch_size = 6;
            c.training.rampup_batch_size = {"2", "2", "8"};  // 2, 2, 4, 6, 6, ...
            c.training.train_iters = 12;
            c.training.lr_warmup_iters = 4;
            c.training.lr_decay_style = "cosine";
            if (fp16) {
                c.training.fp16 = true;
                c.training.initial_loss_scale = 4194304.0;  // 2^22: overflows until halved enough
                c.training.hysteresis = 2;
            }
            check_config(c, 1);
            c.checkpoint.save = (whole / "ckpt").string();
            c.checkpoint.save_interval = 6;
            QCOMPARE(run(c, whole.path()), RunStatus::Finished);
            Config r = c;
            r.checkpoint.load = (whole / "ckpt/iter_0000006").string();
            r.checkpoint.save = (part / "ckpt").string();
            QCOMPARE(run(r, part.path()), RunStatus::Finished);

            const auto full = jsonl_records(whole / "metrics.jsonl", "step");
            const auto resumed = jsonl_records(part / "metrics.jsonl", "step");
            QCOMPARE(full.size(), std::size_t{12});
            QCOMPARE(resumed.size(), std::size_t{6});
            const auto exact = [](const nlohmann::json& s) {
                return nlohmann::json{s["iteration"], s["global_batch_size"], s["consumed_samples"], s["lm_loss"],
                                      s["lr"], s["grad_norm"], s["loss_scale"], s["skipped_iterations"]};
            };
            for (std::size_t i = 0; i < 6; ++i)
                QVERIFY2(exact(resumed[i]) == exact(full[i + 6]),
                         qPrintable(QString::fromStdString(std::string(fp16 ? "fp16 " : "fp32 ") + exact(resumed[i]).dump() +
                                                           " vs " + exact(full[i + 6]).dump())));
            const auto evals = jsonl_records(whole / "metrics.jsonl", "eval");
            const auto resumed_evals = jsonl_records(part / "metrics.jsonl", "eval");
            QCOMPARE(resumed_evals.size(), std::size_t{3});  // at 9, 12 and once after training
            QCOMPARE(evals.size(), std::size_t{5});
            for (std::size_t i = 0; i < 3; ++i)
                QVERIFY((nlohmann::json{resumed_evals[i]["consumed_valid_samples"], resumed_evals[i]["lm_loss"]}) ==
                        (nlohmann::json{evals[2 + i]["consumed_valid_samples"], evals[2 + i]["lm_loss"]}));
            QVERIFY(bytes_of(whole / "ckpt/iter_0000012/tp00_pp00.bin") == bytes_of(part / "ckpt/iter_0000012/tp00_pp00.bin"));
            if (fp16) {
                // The check means something: steps were skipped while the batch was still ramping.
                int64_t skipped_in_ramp = 0;
                for (std::size_t i = 0; i < 3; ++i) skipped_in_ramp += full[i]["skipped_iterations"].get<int64_t>();
                QVERIFY2(skipped_in_ramp >= 1, "no step skipped during the ramp");
                int64_t successful = 0;
                for (std::size_t i = 0; i < 6; ++i) successful += 1 - full[i]["skipped_iterations"].get<int64_t>();
                QVERIFY2(successful >= 1, "every step before the checkpoint was skipped");
            }
        }
    }

    void bad_checkpoints_are_refused_by_name() {
        test::TempDir t;
        Config c = tiny_config();
        c.checkpoint.save = (t / "ckpt").string();
        c.training.train_iters = 2;
        QCOMPARE(run(c, t / "run"), RunStatus::Finished);
        const fs::path iter = t / "ckpt/iter_0000002";
        const std::string original = bytes_of(iter / "tp00_pp00.bin");

        std::string flipped = original;
        flipped[flipped.size() / 2] ^= 0x01;
        std::ofstream(iter / "tp00_pp00.bin", std::ios::binary) << flipped;
        expect_load_error(t / "ckpt", "tp00_pp00.bin' is corrupt");

        std::ofstream(iter / "tp00_pp00.bin", std::ios::binary) << original.substr(0, original.size() - 100);
        expect_load_error(iter, "truncated");

        std::ofstream(iter / "tp00_pp00.bin", std::ios::binary) << original;
        const std::string meta = bytes_of(iter / "metadata.json");
        std::ofstream(iter / "metadata.json") << "{not json";
        expect_load_error(iter, "metadata.json' is not valid JSON");
        std::ofstream(iter / "metadata.json") << meta;

        expect_load_error(t / "ckpt/iter_0000099", "is not a checkpoint (it has no metadata.json)");
        std::ofstream(t / "ckpt/latest") << "iter_0000007\n";
        expect_load_error(t / "ckpt", "which has no metadata.json");
        std::ofstream(t / "ckpt/latest") << "iter_0000002\n";

        Config other = tiny_config();  // a different model cannot load it
        other.model.hidden_size = 64;
        other.model.ffn_hidden_size = 256;
        other.checkpoint.load = (t / "ckpt").string();
        test::TempDir out;
        try {
            run(other, out.path());
            QFAIL("loaded a checkpoint of another shape");
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find("was saved by a model with hidden_size 32, this run has 64") !=
                         std::string::npos,
                     e.what());
        }
        // Without the saved configuration, every tensor's shape is still compared.
        nlohmann::json m = nlohmann::json::parse(meta);
        m["config"] = nlohmann::json::object();
        std::ofstream(iter / "metadata.json") << m.dump();
        try {
            run(other, out.path());
            QFAIL("loaded a checkpoint of another shape");
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find("has shape [64, 32], this model needs [64, 64]") != std::string::npos,
                     e.what());
        }
        std::ofstream(iter / "metadata.json") << meta;
    }

    void load_without_a_checkpoint_yet_starts_fresh() {
        // One job script for the first submission and every requeue: --load of a directory that does
        // not exist yet, or holds no checkpoint yet, trains from iteration 0 (Megatron-LM's behaviour).
        test::TempDir t;
        Config c = tiny_config();
        c.training.train_iters = 2;
        c.checkpoint.load = (t / "ckpt").string();
        c.checkpoint.save = (t / "ckpt").string();
        QCOMPARE(run(c, t / "first"), RunStatus::Finished);
        auto events = jsonl_records(t / "first/events.jsonl", "event");
        QCOMPARE(events.front()["kind"], "checkpoint_not_found");
        QCOMPARE(jsonl_records(t / "first/metrics.jsonl", "step").front()["iteration"], 1);
        c.training.train_iters = 4;  // the requeued job: the same flags continue from iteration 2
        QCOMPARE(run(c, t / "second"), RunStatus::Finished);
        events = jsonl_records(t / "second/events.jsonl", "event");
        QCOMPARE(events.front()["kind"], "checkpoint_loaded");
        QCOMPARE(events.front()["iteration"], 2);
        QCOMPARE(jsonl_records(t / "second/metrics.jsonl", "step").front()["iteration"], 3);
    }

    void checkpoint_of_another_vocabulary_is_refused_before_loading() {
        test::TempDir t;
        Config c = tiny_config();  // 64 ids, EOD among them, padded to 64
        c.checkpoint.save = (t / "ckpt").string();
        c.training.train_iters = 2;
        QCOMPARE(run(c, t / "run"), RunStatus::Finished);
        const std::string latest = bytes_of(t / "ckpt/latest");
        const std::string shard = bytes_of(t / "ckpt/iter_0000002/tp00_pp00.bin");
        // 60 ids pad to the same 64 rows (the shapes agree), 70 to 128 rows (padded rows may
        // differ with the layout): both used to load, rows zero-filled or dropped, and then overwrote
        // the checkpoints of the save directory.
        for (const int vocab : {60, 70}) {
            Config other = tiny_config();
            other.model.vocab_size = vocab;
            resolve(other, 1, vocab);
            other.checkpoint.load = (t / "ckpt").string();
            other.checkpoint.save = (t / "ckpt").string();
            test::TempDir out;
            try {
                run(other, out.path());
                QFAIL("loaded a checkpoint of another vocabulary");
            } catch (const Error& e) {
                const std::string want = fmt::format("a vocabulary of 64 ids, this run has {}", vocab);
                QVERIFY2(std::string(e.what()).find(want) != std::string::npos, e.what());
            }
        }
        QCOMPARE(bytes_of(t / "ckpt/latest"), latest);
        QVERIFY(bytes_of(t / "ckpt/iter_0000002/tp00_pp00.bin") == shard);
    }

    void metadata_is_validated_field_by_field() {
        test::TempDir t;
        Config c = tiny_config();
        c.checkpoint.save = (t / "ckpt").string();
        c.training.train_iters = 2;
        QCOMPARE(run(c, t / "run"), RunStatus::Finished);
        const fs::path iter = t / "ckpt/iter_0000002";
        const std::string original = bytes_of(iter / "metadata.json");
        const auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
            nlohmann::json meta = nlohmann::json::parse(original);
            edit(meta);
            std::ofstream(iter / "metadata.json") << meta.dump();
        };
        edited([](nlohmann::json& m) {
            nlohmann::json extra = m["tensors"][0];
            extra["name"] = "param/decoder.layers.7.mlp.linear_fc1.weight";
            m["tensors"].push_back(extra);
        });
        expect_load_error(iter, "holds 1 tensor(s) this model does not have: param/decoder.layers.7.mlp.linear_fc1.weight");
        edited([](nlohmann::json& m) { m["iteration"] = -5; });
        expect_load_error(t / "ckpt", "iteration is -5, expected 0 or more");
        edited([](nlohmann::json& m) { m["consumed_samples"] = -1; });
        expect_load_error(t / "ckpt", "consumed_samples is -1");
        edited([](nlohmann::json& m) { m["optimizer_steps"] = 3; });
        expect_load_error(t / "ckpt", "optimizer_steps is 3, expected 0 to the iteration (2)");
        edited([](nlohmann::json& m) { m["iteration"] = m["optimizer_steps"] = 1; });
        expect_load_error(t / "ckpt", "records iteration 1, but its folder is iter_0000002");
        edited([](nlohmann::json& m) { m["tensors"][0]["file"] = "tp07_pp00.bin"; });
        expect_load_error(t / "ckpt", "lives in the unlisted file tp07_pp00.bin");
        std::ofstream(iter / "metadata.json") << original;
        c.checkpoint.load = (t / "ckpt").string();
        c.training.train_iters = 3;
        QCOMPARE(run(c, t / "again"), RunStatus::Finished);  // the untouched metadata still loads
    }

    void interrupted_replacement_leaves_old_or_new_behind_latest() {
        // Re-saving the iteration `latest` names (a run resumed from an earlier checkpoint into the same
        // directory) on a file system without an atomic exchange: killed between its two renames, only
        // .iter_N.old (the checkpoint `latest` meant) and .iter_N.tmp (the new one) are left.
        test::TempDir t;
        Config c = tiny_config();
        c.checkpoint.save = (t / "ckpt").string();
        c.training.train_iters = 2;
        QCOMPARE(run(c, t / "run"), RunStatus::Finished);
        fs::copy(t / "ckpt/iter_0000002", t / "ckpt/.iter_0000002.tmp", fs::copy_options::recursive);
        fs::rename(t / "ckpt/iter_0000002", t / "ckpt/.iter_0000002.old");
        std::ofstream(t / "ckpt/.latest.tmp-1f2e3d") << "iter_00";  // a marker write cut short
        c.checkpoint.load = (t / "ckpt").string();
        c.training.train_iters = 4;
        c.checkpoint.save_interval = 2;
        QCOMPARE(run(c, t / "resumed"), RunStatus::Finished);
        QCOMPARE(jsonl_records(t / "resumed/events.jsonl", "event").front()["iteration"], 2);
        // The next save cleaned up: the moved checkpoint is back, no temporary is left.
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(t / "ckpt")) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        QCOMPARE(names, (std::vector<std::string>{"iter_0000002", "iter_0000004", "latest",
                                                  "latest_checkpointed_iteration.txt"}));
    }

    void a_failed_save_leaves_no_partial_checkpoint() {
        // A full disk while writing the shard (here the file-size limit, which fails write() the same
        // way): the save fails by name, nothing half-written stays, `latest` keeps the last good one.
        if (!test::in_child()) {
            const test::ChildResult r = test::run_test_function_in_child("a_failed_save_leaves_no_partial_checkpoint");
            QVERIFY2(r.exited && r.code == 0, r.describe().c_str());
            return;
        }
        test::TempDir t;
        Config c = tiny_config();
        c.checkpoint.save = (t / "ckpt").string();
        c.training.train_iters = 2;
        QCOMPARE(run(c, t / "run"), RunStatus::Finished);
        const std::string latest = bytes_of(t / "ckpt/latest");
        std::signal(SIGXFSZ, SIG_IGN);
        const rlimit small{64 * 1024, 64 * 1024};  // below the ~1 MB shard, above every record
        QCOMPARE(setrlimit(RLIMIT_FSIZE, &small), 0);
        c.checkpoint.load = (t / "ckpt").string();
        c.training.train_iters = 3;
        try {
            run(c, t / "full");
            QFAIL("the save did not fail");
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find("checkpoint of iteration 3 not saved") != std::string::npos, e.what());
            QVERIFY2(std::string(e.what()).find("tp00_pp00.bin") != std::string::npos, e.what());
        }
        for (const auto& e : fs::directory_iterator(t / "ckpt"))
            QVERIFY2(!e.path().filename().string().starts_with("."), e.path().c_str());
        QVERIFY(!fs::exists(t / "ckpt/iter_0000003"));
        QCOMPARE(bytes_of(t / "ckpt/latest"), latest);
        QCOMPARE(jsonl_records(t / "full/events.jsonl", "run.end").back()["status"], "failed");
    }

    void control_requests_apply_at_iteration_boundaries() {
        test::TempDir t;
        Config c = tiny_config();
        ScriptedControl control;
        control.add(0, ControlAction::Status);      // after iteration 1
        control.add(1, ControlAction::Checkpoint);  // after iteration 2
        control.add(2, ControlAction::Pause);       // after iteration 3 ...
        control.add(5, ControlAction::Status);      // ... answered while paused ...
        control.add(6, ControlAction::Resume);      // ... then resumed
        control.add(7, ControlAction::Stop);        // after iteration 4
        QCOMPARE(run(c, t.path(), nullptr, &control), RunStatus::Stopped);
        QCOMPARE(control.replies.size(), std::size_t{6});
        QCOMPARE(control.replies[0].second["state"], "running");
        QCOMPARE(control.replies[0].second["iteration"], 1);
        QCOMPARE(control.replies[1].second["path"].get<std::string>(), (t / "checkpoints/iter_0000002").string());
        QCOMPARE(control.replies[3].second["state"], "paused");
        QCOMPARE(control.replies[3].second["iteration"], 3);
        QCOMPARE(control.replies[5].second["iteration"], 4);
        for (const auto& [id, r] : control.replies) QVERIFY(r["ok"].get<bool>());
        QCOMPARE(jsonl_records(t / "events.jsonl", "run.end").back()["status"], "stopped");
        QCOMPARE(jsonl_records(t / "metrics.jsonl", "step").back()["iteration"], 4);
        QCOMPARE(bytes_of(t / "checkpoints/latest"), std::string("iter_0000004\n"));  // stop checkpoints
        int applied = 0;
        for (const auto& e : jsonl_records(t / "events.jsonl", "event")) applied += e["kind"] == "control_applied";
        QCOMPARE(applied, 4);
    }

    void stop_request_saves_and_reports_interrupted() {
        test::TempDir t;
        Config c = tiny_config();
        c.checkpoint.save = (t / "ckpt").string();
        std::atomic<bool> stop{true};
        QCOMPARE(run(c, t / "run", &stop), RunStatus::Interrupted);
        QCOMPARE(bytes_of(t / "ckpt/latest"), std::string("iter_0000001\n"));
        const auto ends = jsonl_records(t / "run/events.jsonl", "run.end");
        QCOMPARE(ends.back()["status"], "interrupted");
    }
};

MWB_TEST_SUITE_APPLESS(test_backend_training, TestTraining)
}  // namespace test_backend_training
#include "test_training.moc"
