// GEMM and the linear layer against float64 references; gradients against finite differences.
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"
#include "support/threads.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"
#include "mwb/kernels/precision.h"

#include <QtTest>

#include <cblas.h>

#include <cmath>
#include <limits>

namespace test_kernels_linear {

using namespace mwb;
using mwb::test::finite_difference;
using mwb::test::max_rel_error;
using mwb::test::normwise_error;
using mwb::test::random_floats;
using mwb::test::to_double;

namespace {

// y = x·wᵀ + b in float64. x (n, in), w (out, in).
std::vector<double> linear_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                               int64_t n, int64_t in, int64_t out) {
    std::vector<double> y(static_cast<std::size_t>(n * out));
    for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < out; ++o) {
            double s = b.empty() ? 0.0 : b[o];
            for (int64_t k = 0; k < in; ++k) s += x[r * in + k] * w[o * in + k];
            y[r * out + o] = s;
        }
    return y;
}

/// GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. for GPT-2), and its derivative, in float64.
double gelu_tanh(double x) {
    const double c = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}
double gelu_tanh_grad(double x) {
    const double c = std::sqrt(2.0 / M_PI), t = std::tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

double weighted_sum(const std::vector<double>& y, const std::vector<double>& g) {
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * g[i];
    return s;
}

}  // namespace

