// GELU (GPT-2's tanh approximation): forward against the float64 formula, backward against central finite
// differences of it, and saturation at large |x| without NaN. SwiGLU (silu(gate)·up over rows [gate | up])
// likewise against float64 and finite differences.
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"

#include <QtTest>

#include <cmath>
#include <limits>
#include <numbers>

namespace test_kernels_activation {

using namespace mwb;
using mwb::test::max_rel_error;
using mwb::test::random_floats;

namespace {

/// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) in float64.
double gelu_ref(double x) {
    const double k = std::sqrt(2.0 / std::numbers::pi);
    return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

/// d gelu_ref / dx by central differences (h = 1e-6: truncation ~1e-12, rounding ~1e-10).
double gelu_grad_fd(double x) {
    const double h = 1e-6;
    return (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h);
}

/// Random values over the curved part of GELU, plus zero and a few points near its minimum (x ≈ -0.75,
/// where the derivative changes sign).
std::vector<float> gelu_inputs() {
    auto x = random_floats(4099, 1, -6.0f, 6.0f);
    for (float v : {0.0f, -0.0f, 1e-6f, -1e-6f, -0.75179f, -0.7518f, -0.75f, 1.0f, -1.0f}) x.push_back(v);
    return x;
}

/// silu(g)·u = g·u / (1 + e^-g) in float64.
double swiglu_ref(double g, double u) {
    return g * u / (1.0 + std::exp(-g));
}

}  // namespace

class TestActivation : public QObject {
    Q_OBJECT
private slots:
    void gelu_forward_matches_float64() {
        auto x = gelu_inputs();
        std::vector<float> out(x.size(), std::nanf(""));
        OpContext ctx;
        ops::gelu_forward(ctx, view_f32(out.data(), {int64_t(x.size())}), view_f32(x.data(), {int64_t(x.size())}));
        std::vector<double> ref(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) ref[i] = gelu_ref(x[i]);
        // In float, 1 + tanh(u) for u < 0 cancels: a few ulp of 1 absolute, i.e. ~1e-7·|x| in GELU, which is
        // large relative to GELU's tiny values for x < -3 (2e-4 at x = -4.5; PyTorch's float GELU has the
        // same cancellation). So the error is measured as |err| / (|ref| + 1): relative above 1, absolute
        // below. Measured 3e-7.
        MWB_VERIFY_ERROR(max_rel_error(out, ref, 1.0), 1e-6);
    }

    void gelu_backward_matches_finite_differences() {
        auto x = gelu_inputs();
        const auto n = int64_t(x.size());
        auto dout = random_floats(x.size(), 2, -2.0f, 2.0f);
        std::vector<float> dx(x.size(), std::nanf(""));
        OpContext ctx;
        ops::gelu_backward(ctx, view_f32(dx.data(), {n}), view_f32(dout.data(), {n}), view_f32(x.data(), {n}));
        std::vector<double> ref(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) ref[i] = double(dout[i]) * gelu_grad_fd(x[i]);
        // The float derivative has the same absolute-error structure as the forward, amplified: its term
        // 0.5·x·(1 - t²)·du multiplies the cancelled (1 - t²) (~2 ulp of 1) by ~9 at |x| = 5, so up to ~2e-6
        // absolute per unit of dout in the negative tail (PyTorch's float formula is the same). It also
        // crosses zero at x ≈ -0.75: |err| / (|ref| + 1) again. Measured 3.6e-6 with |dout| <= 2.
        MWB_VERIFY_ERROR(max_rel_error(dx, ref, 1.0), 1e-5);

        // dx may alias dout.
        auto inplace = dout;
        ops::gelu_backward(ctx, view_f32(inplace.data(), {n}), view_f32(inplace.data(), {n}), view_f32(x.data(), {n}));
        MWB_VERIFY_BITWISE(inplace, dx);
    }

