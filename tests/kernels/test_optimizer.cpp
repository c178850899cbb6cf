// AdamW against a float64 implementation of torch.optim.AdamW's documented algorithm (decoupled weight decay,
// bias correction, eps outside the square root), over several steps, with grad_scale and the rounded copy
// for 16-bit model weights.
#include "support/precision_ref.h"
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"
#include "support/threads.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"

#include <QtTest>

#include <algorithm>
#include <bit>
#include <cmath>

namespace test_kernels_optimizer {

using namespace mwb;
using mwb::test::max_rel_error;
using mwb::test::random_floats;

namespace {

TensorView view(std::vector<float>& v) {
    return view_f32(v.data(), {static_cast<int64_t>(v.size())});
}

/// torch.optim.AdamW (docs, "Algorithm"), in float64, for step t (1-based):
///   g = grad·grad_scale;  θ ← θ - lr·λ·θ;  m ← β1·m + (1-β1)·g;  v ← β2·v + (1-β2)·g²
///   m̂ = m/(1-β1^t);  v̂ = v/(1-β2^t);  θ ← θ - lr·m̂/(√v̂ + eps)
/// m_size tracks Σ of |terms| of m (the same recursion on |g|): m's sign changes from step to step, so its
/// rounding error is relative to that, not to m itself.
struct AdamWRef {
    std::vector<double> param, m, v, m_size;
    void step(const std::vector<float>& grad, const AdamWParams& p) {
        const double b1 = p.beta1, b2 = p.beta2, lr = p.lr, t = double(p.step);
        for (std::size_t i = 0; i < param.size(); ++i) {
            const double g = double(grad[i]) * double(p.grad_scale);
            param[i] -= lr * double(p.weight_decay) * param[i];
            m[i] = b1 * m[i] + (1 - b1) * g;
            m_size[i] = b1 * m_size[i] + (1 - b1) * std::abs(g);
            v[i] = b2 * v[i] + (1 - b2) * g * g;
            const double m_hat = m[i] / (1 - std::pow(b1, t)), v_hat = v[i] / (1 - std::pow(b2, t));
            param[i] -= lr * m_hat / (std::sqrt(v_hat) + double(p.eps));
        }
    }
};

/// Gradients spanning many magnitudes (1e-10 to 10): tiny ones put √v̂ next to eps, where eps placement
/// (outside the root, after bias correction) decides the step.
std::vector<float> gradients(std::size_t n, uint32_t seed) {
    auto g = random_floats(n, seed);
    const auto e = random_floats(n, seed + 1000, -10.0f, 1.0f);
    for (std::size_t i = 0; i < n; ++i) g[i] *= std::pow(10.0f, e[i]);
    return g;
}

AdamWParams hyper(int64_t step) {
    AdamWParams p;
    p.lr = 1e-2f;  // large, so the update is well above the rounding of θ and a wrong formula shows
    p.beta1 = 0.9f;
    p.beta2 = 0.95f;
    p.eps = 1e-8f;
    p.weight_decay = 0.1f;
    p.step = step;
    p.grad_scale = 0.5f;
    return p;
}

}  // namespace

class TestOptimizer : public QObject {
    Q_OBJECT
private slots:
    void adamw_matches_torch_algorithm_over_steps() {
        const std::size_t n = 4099;
        auto param = random_floats(n, 1), m = std::vector<float>(n, 0.0f), v = std::vector<float>(n, 0.0f);
        AdamWRef ref{std::vector<double>(param.begin(), param.end()), std::vector<double>(n, 0.0),
                     std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
        OpContext ctx;
        for (int64_t t = 1; t <= 6; ++t) {
            auto grad = gradients(n, uint32_t(10 + t));
            const AdamWParams p = hyper(t);
            ops::adamw_update(ctx, view(param), view(grad), view(m), view(v), p);
            ref.step(grad, p);
            // The float state differs from float64 by rounding only, a few ulp per step, compounding over the
            // steps: v (a sum of positive terms) relative to itself; m relative to the size of its terms
            // (m_size); θ relative to |θ| or the step size lr, whichever is larger (θ - step can cancel).
            // Measured after 6 steps: m 2e-7, v 2e-7, θ 5e-7 (θ gains ½ ulp of itself plus a few ulp of the
            // step every step: ~1.5e-6 worst case after 6 steps, hence 2e-6 for θ).
            double m_err = 0;
            for (std::size_t i = 0; i < n; ++i) m_err = std::max(m_err, std::abs(m[i] - ref.m[i]) / ref.m_size[i]);
            MWB_VERIFY_ERROR(m_err, 1e-6);
            MWB_VERIFY_ERROR(max_rel_error(v, ref.v, 1e-30), 1e-6);
            MWB_VERIFY_ERROR(max_rel_error(param, ref.param, p.lr), 2e-6);
        }
    }

    void adamw_first_step_is_sign_sized() {
        // On step 1 the bias-corrected update is lr·g/(|g| + eps): ±lr for |g| >> eps. An independent
        // closed form that catches a missing or misplaced bias correction outright.
        std::vector<float> param(4, 1.0f), m(4, 0.0f), v(4, 0.0f), grad = {1.0f, -2.0f, 0.1f, -4e3f};
        AdamWParams p = hyper(1);
        p.weight_decay = 0.0f;
        p.grad_scale = 1.0f;
        OpContext ctx;
        ops::adamw_update(ctx, view(param), view(grad), view(m), view(v), p);
        for (std::size_t i = 0; i < 4; ++i) {
            const double want = 1.0 - p.lr * (grad[i] > 0 ? 1.0 : -1.0);
            // θ ≈ 0.99: its rounding (3e-8) plus eps/|g| ≤ 1e-7 of lr: within 1e-7.
            MWB_VERIFY_ERROR(std::abs(param[i] - want), 1e-7);
        }
    }

    void adamw_decay_is_decoupled() {
        // A zero gradient leaves m, v at 0 and the Adam step at 0: only θ·(1 - lr·λ) remains (AdamW), where
        // L2-regularised Adam would have taken a full normalised step of size lr.
        auto param = random_floats(1000, 2);
        const auto before = param;
        std::vector<float> m(1000, 0.0f), v(1000, 0.0f), grad(1000, 0.0f);
        const AdamWParams p = hyper(3);
        OpContext ctx;
        ops::adamw_update(ctx, view(param), view(grad), view(m), view(v), p);
        std::vector<double> want(before.size());
        for (std::size_t i = 0; i < before.size(); ++i)
            want[i] = double(before[i]) * (1.0 - double(p.lr) * p.weight_decay);
        MWB_VERIFY_ERROR(max_rel_error(param, want, 1e-30), 2e-7);  // two float roundings
        QVERIFY(std::all_of(m.begin(), m.end(), [](float x) { return x == 0.0f; }));
        QVERIFY(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }));
    }

