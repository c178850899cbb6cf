// Learning-rate schedule, loss scaling, mixed precision and gradient accumulation.
#include "support/fixtures.h"
#include "support/reference.h"
#include "support/suite.h"

#include "backend/config/config_io.h"
#include "backend/config/validate.h"

#include "backend/model/gpt_model.h"
#include "mwb/kernels/precision.h"
#include "backend/optim/loss_scaler.h"
#include "backend/optim/lr_schedule.h"
#include "backend/optim/optimizer.h"

#include <QtTest>

#include <cmath>
#include <limits>
#include <random>

namespace test_backend_optim {

using namespace mwb;

namespace {

/// The model's weights (its working copy: 16-bit in bf16/fp16 runs on the CPU) as fp32 values.
std::vector<float> weights_f32(const GptModel& model, OpContext& ctx) {
    std::vector<float> w(static_cast<std::size_t>(model.params().numel()));
    ops::copy(ctx, make_view(w.data(), DType::F32, {model.params().numel()}), model.params());
    return w;
}

GptDims small_dims(int64_t micro_batch) {
    GptDims d;
    d.layers = 2;
    d.hidden = 32;
    d.heads = 4;
    d.ffn = 64;
    d.seq = 16;
    d.micro_batch = micro_batch;
    d.vocab = 128;
    d.max_positions = 16;
    return d;
}

/// The same size as a Llama-family model: RoPE, SwiGLU, 2 key/value groups, RMSNorm, no biases, untied.
GptDims small_llama_dims(int64_t micro_batch) {
    GptDims d = small_dims(micro_batch);
    d.groups = 2;
    d.ffn = 48;
    d.swiglu = true;
    d.linear_bias = false;
    d.positions = GptDims::Positions::Rope;
    d.rotary_dim = 8;
    d.rmsnorm = true;
    d.tied_output = false;
    return d;
}

std::vector<int32_t> random_tokens(int64_t samples, int64_t seq, int64_t vocab, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
    std::vector<int32_t> t(static_cast<std::size_t>(samples * (seq + 1)));
    for (auto& x : t) x = id(gen);
    return t;
}

}  // namespace

class TestOptim : public QObject {
    Q_OBJECT
private slots:
    void lr_schedule_follows_megatron() {
        TrainingConfig t;
        t.global_batch_size = 1;  // one sample per iteration: samples count as iterations
        t.lr = 1e-3;
        t.min_lr = 1e-4;
        t.lr_warmup_iters = 10;
        t.lr_decay_iters = 110;
        for (const char* style : {"linear", "cosine", "constant"}) {
            t.lr_decay_style = style;
            const LrSchedule s(t);
            QCOMPARE(s.lr(0), 0.0);  // Megatron's first iteration trains at lr 0 when warming up
            QCOMPARE(s.lr(5), 5e-4);
            QCOMPARE(s.lr(10), 1e-3);
            if (std::string(style) == "constant") {
                QCOMPARE(s.lr(60), 1e-3);
                QCOMPARE(s.lr(500), 1e-3);
                continue;
            }
            QVERIFY(std::abs(s.lr(60) - 5.5e-4) < 1e-15);  // half-way: (lr + min_lr) / 2 for both shapes
            QVERIFY(std::abs(s.lr(110) - 1e-4) < 1e-15);
            QCOMPARE(s.lr(111), 1e-4);
            const double ratio = 25.0 / 100.0;  // at step 35
            const double expected = std::string(style) == "linear" ? 1e-4 + (1 - ratio) * 9e-4
                                                                   : 1e-4 + 0.5 * (1 + std::cos(M_PI * ratio)) * 9e-4;
            QVERIFY(std::abs(s.lr(35) - expected) < 1e-15);
        }
    }

