// The CUDA elementwise map (kernels/cuda/elementwise_kernels.cuh) executed on CPU threads by
// cuda_emulation.h, launched as ops_elementwise.cu launches it: the 16-byte aligned bulk with 128-bit
// accesses (V = 4) and the tail one float at a time. Fill, scale and add bit for bit against their
// definitions (including in place and sizes that leave a tail); GELU forward against the float64 tanh
// formula and its backward against central differences of the float64 forward, and both against the
// CPU ops (another exp: to rounding). Grids small enough that the grid-stride loops wrap. No GPU.
#include "cuda_emulation.h"

#include "elementwise_kernels.cuh"

#include "mwb/kernels/ops.h"
#include "support/qt_checks.h"
#include "support/reference.h"

#include <QtTest>

#include <cmath>
#include <vector>

namespace ew = mwb::cuda::elementwise;
namespace emu = mwb::emulation;
using mwb::test::max_rel_error;
using mwb::test::random_floats;

namespace {

/// As the launcher: V = 4 over the multiple-of-4 bulk (the vectors are 16-byte aligned), V = 1 over
/// the tail; 3 blocks of 64 threads, so large n wraps the grid-stride loop.
template <class F>
void map(float* out, const float* a, const float* b, int64_t n, F f) {
    const int64_t bulk = n / 4 * 4;
    if (bulk > 0) emu::launch(3, 1, 64, [&] { ew::k_map<4, uint32_t>(out, a, b, bulk, f); });
    if (n > bulk)
        emu::launch(3, 1, 64, [&] {
            ew::k_map<1, int64_t>(out + bulk, a ? a + bulk : nullptr, b ? b + bulk : nullptr, n - bulk, f);
        });
}

double gelu64(double v) {
    return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}

}  // namespace

class TestElementwiseEmulated : public QObject {
    Q_OBJECT
private slots:
    void fill_scale_add_are_exact() {
        for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1024}, int64_t{5003}}) {
            const std::vector<float> a = random_floats(n, 1), b = random_floats(n, 2);
            std::vector<float> out(n, -1.0f);
            map(out.data(), nullptr, nullptr, n, ew::Fill{2.5f});
            QCOMPARE(out, std::vector<float>(n, 2.5f));
            std::vector<float> x = a, want(n);
            map(x.data(), x.data(), nullptr, n, ew::Scale{-0.75f});  // in place, as ops::scale
            for (int64_t i = 0; i < n; ++i) want[i] = a[i] * -0.75f;
            MWB_VERIFY_BITWISE(x, want);
            std::vector<float> sum = a;
            map(sum.data(), sum.data(), b.data(), n, ew::Add{});  // out aliases a
            for (int64_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
            MWB_VERIFY_BITWISE(sum, want);
        }
    }

    void gelu_matches_float64_and_the_cpu_op() {
        const int64_t n = 2051;  // a tail of 3
        std::vector<float> x = random_floats(n, 3, -8, 8), dout = random_floats(n, 4, -1, 1);
        x[0] = 0.0f;
        x[1] = 30.0f;  // saturated: gelu(x) = x, gelu'(x) = 1
        x[2] = -30.0f;
        std::vector<float> y(n), dx(n);
        map(y.data(), x.data(), nullptr, n, ew::GeluForward{});
        map(dx.data(), dout.data(), x.data(), n, ew::GeluBackward{});
        std::vector<double> y64(n), dx64(n);
        for (int64_t i = 0; i < n; ++i) {
            const double v = x[i], h = 1e-5 * std::max(1.0, std::abs(v));
            y64[i] = gelu64(v);
            dx64[i] = dout[i] * (gelu64(v + h) - gelu64(v - h)) / (2 * h);
        }
        // expf and the float formula, relative to a floor of 1e-3 (gelu and gelu' pass through 0, where
        // the float rounding of the cubic's terms dominates): measured 5.5e-7 forward, 3.1e-6 backward
        // (central differences of the float64 forward are good to ~1e-9).
        MWB_VERIFY_ERROR(max_rel_error(y, y64), 2e-6);
        MWB_VERIFY_ERROR(max_rel_error(dx, dx64), 1e-5);
        std::vector<float> y_cpu(n), dx_cpu(n);
        mwb::OpContext ctx;
        const auto v = [n](std::vector<float>& t) { return mwb::view_f32(t.data(), {n}); };
        mwb::ops::gelu_forward(ctx, v(y_cpu), v(x));
        mwb::ops::gelu_backward(ctx, v(dx_cpu), v(dout), v(x));
        // The CPU's exp_approx against expf, same formula: measured 7.8e-7 and 2.3e-6.
        MWB_VERIFY_ERROR(max_rel_error(y, mwb::test::to_double(y_cpu)), 2e-6);
        MWB_VERIFY_ERROR(max_rel_error(dx, mwb::test::to_double(dx_cpu)), 1e-5);
    }
};

QTEST_APPLESS_MAIN(TestElementwiseEmulated)
#include "test_elementwise_emulated.moc"