    void adamw_param_copy_is_rounded_data() {
        QTest::addColumn<int>("dtype_index");
        QTest::newRow("bf16") << int(DType::BF16);
        QTest::newRow("f16") << int(DType::F16);
        QTest::newRow("f32") << int(DType::F32);
    }
    void adamw_param_copy_is_rounded() {
        QFETCH(int, dtype_index);
        const auto dtype = DType(dtype_index);
        const std::size_t n = 5003;
        auto param = random_floats(n, 3, -70000.0f, 70000.0f);    // past fp16's 65504: overflow to inf too
        for (std::size_t i = 0; i < 100; ++i) param[i] *= 1e-9f;  // fp16 subnormals
        auto grad = gradients(n, 4);
        std::vector<float> m(n, 0.0f), v(n, 0.0f), copy(n, std::nanf(""));
        OpContext ctx;
        ops::adamw_update(ctx, view(param), view(grad), view(m), view(v), hyper(1), view(copy), dtype);
        std::vector<float> want(n);
        for (std::size_t i = 0; i < n; ++i)
            want[i] = dtype == DType::BF16  ? mwb::test::bf16_ref(param[i])
                      : dtype == DType::F16 ? mwb::test::fp16_ref(param[i])
                                            : param[i];
        MWB_VERIFY_BITWISE(copy, want);  // the copy is of the updated fp32 master weights, rounded once
    }