    void lr_and_weight_decay_match_megatrons_own_scheduler() {
        // tests/fixtures/lr_schedule_megatron.json: Megatron-LM's OptimizerParamScheduler run unchanged
        // (tests/reference/make_lr_schedule_reference.py) for every decay style, WSD annealing shape,
        // warm-up kind (iterations, samples, fraction, from lr_warmup_init) and weight-decay increment.
        const nlohmann::json fixture = test::load_fixture("lr_schedule_megatron.json");
        int points = 0;
        for (const auto& c : fixture.at("cases")) {
            Config cfg;
            cfg.model.num_layers = cfg.model.hidden_size = cfg.model.num_attention_heads = cfg.model.seq_length = 1;
            apply_json(cfg, c.at("config"), "lr_schedule_megatron.json");
            resolve(cfg, 1, 1000);
            const auto issues = validate(cfg, 1);
            QVERIFY2(issues.empty(), issues.empty() ? "" : issues[0].message.c_str());
            const LrSchedule s(cfg.training);
            for (const auto& p : c.at("points")) {
                const double n = p[0].get<double>(), lr = p[1].get<double>(), wd = p[2].get<double>();
                QVERIFY2(std::abs(s.lr(n) - lr) <= 1e-15 * std::abs(lr),
                         qPrintable(QString("%1 at %2: %3 vs Megatron's %4")
                                        .arg(QString::fromStdString(c["config"].dump()))
                                        .arg(n)
                                        .arg(s.lr(n), 0, 'g', 17)
                                        .arg(lr, 0, 'g', 17)));
                QVERIFY2(std::abs(s.weight_decay(n) - wd) <= 1e-15 * std::abs(wd), c["config"].dump().c_str());
                ++points;
            }
        }
        QCOMPARE(points, 11 * 161);
    }

    void dynamic_loss_scale_follows_megatron() {
        TrainingConfig t;
        t.fp16 = true;
        t.initial_loss_scale = 1024;
        t.min_loss_scale = 64;
        t.loss_scale_window = 3;
        t.hysteresis = 2;
        LossScaler s(t);
        QVERIFY(s.dynamic());
        s.update(true);  // first overflow: hysteresis absorbs it
        QCOMPARE(s.scale(), 1024.0);
        s.update(true);  // second: halve
        QCOMPARE(s.scale(), 512.0);
        s.update(true);  // hysteresis is not restored until the scale grows
        QCOMPARE(s.scale(), 256.0);
        s.update(false);
        s.update(false);
        QCOMPARE(s.scale(), 256.0);
        s.update(false);  // 3 clean iterations: double
        QCOMPARE(s.scale(), 512.0);
        s.update(true);
        QCOMPARE(s.scale(), 512.0);  // hysteresis restored by the growth
        for (int i = 0; i < 10; ++i) s.update(true);
        QCOMPARE(s.scale(), 64.0);  // floor
        const auto state = s.state();
        LossScaler restored(t);
        restored.load_state(state);
        QCOMPARE(restored.scale(), 64.0);

        TrainingConfig b;
        b.bf16 = true;
        QVERIFY(!LossScaler(b).dynamic());
        QCOMPARE(LossScaler(b).scale(), 1.0);
        TrainingConfig fixed;
        fixed.fp16 = true;
        fixed.loss_scale = 128;
        QVERIFY(!LossScaler(fixed).dynamic());
        QCOMPARE(LossScaler(fixed).scale(), 128.0);
    }

    void overflowing_gradients_skip_the_step() {
        OpContext ctx;
        Allocator alloc;
        GptModel model(small_dims(2), RecomputePolicy{}, DType::F16, ctx, alloc);
        model.init_weights(3);
        TrainingConfig t;
        t.fp16 = true;
        t.lr = 1e-3;
        Optimizer opt(model.layout(), model.params(), model.grads(), t, DType::F16, ctx, alloc);
        QCOMPARE(model.params().dtype, DType::F16);  // the working copy is the fp16 arena itself
        const std::vector<float> before = weights_f32(model, ctx);
        model.grads().f32()[5] = std::numeric_limits<float>::infinity();
        const StepResult r = opt.step(1e-3, 1024.0);
        QVERIFY(r.skipped);
        QCOMPARE(opt.steps(), int64_t{0});
        QVERIFY(weights_f32(model, ctx) == before);
    }