class TestLinear : public QObject {
    Q_OBJECT
private slots:
    void matmul_all_transposes_data() {
        QTest::addColumn<bool>("ta");
        QTest::addColumn<bool>("tb");
        QTest::newRow("nn") << false << false;
        QTest::newRow("nt") << false << true;
        QTest::newRow("tn") << true << false;
        QTest::newRow("tt") << true << true;
    }
    void matmul_all_transposes() {
        QFETCH(bool, ta);
        QFETCH(bool, tb);
        const int64_t m = 37, n = 29, k = 53;
        auto a = random_floats(m * k, 1), b = random_floats(k * n, 2), c = random_floats(m * n, 3);
        const auto a_at = [&](int64_t i, int64_t j) { return double(ta ? a[j * m + i] : a[i * k + j]); };
        const auto b_at = [&](int64_t i, int64_t j) { return double(tb ? b[j * k + i] : b[i * n + j]); };
        std::vector<double> ref(m * n);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                double s = 0;
                for (int64_t p = 0; p < k; ++p) s += a_at(i, p) * b_at(p, j);
                ref[i * n + j] = 0.5 * s + 2.0 * c[i * n + j];
            }
        OpContext ctx;
        ops::matmul(
            ctx, view_f32(c.data(), {m, n}),
            view_f32(a.data(), ta ? std::initializer_list<int64_t>{k, m} : std::initializer_list<int64_t>{m, k}),
            view_f32(b.data(), tb ? std::initializer_list<int64_t>{n, k} : std::initializer_list<int64_t>{k, n}), ta,
            tb, 0.5f, 2.0f);
        QVERIFY2(normwise_error(c, ref) < 1e-6, qPrintable(QString::number(normwise_error(c, ref))));
    }

    void matmul_long_inner_dimension_data() { matmul_all_transposes_data(); }
    void matmul_long_inner_dimension() {
        // k far longer than m and n (the LM head's dx = dlogits · W over the vocabulary): the GEMM is cut
        // along k, partial products summed in chunk order. Against float64, and the same bits for any
        // thread count.
        QFETCH(bool, ta);
        QFETCH(bool, tb);
        const int64_t m = 96, n = 80, k = 20000;
        auto a = random_floats(m * k, 4), b = random_floats(k * n, 5), c0 = random_floats(m * n, 6);
        // op(A) by rows and op(B) by columns, in float64, so the reference's inner loop is contiguous.
        std::vector<double> ar(m * k), bc(n * k), ref(m * n);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t p = 0; p < k; ++p) ar[i * k + p] = ta ? a[p * m + i] : a[i * k + p];
        for (int64_t j = 0; j < n; ++j)
            for (int64_t p = 0; p < k; ++p) bc[j * k + p] = tb ? b[j * k + p] : b[p * n + j];
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                double s = 0;
                for (int64_t p = 0; p < k; ++p) s += ar[i * k + p] * bc[j * k + p];
                ref[i * n + j] = 0.5 * s + 2.0 * c0[i * n + j];
            }
        const auto run = [&](int threads) {
            mwb::test::ScopedThreads t(threads);
            std::vector<float> c = c0;
            OpContext ctx;
            ops::matmul(
                ctx, view_f32(c.data(), {m, n}),
                view_f32(a.data(), ta ? std::initializer_list<int64_t>{k, m} : std::initializer_list<int64_t>{m, k}),
                view_f32(b.data(), tb ? std::initializer_list<int64_t>{n, k} : std::initializer_list<int64_t>{k, n}),
                ta, tb, 0.5f, 2.0f);
            return c;
        };
        const auto one = run(1);
        QVERIFY2(normwise_error(one, ref) < 1e-6, qPrintable(QString::number(normwise_error(one, ref))));
        MWB_VERIFY_BITWISE(run(2), one);
        MWB_VERIFY_BITWISE(run(3), one);
        // β = 0 (the head's dx): C's old contents are never read, NaN included.
        std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
        OpContext ctx;
        ops::matmul(
            ctx, view_f32(c.data(), {m, n}),
            view_f32(a.data(), ta ? std::initializer_list<int64_t>{k, m} : std::initializer_list<int64_t>{m, k}),
            view_f32(b.data(), tb ? std::initializer_list<int64_t>{n, k} : std::initializer_list<int64_t>{k, n}), ta,
            tb, 0.5f, 0.0f);
        for (int64_t i = 0; i < m * n; ++i) ref[i] -= 2.0 * c0[i];
        QVERIFY2(normwise_error(c, ref) < 1e-6, qPrintable(QString::number(normwise_error(c, ref))));
    }

    void matmul_forward_cut_by_rows() {
        // y = x·Wᵀ with x's panel (m × k) beyond half an L2 is cut by rows (tokens), as the LM head's and
        // fc1's forward: against float64, and the same bits for any thread count.
        const int64_t m = 1024, n = 352, k = 384;
        auto x = random_floats(m * k, 9), w = random_floats(n * k, 10);
        const auto ref = linear_ref(to_double(x), to_double(w), {}, m, k, n);
        const auto run = [&](int threads) {
            mwb::test::ScopedThreads t(threads);
            std::vector<float> y(m * n, std::numeric_limits<float>::quiet_NaN());
            OpContext ctx;
            ops::matmul(ctx, view_f32(y.data(), {m, n}), view_f32(x.data(), {m, k}), view_f32(w.data(), {n, k}),
                        false, true, 1.0f, 0.0f);
            return y;
        };
        const auto one = run(1);
        QVERIFY2(normwise_error(one, ref) < 1e-6, qPrintable(QString::number(normwise_error(one, ref))));
        MWB_VERIFY_BITWISE(run(2), one);
        MWB_VERIFY_BITWISE(run(3), one);
    }

    void matmul_beta_zero_large_output() {
        // A β = 0 product whose C (16.9 MB) is zeroed with streaming stores and then accumulated (β = 1):
        // the same bits as cblas's own β = 0 call, and C's old contents (NaN) never read.
        const int64_t m = 64, n = 66000, k = 24;
        auto a = random_floats(m * k, 7), b = random_floats(n * k, 8);
        std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN()), expect = c;
        OpContext ctx;
        ops::matmul(ctx, view_f32(c.data(), {m, n}), view_f32(a.data(), {m, k}), view_f32(b.data(), {n, k}), false,
                    true, 1.0f, 0.0f);
        {
            mwb::test::ScopedThreads t(1);  // one call, as the product's single chunk is
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f,
                        expect.data(), n);
        }
        MWB_VERIFY_BITWISE(c, expect);
        std::vector<double> ref(m * n);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                double s = 0;
                for (int64_t p = 0; p < k; ++p) s += double(a[i * k + p]) * b[j * k + p];
                ref[i * n + j] = s;
            }
        QVERIFY2(normwise_error(c, ref) < 1e-6, qPrintable(QString::number(normwise_error(c, ref))));
    }

    void matmul_rejects_mismatched_shapes() {
        std::vector<float> a(6), b(6), c(4);
        OpContext ctx;
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::matmul(ctx, view_f32(c.data(), {2, 2}), view_f32(a.data(), {2, 3}),
                                                         view_f32(b.data(), {2, 3}), false, false));
    }

    void linear_forward_and_backward() {
        const int64_t n = 6, in = 5, out = 7;
        auto x = random_floats(n * in, 10), w = random_floats(out * in, 11), b = random_floats(out, 12);
        auto dy = random_floats(n * out, 13);
        std::vector<float> y(n * out), dx(n * in), dw(out * in, 0.25f), db(out, -0.5f);
        OpContext ctx;
        ops::linear_forward(ctx, view_f32(y.data(), {n, out}), view_f32(x.data(), {n, in}),
                            view_f32(w.data(), {out, in}), view_f32(b.data(), {out}));
        const auto xd = to_double(x), wd = to_double(w), bd = to_double(b), gd = to_double(dy);
        QVERIFY(max_rel_error(y, linear_ref(xd, wd, bd, n, in, out)) < 1e-5);

        ops::linear_backward(ctx, view_f32(dx.data(), {n, in}), view_f32(dw.data(), {out, in}),
                             view_f32(db.data(), {out}), view_f32(dy.data(), {n, out}), view_f32(x.data(), {n, in}),
                             view_f32(w.data(), {out, in}));
        const auto fx =
            finite_difference(xd, [&](const auto& v) { return weighted_sum(linear_ref(v, wd, bd, n, in, out), gd); });
        auto fw =
            finite_difference(wd, [&](const auto& v) { return weighted_sum(linear_ref(xd, v, bd, n, in, out), gd); });
        auto fb =
            finite_difference(bd, [&](const auto& v) { return weighted_sum(linear_ref(xd, wd, v, n, in, out), gd); });
        for (auto& v : fw) v += 0.25;  // parameter gradients accumulate onto what was there
        for (auto& v : fb) v -= 0.5;
        QVERIFY2(max_rel_error(dx, fx) < 1e-5, "dx");
        QVERIFY2(max_rel_error(dw, fw) < 1e-5, "dw");
        QVERIFY2(max_rel_error(db, fb) < 1e-5, "db");
    }

    // The MLP's fused ops (fc1 + GELU forward; fc2's backward through GELU' with fc1's bias gradient)
    // against float64: pre = x·w1ᵀ + b1, act = gelu(pre); dpre = (dy·w2)·gelu'(pre), dpre_bias += Σ dpre,
    // dw2 += dyᵀ·act, db2 += Σ dy.
    void mlp_gelu_ops_match_float64() {
        const int64_t n = 9, H = 6, F = 10;
        auto x = random_floats(n * H, 30, -2, 2), w1 = random_floats(F * H, 31), b1 = random_floats(F, 32);
        auto w2 = random_floats(H * F, 33), dy = random_floats(n * H, 34);
        std::vector<float> pre(n * F), act(n * F), dpre(n * F), dpre_bias(F, 0.5f), dw2(H * F, -0.25f), db2(H, 1.0f);
        OpContext ctx;
        ops::linear_gelu_forward(ctx, view_f32(act.data(), {n, F}), view_f32(pre.data(), {n, F}),
                                 view_f32(x.data(), {n, H}), view_f32(w1.data(), {F, H}), view_f32(b1.data(), {F}));
        const std::vector<double> pre_ref = linear_ref(to_double(x), to_double(w1), to_double(b1), n, H, F);
        std::vector<double> act_ref(pre_ref.size());
        for (std::size_t i = 0; i < pre_ref.size(); ++i) act_ref[i] = gelu_tanh(pre_ref[i]);
        MWB_VERIFY_ERROR(normwise_error(pre, pre_ref), 1e-6);
        MWB_VERIFY_ERROR(normwise_error(act, act_ref), 1e-6);

        ops::linear_backward_gelu(ctx, view_f32(dpre.data(), {n, F}), view_f32(dpre_bias.data(), {F}),
                                  view_f32(dw2.data(), {H, F}), view_f32(db2.data(), {H}), view_f32(dy.data(), {n, H}),
                                  view_f32(act.data(), {n, F}), view_f32(w2.data(), {H, F}),
                                  view_f32(pre.data(), {n, F}));
        std::vector<double> dpre_ref(n * F), dpre_bias_ref(F, 0.5), dw2_ref(H * F, -0.25), db2_ref(H, 1.0);
        for (int64_t r = 0; r < n; ++r)
            for (int64_t f = 0; f < F; ++f) {
                double s = 0;
                for (int64_t h = 0; h < H; ++h) s += double(dy[r * H + h]) * w2[h * F + f];
                dpre_ref[r * F + f] = s * gelu_tanh_grad(pre[r * F + f]);
                dpre_bias_ref[f] += dpre_ref[r * F + f];
            }
        for (int64_t h = 0; h < H; ++h)
            for (int64_t r = 0; r < n; ++r) {
                db2_ref[h] += dy[r * H + h];
                for (int64_t f = 0; f < F; ++f) dw2_ref[h * F + f] += double(dy[r * H + h]) * act[r * F + f];
            }
        MWB_VERIFY_ERROR(normwise_error(dpre, dpre_ref), 1e-5);
        MWB_VERIFY_ERROR(normwise_error(dpre_bias, dpre_bias_ref), 1e-5);
        MWB_VERIFY_ERROR(normwise_error(dw2, dw2_ref), 1e-5);
        MWB_VERIFY_ERROR(normwise_error(db2, db2_ref), 1e-5);
    }

    // With 16-bit storage the pre-activation and its gradient come out as bf16 values, rounded where a
    // 16-bit store would round them: the same bits as the unfused sequence the model ran before.
    void mlp_gelu_ops_round_to_the_storage() {
        const int64_t n = 7, H = 8, F = 12;
        auto x = random_floats(n * H, 40), w1 = random_floats(F * H, 41), w2 = random_floats(H * F, 42);
        auto dy = random_floats(n * H, 43);
        std::vector<float> pre(n * F), act(n * F), dpre(n * F), dw2(H * F), db(F);
        std::vector<float> pre_u(n * F), act_u(n * F), dpre_u(n * F), dw2_u(H * F), db_u(F);
        OpContext ctx;
        const auto v = [](std::vector<float>& d, int64_t r, int64_t c) { return view_f32(d.data(), {r, c}); };
        ops::linear_gelu_forward(ctx, v(act, n, F), v(pre, n, F), v(x, n, H), v(w1, F, H), {}, DType::BF16);
        ops::linear_forward(ctx, v(pre_u, n, F), v(x, n, H), v(w1, F, H), {});
        ops::round_to(ctx, v(pre_u, n, F), DType::BF16);
        ops::gelu_forward(ctx, v(act_u, n, F), v(pre_u, n, F));
        QCOMPARE(pre, pre_u);
        QCOMPARE(act, act_u);
        for (float p : pre) QCOMPARE(round_to_bf16(p), p);

        ops::linear_backward_gelu(ctx, v(dpre, n, F), view_f32(db.data(), {F}), v(dw2, H, F), {}, v(dy, n, H),
                                  v(act, n, F), v(w2, H, F), v(pre, n, F), DType::BF16);
        ops::linear_backward(ctx, v(dpre_u, n, F), v(dw2_u, H, F), {}, v(dy, n, H), v(act_u, n, F), v(w2, H, F));
        ops::round_to(ctx, v(dpre_u, n, F), DType::BF16);
        ops::gelu_backward(ctx, v(dpre_u, n, F), v(dpre_u, n, F), v(pre_u, n, F));
        ops::round_to(ctx, v(dpre_u, n, F), DType::BF16);
        std::vector<float> dw1_u(F * H);  // fc1's backward, as the model ran it: only its bias gradient is compared
        ops::linear_backward(ctx, {}, v(dw1_u, F, H), view_f32(db_u.data(), {F}), v(dpre_u, n, F), v(x, n, H),
                             v(w1, F, H));
        QCOMPARE(dpre, dpre_u);
        QCOMPARE(dw2, dw2_u);
        QCOMPARE(db, db_u);
        for (float d : dpre) QCOMPARE(round_to_bf16(d), d);
    }

    void linear_without_bias_overwrites_y() {
        // x as (S, B, in): the op sees it as N = S·B rows. y starts as NaN: beta = 0 must not read it.
        const int64_t s = 3, b = 2, in = 9, out = 4, n = s * b;
        auto x = random_floats(n * in, 20), w = random_floats(out * in, 21);
        std::vector<float> y(n * out, std::nanf(""));
        OpContext ctx;
        ops::linear_forward(ctx, view_f32(y.data(), {s, b, out}), view_f32(x.data(), {s, b, in}),
                            view_f32(w.data(), {out, in}), TensorView{});
        // A dot product of 9 terms in float: ~9 ulp relative to the terms' magnitude, normwise 1e-6.
        MWB_VERIFY_ERROR(normwise_error(y, linear_ref(to_double(x), to_double(w), {}, n, in, out)), 1e-6);
    }

    void linear_backward_accumulates_dx_and_skips_empty_outputs() {
        const int64_t n = 5, in = 6, out = 3;
        auto x = random_floats(n * in, 30), w = random_floats(out * in, 31), dy = random_floats(n * out, 32);
        const auto dx0 = random_floats(n * in, 33), dw0 = random_floats(out * in, 34);
        // dx += dy·w on top of what was there (accumulate_dx), dw += dyᵀ·x; float64 references.
        std::vector<double> ref_dx(n * in), ref_dw(out * in);
        for (int64_t r = 0; r < n; ++r)
            for (int64_t k = 0; k < in; ++k) {
                double s = dx0[r * in + k];
                for (int64_t o = 0; o < out; ++o) s += double(dy[r * out + o]) * w[o * in + k];
                ref_dx[r * in + k] = s;
            }
        for (int64_t o = 0; o < out; ++o)
            for (int64_t k = 0; k < in; ++k) {
                double s = dw0[o * in + k];
                for (int64_t r = 0; r < n; ++r) s += double(dy[r * out + o]) * x[r * in + k];
                ref_dw[o * in + k] = s;
            }
        OpContext ctx;
        auto dx = dx0, dw = dw0;
        ops::linear_backward(ctx, view_f32(dx.data(), {n, in}), view_f32(dw.data(), {out, in}), TensorView{},
                             view_f32(dy.data(), {n, out}), view_f32(x.data(), {n, in}), view_f32(w.data(), {out, in}),
                             /*accumulate_dx=*/true);
        MWB_VERIFY_ERROR(normwise_error(dx, ref_dx), 1e-6);  // sums of <= 7 float terms
        MWB_VERIFY_ERROR(normwise_error(dw, ref_dw), 1e-6);

        // No dx (the first layer's input needs none) and no bias: only dw moves, by the same amount again.
        dw = dw0;
        ops::linear_backward(ctx, TensorView{}, view_f32(dw.data(), {out, in}), TensorView{},
                             view_f32(dy.data(), {n, out}), view_f32(x.data(), {n, in}), view_f32(w.data(), {out, in}));
        MWB_VERIFY_ERROR(normwise_error(dw, ref_dw), 1e-6);
    }

    void linear_does_not_depend_on_threads() {
        // Big enough for OpenBLAS to split the GEMMs across threads (its threshold is ~65k multiply-adds).
        const int64_t n = 192, in = 160, out = 224;
        auto x = random_floats(n * in, 40), w = random_floats(out * in, 41), b = random_floats(out, 42);
        auto dy = random_floats(n * out, 43);
        const auto run = [&](int threads) {
            mwb::test::ScopedThreads t(threads);
            std::vector<float> y(n * out), dx(n * in), dw(out * in, 0.0f), db(out, 0.0f);
            OpContext ctx;
            ops::linear_forward(ctx, view_f32(y.data(), {n, out}), view_f32(x.data(), {n, in}),
                                view_f32(w.data(), {out, in}), view_f32(b.data(), {out}));
            ops::linear_backward(ctx, view_f32(dx.data(), {n, in}), view_f32(dw.data(), {out, in}),
                                 view_f32(db.data(), {out}), view_f32(dy.data(), {n, out}), view_f32(x.data(), {n, in}),
                                 view_f32(w.data(), {out, in}));
            y.insert(y.end(), dx.begin(), dx.end());
            y.insert(y.end(), dw.begin(), dw.end());
            y.insert(y.end(), db.begin(), db.end());
            return y;
        };
        const auto one = run(1), two = run(2);
        MWB_VERIFY_BITWISE(two, one);
    }

    void linear_rejects_mismatched_shapes() {
        std::vector<float> x(12), w(12), b(5), y(12), dy(12), dx(10), dw(12);
        OpContext ctx;
        // w (out=3, in=4) against x (3, 4): fine shapes first, then one wrong at a time.
        QVERIFY_THROWS_EXCEPTION(mwb::Error,
                                 ops::linear_forward(ctx, view_f32(y.data(), {3, 3}), view_f32(x.data(), {3, 4}),
                                                     view_f32(w.data(), {4, 3}), TensorView{}));
        QVERIFY_THROWS_EXCEPTION(mwb::Error,
                                 ops::linear_forward(ctx, view_f32(y.data(), {3, 3}), view_f32(x.data(), {3, 4}),
                                                     view_f32(w.data(), {3, 4}), view_f32(b.data(), {5})));
        QVERIFY_THROWS_EXCEPTION(mwb::Error,
                                 ops::linear_forward(ctx, view_f32(y.data(), {4, 3}), view_f32(x.data(), {3, 4}),
                                                     view_f32(w.data(), {3, 4}), TensorView{}));
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error,
            ops::linear_backward(ctx, view_f32(dx.data(), {10}), view_f32(dw.data(), {3, 4}), TensorView{},
                                 view_f32(dy.data(), {3, 3}), view_f32(x.data(), {3, 4}), view_f32(w.data(), {3, 4})));
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error,
            ops::linear_backward(ctx, TensorView{}, view_f32(dw.data(), {4, 3}), TensorView{},
                                 view_f32(dy.data(), {3, 3}), view_f32(x.data(), {3, 4}), view_f32(w.data(), {3, 4})));
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error,
            ops::linear_backward(ctx, TensorView{}, view_f32(dw.data(), {3, 4}), view_f32(b.data(), {5}),
                                 view_f32(dy.data(), {3, 3}), view_f32(x.data(), {3, 4}), view_f32(w.data(), {3, 4})));
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_linear, TestLinear)
}  // namespace test_kernels_linear
#include "test_linear.moc"