    void adamw_does_not_depend_on_threads() {
        const std::size_t n = 30011;
        const auto param0 = random_floats(n, 5), grad0 = gradients(n, 6);
        const auto run = [&](int threads) {
            mwb::test::ScopedThreads t(threads);
            auto param = param0, grad = grad0;
            std::vector<float> m(n, 0.0f), v(n, 0.0f), copy(n);
            OpContext ctx;
            for (int64_t s = 1; s <= 2; ++s)
                ops::adamw_update(ctx, view(param), view(grad), view(m), view(v), hyper(s), view(copy), DType::BF16);
            for (const auto* part : {&m, &v, &copy}) param.insert(param.end(), part->begin(), part->end());
            return param;
        };
        const auto one = run(1), two = run(2);
        MWB_VERIFY_BITWISE(two, one);
    }

    void adamw_zero_grad_changes_only_the_gradient() {
        // zero_grad leaves the update bit for bit as it was and every gradient at 0 (+0.0, not -0.0).
        const std::size_t n = 30011;
        const auto param0 = random_floats(n, 7), grad0 = gradients(n, 8);
        const auto run = [&](bool zero, std::vector<float>& grad) {
            auto param = param0;
            std::vector<float> m(n, 0.25f), v(n, 0.5f), copy(n);
            AdamWParams p = hyper(3);
            p.zero_grad = zero;
            OpContext ctx;
            ops::adamw_update(ctx, view(param), view(grad), view(m), view(v), p, view(copy), DType::F16);
            for (const auto* part : {&m, &v, &copy}) param.insert(param.end(), part->begin(), part->end());
            return param;
        };
        auto kept = grad0, zeroed = grad0;
        const auto want = run(false, kept), got = run(true, zeroed);
        MWB_VERIFY_BITWISE(got, want);
        MWB_VERIFY_BITWISE(kept, grad0);
        MWB_VERIFY_BITWISE(zeroed, std::vector<float>(n, 0.0f));
    }