    void an_inf_in_the_f16_gradient_arena_skips_the_step() {
        // An fp16 overflow of one accumulation (65504 + 32 rounds to inf) in the f16 arena: the
        // gradient norm is not finite, the step writes nothing, and the arena is left as it was.
        OpContext ctx;
        Allocator alloc;
        GptModel model(small_dims(2), RecomputePolicy{}, DType::F16, ctx, alloc, true, DType::F16);
        model.init_weights(3);
        TrainingConfig t;
        t.fp16 = true;
        Optimizer opt(model.layout(), model.params(), model.grads(), t, DType::F16, ctx, alloc);
        const std::vector<float> before = weights_f32(model, ctx);
        auto* g = static_cast<uint16_t*>(model.grads().data);
        g[5] = fp16_bits(from_fp16_bits(fp16_bits(65504.0f)) + 32.0f);
        QCOMPARE(g[5], uint16_t{0x7C00});
        const StepResult r = opt.step(1e-3, 1024.0, /*zero_grads=*/true);
        QVERIFY(r.skipped);
        QVERIFY(!r.grads_zeroed);
        QCOMPARE(g[5], uint16_t{0x7C00});
        QVERIFY(weights_f32(model, ctx) == before);
    }

    void a_step_can_zero_the_gradients_it_reads() {
        // What the trainer relies on when it skips its zeroing pass after a step with zero_grads: the
        // same weights as a step without, every gradient 0 afterwards, and no claim when the step was
        // skipped (the gradients are then left as they were).
        OpContext ctx;
        Allocator alloc;
        const GptDims d = small_llama_dims(2);
        const auto tokens = random_tokens(d.micro_batch, d.seq, d.vocab, 9);
        TrainingConfig t;
        t.lr = 1e-3;
        t.clip_grad = 1.0;
        std::vector<std::vector<float>> weights;
        for (bool zero : {false, true}) {
            GptModel model(d, RecomputePolicy{}, DType::F32, ctx, alloc);
            model.init_weights(3);
            Optimizer opt(model.layout(), model.params(), model.grads(), t, DType::F32, ctx, alloc);
            model.forward_backward(tokens.data(), 1.0f, 3, 1);
            const TensorView g = model.grads();
            const std::vector<float> grads(g.f32(), g.f32() + g.numel());
            const StepResult r = opt.step(1e-3, 1.0, zero);
            QVERIFY(!r.skipped);
            QCOMPARE(r.grads_zeroed, zero);
            const std::vector<float> after(g.f32(), g.f32() + g.numel());
            QVERIFY(after == (zero ? std::vector<float>(grads.size(), 0.0f) : grads));
            weights.emplace_back(model.params().f32(), model.params().f32() + model.params().numel());
            if (zero) {
                g.f32()[5] = std::numeric_limits<float>::infinity();
                const StepResult bad = opt.step(1e-3, 1.0, true);
                QVERIFY(bad.skipped && !bad.grads_zeroed);
                QVERIFY(std::isinf(g.f32()[5]));
            }
        }
        QVERIFY(weights[0] == weights[1]);
    }

    void fp16_loss_scale_overflow_is_detected_end_to_end_data() {
        QTest::addColumn<bool>("llama");
        QTest::addColumn<bool>("f16_grads");
        QTest::newRow("GPT") << false << false;
        QTest::newRow("Llama") << true << false;
        // fp16 without accumulate_allreduce_grads_in_fp32: the f16 gradient arena holds the inf.
        QTest::newRow("GPT, f16 gradients") << false << true;
        QTest::newRow("Llama, f16 gradients") << true << true;
    }
    void fp16_loss_scale_overflow_is_detected_end_to_end() {
        // A loss scale of 2^40 overflows fp16 (max 65504) in the emulated activation gradients.
        QFETCH(bool, llama);
        QFETCH(bool, f16_grads);
        OpContext ctx;
        Allocator alloc;
        const GptDims d = llama ? small_llama_dims(2) : small_dims(2);
        GptModel model(d, RecomputePolicy{}, DType::F16, ctx, alloc, true, f16_grads ? DType::F16 : DType::F32);
        QCOMPARE(model.grads().dtype, f16_grads ? DType::F16 : DType::F32);
        model.init_weights(3);
        TrainingConfig t;
        t.fp16 = true;
        Optimizer opt(model.layout(), model.params(), model.grads(), t, DType::F16, ctx, alloc);
        const auto tokens = random_tokens(d.micro_batch, d.seq, d.vocab, 9);
        model.forward_backward(tokens.data(), std::ldexp(1.0f, 40), 3, 1);
        QVERIFY(opt.step(1e-3, std::ldexp(1.0, 40)).skipped);
        model.zero_grads();
        model.forward_backward(tokens.data(), 1024.0f, 3, 1);
        QVERIFY(!opt.step(1e-3, 1024.0).skipped);
    }