    void gelu_saturates_without_nan() {
        // Far from zero GELU is x (x > 0) or 0 (x < 0) and its derivative 1 or 0; x³ overflows float from
        // |x| ~ 7e12 and x² from ~1.8e19, which must not turn into inf·0 = NaN.
        const float fmax = std::numeric_limits<float>::max();
        std::vector<float> x;
        for (float v : {10.0f, 30.0f, 100.0f, 1e4f, 1e10f, 1e13f, 1e19f, 1e20f, 1e30f, fmax}) {
            x.push_back(v);
            x.push_back(-v);
        }
        const auto n = int64_t(x.size());
        std::vector<float> out(x.size()), dx(x.size()), dout(x.size(), 1.0f);
        OpContext ctx;
        ops::gelu_forward(ctx, view_f32(out.data(), {n}), view_f32(x.data(), {n}));
        ops::gelu_backward(ctx, view_f32(dx.data(), {n}), view_f32(dout.data(), {n}), view_f32(x.data(), {n}));
        QStringList wrong;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const bool pos = x[i] > 0;
            // gelu(-10) ≈ -1e-37 in float64: 0 within 1e-30 is exact for our purposes.
            if (!(pos ? out[i] == x[i] : std::abs(out[i]) < 1e-30f))
                wrong << QStringLiteral("gelu(%1) = %2").arg(double(x[i])).arg(double(out[i]));
            if (!(pos ? dx[i] == 1.0f : std::abs(dx[i]) < 1e-30f))
                wrong << QStringLiteral("gelu'(%1) = %2").arg(double(x[i])).arg(double(dx[i]));
        }
        QVERIFY2(wrong.isEmpty(), qPrintable(wrong.join(", ")));
    }

    void swiglu_matches_float64_and_finite_differences() {
        const int64_t N = 37, F = 53;  // rows [gate (F) | up (F)]
        auto x = random_floats(N * 2 * F, 3, -8.0f, 8.0f);
        auto dout = random_floats(N * F, 4, -2.0f, 2.0f);
        std::vector<float> out(N * F, std::nanf("")), dx(N * 2 * F, std::nanf(""));
        OpContext ctx;
        ops::swiglu_forward(ctx, view_f32(out.data(), {N, F}), view_f32(x.data(), {N, 2 * F}));
        ops::swiglu_backward(ctx, view_f32(dx.data(), {N, 2 * F}), view_f32(dout.data(), {N, F}),
                             view_f32(x.data(), {N, 2 * F}));
        std::vector<double> ref(N * F), dref(N * 2 * F);
        const double h = 1e-6;
        for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < F; ++i) {
                const double g = x[n * 2 * F + i], u = x[n * 2 * F + F + i], d = dout[n * F + i];
                ref[n * F + i] = swiglu_ref(g, u);
                dref[n * 2 * F + i] = d * (swiglu_ref(g + h, u) - swiglu_ref(g - h, u)) / (2 * h);
                dref[n * 2 * F + F + i] = d * (swiglu_ref(g, u + h) - swiglu_ref(g, u - h)) / (2 * h);
            }
        // exp_approx (a few ulp) and three float products: ~1e-7 relative; near zero (g ≈ 0 or u ≈ 0)
        // absolute, hence the floor of 1.
        MWB_VERIFY_ERROR(max_rel_error(out, ref, 1.0), 1e-6);
        MWB_VERIFY_ERROR(max_rel_error(dx, dref, 1.0), 1e-5);
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error, ops::swiglu_forward(ctx, view_f32(out.data(), {N, F - 1}), view_f32(x.data(), {N, 2 * F})));
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error, ops::swiglu_backward(ctx, view_f32(dx.data(), {N, 2 * F - 2}), view_f32(dout.data(), {N, F}),
                                             view_f32(x.data(), {N, 2 * F})));
    }

    void mismatched_shapes_throw() {
        std::vector<float> a(6), b(5), c(6);
        OpContext ctx;
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::gelu_forward(ctx, view_f32(a.data(), {6}), view_f32(b.data(), {5})));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::gelu_backward(ctx, view_f32(a.data(), {6}), view_f32(b.data(), {5}),
                                                                view_f32(c.data(), {6})));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::gelu_backward(ctx, view_f32(a.data(), {6}), view_f32(c.data(), {6}),
                                                                view_f32(b.data(), {5})));
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_activation, TestActivation)
}  // namespace test_kernels_activation
#include "test_activation.moc"