    void adamw_reads_the_device_scale_and_skips_on_found_inf() {
        // gradient_scale's tensor: its multiplier gives the bits of the same multiplier in p.grad_scale,
        // and found_inf leaves every tensor as it was (zero_grad included: the step did not happen).
        const std::size_t n = 20011;
        const auto param0 = random_floats(n, 9), grad0 = gradients(n, 10);
        const auto run = [&](AdamWParams p, std::vector<float> scale, std::vector<float>& grad) {
            auto param = param0;
            std::vector<float> m(n, 0.25f), v(n, 0.5f), copy(n, 7.0f);
            OpContext ctx;
            ops::adamw_update(ctx, view(param), view(grad), view(m), view(v), p, view(copy), DType::BF16,
                              scale.empty() ? TensorView{} : view(scale));
            for (const auto* part : {&m, &v, &copy}) param.insert(param.end(), part->begin(), part->end());
            return param;
        };
        AdamWParams host = hyper(2), device = hyper(2);
        host.grad_scale = 0.37f;
        device.grad_scale = 1.0f;
        auto g1 = grad0, g2 = grad0;
        MWB_VERIFY_BITWISE(run(device, {0.37f, 0.0f}, g2), run(host, {}, g1));
        device.zero_grad = true;
        auto g3 = grad0;
        auto untouched = param0;
        for (float f : {0.25f, 0.5f, 7.0f}) untouched.insert(untouched.end(), n, f);
        MWB_VERIFY_BITWISE(run(device, {0.37f, 1.0f}, g3), untouched);
        MWB_VERIFY_BITWISE(g3, grad0);
        std::vector<float> a(8), three(3);
        OpContext ctx;
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::adamw_update(ctx, view(a), view(a), view(a), view(a), hyper(1), {},
                                                                DType::F32, view(three)));
    }

    void adamw_reads_the_step_block() {
        // The step's parameter block (what a captured step's kernels read) gives the bits of the same
        // step passed in AdamWParams; p.weight_decay then only says whether the range decays. The
        // learning rate and step count in p are not read.
        const std::size_t n = 10007;
        const auto param0 = random_floats(n, 11), grad0 = gradients(n, 12);
        const auto run = [&](const AdamWParams& p, std::vector<double> block) {
            auto param = param0, grad = grad0;
            std::vector<float> m(n, 0.25f), v(n, 0.5f), copy(n);
            OpContext ctx;
            ops::adamw_update(ctx, view(param), view(grad), view(m), view(v), p, view(copy), DType::BF16, {},
                              block.empty() ? TensorView{} : make_view(block.data(), DType::F64, {step_params::Count}));
            for (const auto* part : {&m, &v, &copy}) param.insert(param.end(), part->begin(), part->end());
            return param;
        };
        for (int64_t s : {int64_t{1}, int64_t{4}, int64_t{1000}}) {
            const AdamWParams p = hyper(s);
            const AdamWConstants k = adamw_constants(p);
            const std::vector<double> block = {k.step_size, k.inv_sqrt_bc2, k.decay, 1024.0};
            AdamWParams stale = p;  // what the block replaces: never read
            stale.lr = 7.0f;
            stale.step = 1;
            MWB_VERIFY_BITWISE(run(stale, block), run(p, {}));
            AdamWParams no_decay = p;
            no_decay.weight_decay = 0.0f;
            stale.weight_decay = 0.0f;
            MWB_VERIFY_BITWISE(run(stale, block), run(no_decay, {}));
        }
        // gradient_scale takes its loss scale from the block the same way.
        double sumsq = 3.0e9;
        float by_arg[2], by_block[2];
        std::vector<double> block = {0, 1, 1, 4096.0};
        OpContext ctx;
        ops::gradient_scale(ctx, view_f32(by_arg, {2}), make_view(&sumsq, DType::F64, {1}), 4096.0, 1.0);
        ops::gradient_scale(ctx, view_f32(by_block, {2}), make_view(&sumsq, DType::F64, {1}), 1.0, 1.0,
                            make_view(block.data(), DType::F64, {step_params::Count}));
        QCOMPARE(std::bit_cast<uint32_t>(by_block[0]), std::bit_cast<uint32_t>(by_arg[0]));
        QCOMPARE(by_block[1], by_arg[1]);
        QVERIFY(by_arg[0] != 1.0f / 1.0f);  // the block's 4096, not the argument's 1, was used
        std::vector<double> three(3);
        std::vector<float> a(8);
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error, ops::adamw_update(ctx, view(a), view(a), view(a), view(a), hyper(1), {}, DType::F32, {},
                                          make_view(three.data(), DType::F64, {3})));
    }

    void adamw_rejects_bad_arguments() {
        std::vector<float> a(8), b(7);
        OpContext ctx;
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::adamw_update(ctx, view(a), view(b), view(a), view(a), hyper(1)));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::adamw_update(ctx, view(a), view(a), view(b), view(a), hyper(1)));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::adamw_update(ctx, view(a), view(a), view(a), view(b), hyper(1)));
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error, ops::adamw_update(ctx, view(a), view(a), view(a), view(a), hyper(1), view(b), DType::BF16));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::adamw_update(ctx, view(a), view(a), view(a), view(a), hyper(0)));
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_optimizer, TestOptimizer)
}  // namespace test_kernels_optimizer
#include "test_optimizer.moc"