    void bf16_weights_are_bf16_and_close_to_fp32_data() {
        QTest::addColumn<bool>("llama");
        QTest::newRow("GPT") << false;
        QTest::newRow("Llama") << true;
    }
    void bf16_weights_are_bf16_and_close_to_fp32() {
        QFETCH(bool, llama);
        const GptDims d = llama ? small_llama_dims(2) : small_dims(2);
        const auto tokens = random_tokens(d.micro_batch, d.seq, d.vocab, 5);
        OpContext ctx;
        Allocator alloc;
        GptModel fp32(d, RecomputePolicy{}, DType::F32, ctx, alloc);
        GptModel bf16(d, RecomputePolicy{}, DType::BF16, ctx, alloc);
        fp32.init_weights(11);
        bf16.init_weights(11);
        QCOMPARE(bf16.params().dtype, DType::BF16);  // 2 bytes a weight
        QCOMPARE(alloc.stats().of(MemCategory::Weights),
                 fp32.params().numel() * 4 + bf16.params().numel() * 2);
        const std::vector<float> drawn = weights_f32(fp32, ctx), init = weights_f32(bf16, ctx);
        for (int64_t i = 0; i < bf16.params().numel(); ++i)
            QCOMPARE(init[i], round_to_bf16(drawn[i]));  // the fp32 draws, rounded into the arena
        TrainingConfig t;
        t.bf16 = true;
        t.lr = 1e-3;
        Optimizer opt(bf16.layout(), bf16.params(), bf16.grads(), t, DType::BF16, ctx, alloc);
        const double l32 = fp32.forward_backward(tokens.data(), 1.0f, 11, 1);
        const double l16 = bf16.forward_backward(tokens.data(), 1.0f, 11, 1);
        QVERIFY2(std::abs(l32 - l16) < 2e-2 * std::abs(l32), qPrintable(QString("%1 vs %2").arg(l32).arg(l16)));
        QVERIFY(!opt.step(1e-3, 1.0).skipped);
        const std::vector<float> after = weights_f32(bf16, ctx);
        for (int64_t i = 0; i < bf16.params().numel(); ++i)
            QCOMPARE(round_to_bf16(opt.master().f32()[i]), after[i]);  // the rounded master weights
    }

    void gradient_accumulation_equals_one_big_batch() {
        // Two micro-batches of 2 samples accumulate the same gradient as one batch of 4 (no dropout).
        const auto tokens = random_tokens(4, 16, 128, 21);
        OpContext ctx;
        Allocator alloc;
        GptModel big(small_dims(4), RecomputePolicy{}, DType::F32, ctx, alloc);
        GptModel small(small_dims(2), RecomputePolicy{}, DType::F32, ctx, alloc);
        big.init_weights(8);
        small.init_weights(8);
        const double loss_big = big.forward_backward(tokens.data(), 1.0f, 8, 1);
        double loss_acc = 0;
        for (int m = 0; m < 2; ++m) loss_acc += small.forward_backward(tokens.data() + m * 2 * 17, 0.5f, 8, 1) / 2;
        QVERIFY(std::abs(loss_big - loss_acc) < 1e-6 * loss_big);
        const std::vector<float> g(small.grads().f32(), small.grads().f32() + small.grads().numel());
        const std::vector<double> ref(big.grads().f32(), big.grads().f32() + big.grads().numel());
        QVERIFY2(test::normwise_error(g, ref) < 1e-5, qPrintable(QString::number(test::normwise_error(g, ref))));
    }
};

MWB_TEST_SUITE_APPLESS(test_backend_optim, TestOptim)
}  // namespace test_backend_optim
#include "test_optim.moc"
