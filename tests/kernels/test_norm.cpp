// LayerNorm and RMSNorm: forward against float64, backward (dx, dw, db) against central finite differences
// of the float64 forward, accumulation semantics, and results that do not depend on the thread count.
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"
#include "support/threads.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"
#include "mwb/kernels/precision.h"

#include <QtTest>

#include <cmath>
#include <cstring>

namespace test_kernels_norm {

using namespace mwb;
using mwb::test::finite_difference;
using mwb::test::max_rel_error;
using mwb::test::normwise_error;
using mwb::test::random_floats;
using mwb::test::to_double;

namespace {

constexpr float kEps = 1e-5f;

struct NormRef {
    std::vector<double> out, mean, rstd;
};

/// LayerNorm (rms = false) or RMSNorm (rms = true, b ignored) of rows × h in float64.
NormRef norm_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b, int64_t rows,
                 int64_t h, bool rms) {
    NormRef r{std::vector<double>(x.size()), std::vector<double>(rows), std::vector<double>(rows)};
    for (int64_t i = 0; i < rows; ++i) {
        const double* xr = x.data() + i * h;
        double mu = 0;
        if (!rms) {
            for (int64_t c = 0; c < h; ++c) mu += xr[c];
            mu /= double(h);
        }
        double var = 0;
        for (int64_t c = 0; c < h; ++c) var += (xr[c] - mu) * (xr[c] - mu);
        const double rs = 1.0 / std::sqrt(var / double(h) + double(kEps));
        for (int64_t c = 0; c < h; ++c) r.out[i * h + c] = (xr[c] - mu) * rs * w[c] + (rms ? 0.0 : b[c]);
        r.mean[i] = mu;
        r.rstd[i] = rs;
    }
    return r;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

/// Rows with different means and spreads, so mean subtraction and rstd both matter.
std::vector<float> norm_input(int64_t rows, int64_t h, uint32_t seed) {
    auto x = random_floats(rows * h, seed);
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t c = 0; c < h; ++c) x[i * h + c] = x[i * h + c] * (0.5f + 0.3f * float(i)) + 0.4f * float(i) - 1.0f;
    return x;
}

struct Case {
    int64_t rows = 6, h = 70;  // h > 64: parameter gradients span two column blocks
    std::vector<float> x, w, b, g;
    Case(int64_t rows_, int64_t h_, uint32_t seed) : rows(rows_), h(h_) {
        x = norm_input(rows, h, seed);
        w = random_floats(h, seed + 1, 0.5f, 1.5f);
        b = random_floats(h, seed + 2);
        g = random_floats(rows * h, seed + 3);  // upstream gradient: loss = Σ out·g
    }
    TensorView xv() { return view_f32(x.data(), {rows, h}); }
    TensorView gv() { return view_f32(g.data(), {rows, h}); }
};

/// Forward then backward of either norm on the CPU ops; dx, dw, db start from the given values.
struct NormRun {
    std::vector<float> out, mean, rstd, dx, dw, db;
};
NormRun run_norm(Case& c, bool rms, bool accumulate_dx, std::vector<float> dx, std::vector<float> dw,
                 std::vector<float> db) {
    NormRun r{std::vector<float>(c.x.size(), std::nanf("")),
              std::vector<float>(c.rows, std::nanf("")),
              std::vector<float>(c.rows, std::nanf("")),
              std::move(dx),
              std::move(dw),
              std::move(db)};
    OpContext ctx;
    const TensorView wv = view_f32(c.w.data(), {c.h}), bv = view_f32(c.b.data(), {c.h});
    const TensorView out = view_f32(r.out.data(), {c.rows, c.h}), rstd = view_f32(r.rstd.data(), {c.rows});
    const TensorView dxv = view_f32(r.dx.data(), {c.rows, c.h}), dwv = view_f32(r.dw.data(), {c.h});
    if (rms) {
        ops::rmsnorm_forward(ctx, out, rstd, c.xv(), wv, kEps);
        ops::rmsnorm_backward(ctx, dxv, dwv, c.gv(), c.xv(), rstd, wv, accumulate_dx);
    } else {
        const TensorView mean = view_f32(r.mean.data(), {c.rows});
        ops::layernorm_forward(ctx, out, mean, rstd, c.xv(), wv, bv, kEps);
        ops::layernorm_backward(ctx, dxv, dwv, view_f32(r.db.data(), {c.h}), c.gv(), c.xv(), mean, rstd, wv,
                                accumulate_dx);
    }
    return r;
}

/// A tensor's bytes in dtype dt (f32, bf16 or f16), filled from float values by the CPU's store rounding.
struct Bytes {
    DType dt;
    std::vector<unsigned char> b;
    Bytes(DType d, const std::vector<float>& v) : dt(d), b(v.size() * dtype_size(d)) {
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (dt == DType::F32) {
                std::memcpy(&b[4 * i], &v[i], 4);
            } else {
                const uint16_t h = dt == DType::BF16 ? bf16_bits(v[i]) : fp16_bits(v[i]);
                std::memcpy(&b[2 * i], &h, 2);
            }
        }
    }
    TensorView view(std::initializer_list<int64_t> shape) { return make_view(b.data(), dt, shape); }
};

std::vector<float> concat(const NormRun& r) {
    std::vector<float> v = r.out;
    for (const auto* part : {&r.mean, &r.rstd, &r.dx, &r.dw, &r.db}) v.insert(v.end(), part->begin(), part->end());
    return v;
}

}  // namespace

class TestNorm : public QObject {
    Q_OBJECT
private slots:
    void forward_matches_float64_data() {
        QTest::addColumn<bool>("rms");
        QTest::newRow("layernorm") << false;
        QTest::newRow("rmsnorm") << true;
    }
    void forward_matches_float64() {
        QFETCH(bool, rms);
        Case c(9, 130, 1);
        const NormRun got = run_norm(c, rms, false, std::vector<float>(c.x.size()), std::vector<float>(c.h, 0.0f),
                                     std::vector<float>(c.h, 0.0f));
        const NormRef ref = norm_ref(to_double(c.x), to_double(c.w), to_double(c.b), c.rows, c.h, rms);
        // Row statistics are float sums of 130 terms: a few ulp each, 1e-6 relative. out = x̂·w + b can cancel,
        // so it is compared normwise per tensor (its error is a few ulp of |x̂·w| + |b|).
        MWB_VERIFY_ERROR(max_rel_error(got.rstd, ref.rstd), 1e-6);
        if (!rms) MWB_VERIFY_ERROR(normwise_error(got.mean, ref.mean), 1e-6);
        MWB_VERIFY_ERROR(normwise_error(got.out, ref.out), 1e-6);
    }

    void backward_matches_finite_differences_data() {
        QTest::addColumn<bool>("rms");
        QTest::newRow("layernorm") << false;
        QTest::newRow("rmsnorm") << true;
    }
    void backward_matches_finite_differences() {
        QFETCH(bool, rms);
        Case c(6, 70, 2);
        const auto dw0 = random_floats(c.h, 20), db0 = random_floats(c.h, 21);  // parameter grads accumulate
        const NormRun got = run_norm(c, rms, false, std::vector<float>(c.x.size(), std::nanf("")), dw0, db0);

        const auto xd = to_double(c.x), wd = to_double(c.w), bd = to_double(c.b), gd = to_double(c.g);
        const auto loss = [&](const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>& b) {
            return dot(norm_ref(x, w, b, c.rows, c.h, rms).out, gd);
        };
        const auto fx = finite_difference(xd, [&](const auto& v) { return loss(v, wd, bd); });
        auto fw = finite_difference(wd, [&](const auto& v) { return loss(xd, v, bd); });
        auto fb = finite_difference(bd, [&](const auto& v) { return loss(xd, wd, v); });
        for (int64_t i = 0; i < c.h; ++i) {
            fw[i] += dw0[i];
            fb[i] += db0[i];
        }
        // Central differences with h = 1e-6 in float64 are good to ~1e-9. The op works in float from float
        // statistics: dx = rstd·(g·w - mean(g·w) - x̂·mean(g·w·x̂)) cancels, so its elements are compared
        // normwise; dw, db are float sums over 6 rows of O(1) terms. Measured ~1e-7 for all three: 2e-6
        // leaves room for another summation order (other BLAS or vector width) but not for a wrong term.
        MWB_VERIFY_ERROR(normwise_error(got.dx, fx), 2e-6);
        MWB_VERIFY_ERROR(normwise_error(got.dw, fw), 2e-6);
        if (!rms) MWB_VERIFY_ERROR(normwise_error(got.db, fb), 2e-6);
    }

    void backward_accumulates_dx_only_when_asked_data() {
        QTest::addColumn<bool>("rms");
        QTest::newRow("layernorm") << false;
        QTest::newRow("rmsnorm") << true;
    }
    void backward_accumulates_dx_only_when_asked() {
        QFETCH(bool, rms);
        Case c(5, 33, 3);
        const auto dx0 = random_floats(c.x.size(), 30);
        const std::vector<float> zeros(c.h, 0.0f);
        // Overwrite: whatever dx held (NaN here) is gone. Accumulate: the same gradient lands on dx0, and the
        // parameter gradients add up over two calls.
        const NormRun fresh = run_norm(c, rms, false, std::vector<float>(c.x.size(), std::nanf("")), zeros, zeros);
        const NormRun acc = run_norm(c, rms, true, dx0, fresh.dw, fresh.db);
        std::vector<double> want_dx(c.x.size()), want_dw(c.h), want_db(c.h);
        for (std::size_t i = 0; i < want_dx.size(); ++i) want_dx[i] = double(dx0[i]) + fresh.dx[i];
        for (int64_t i = 0; i < c.h; ++i) {
            want_dw[i] = 2.0 * fresh.dw[i];
            want_db[i] = 2.0 * fresh.db[i];
        }
        // One float add on top of the same float gradient: within half an ulp of the float64 sum.
        MWB_VERIFY_ERROR(normwise_error(acc.dx, want_dx), 1e-7);
        MWB_VERIFY_ERROR(normwise_error(acc.dw, want_dw), 1e-7);
        if (!rms) MWB_VERIFY_ERROR(normwise_error(acc.db, want_db), 1e-7);
    }

    void backward_may_overwrite_dout_data() {
        QTest::addColumn<bool>("rms");
        QTest::newRow("layernorm") << false;
        QTest::newRow("rmsnorm") << true;
    }
    void backward_may_overwrite_dout() {
        // norm.cpp computes the parameter gradients before dx so that dx may alias dout (the gradient buffer
        // reused in place): the result must be the same as with separate buffers.
        QFETCH(bool, rms);
        Case c(7, 90, 5);
        const std::vector<float> zeros(c.h, 0.0f);
        const NormRun separate = run_norm(c, rms, false, std::vector<float>(c.x.size()), zeros, zeros);
        std::vector<float> mean(c.rows), rstd(c.rows), out(c.x.size()), dw(c.h, 0.0f), db(c.h, 0.0f);
        auto g = c.g;  // becomes dx
        OpContext ctx;
        const TensorView wv = view_f32(c.w.data(), {c.h}), gv = view_f32(g.data(), {c.rows, c.h});
        if (rms) {
            ops::rmsnorm_forward(ctx, view_f32(out.data(), {c.rows, c.h}), view_f32(rstd.data(), {c.rows}), c.xv(), wv,
                                 kEps);
            ops::rmsnorm_backward(ctx, gv, view_f32(dw.data(), {c.h}), gv, c.xv(), view_f32(rstd.data(), {c.rows}), wv,
                                  false);
        } else {
            ops::layernorm_forward(ctx, view_f32(out.data(), {c.rows, c.h}), view_f32(mean.data(), {c.rows}),
                                   view_f32(rstd.data(), {c.rows}), c.xv(), wv, view_f32(c.b.data(), {c.h}), kEps);
            ops::layernorm_backward(ctx, gv, view_f32(dw.data(), {c.h}), view_f32(db.data(), {c.h}), gv, c.xv(),
                                    view_f32(mean.data(), {c.rows}), view_f32(rstd.data(), {c.rows}), wv, false);
        }
        MWB_VERIFY_BITWISE(g, separate.dx);
        MWB_VERIFY_BITWISE(dw, separate.dw);
        if (!rms) MWB_VERIFY_BITWISE(db, separate.db);
    }

    void results_do_not_depend_on_threads_data() {
        QTest::addColumn<bool>("rms");
        QTest::newRow("layernorm") << false;
        QTest::newRow("rmsnorm") << true;
    }
    void results_do_not_depend_on_threads() {
        QFETCH(bool, rms);
        Case c(37, 300, 4);  // 5 column blocks and an odd row count: uneven splits for 2 and 3 threads
        const auto run = [&](int threads) {
            mwb::test::ScopedThreads t(threads);
            return concat(run_norm(c, rms, false, std::vector<float>(c.x.size()), std::vector<float>(c.h, 0.0f),
                                   std::vector<float>(c.h, 0.0f)));
        };
        const auto one = run(1), two = run(2), three = run(3);
        MWB_VERIFY_BITWISE(two, one);
        MWB_VERIFY_BITWISE(three, one);
    }

    /// bias_dropout_add_norm_forward against the two ops it fuses (its contract: the same bits), over the
    /// storages a run uses (out, residual and norm_out in f32/bf16/f16; x f32, the row-parallel sum, or
    /// out's dtype; bias and weights f32 or 16-bit), both norms, with and without bias, p = 0 and p > 0
    /// at an element offset that is not a multiple of four, rows longer than one run of dropout
    /// multipliers (1024), and out written over the residual.
    void fused_residual_norm_is_the_two_ops_bitwise_data() {
        QTest::addColumn<int>("out_dtype");
        QTest::addColumn<bool>("x_f32");
        QTest::addColumn<bool>("weights_16bit");
        QTest::addColumn<int>("h");
        for (DType dt : {DType::F32, DType::BF16, DType::F16})
            for (bool x_f32 : {true, false})
                for (bool w16 : {false, true}) {
                    if (dt == DType::F32 && (!x_f32 || w16)) continue;
                    for (int h : {200, 1030})
                        QTest::addRow("%s x=%s w=%s h=%d", dtype_name(dt), x_f32 ? "f32" : "out's", w16 ? "16" : "f32",
                                      h)
                            << int(dt) << x_f32 << w16 << h;
                }
    }
    void fused_residual_norm_is_the_two_ops_bitwise() {
        QFETCH(int, out_dtype);
        QFETCH(bool, x_f32);
        QFETCH(bool, weights_16bit);
        QFETCH(int, h);
        const DType dt = static_cast<DType>(out_dtype), xt = x_f32 ? DType::F32 : dt;
        const DType wt = weights_16bit ? dt : DType::F32;
        const int64_t rows = 7, n = rows * h;
        const std::vector<float> res_v = norm_input(rows, h, 11), x_v = random_floats(n, 12),
                                 bias_v = random_floats(h, 13), w_v = random_floats(h, 14),
                                 b_v = random_floats(h, 15);
        const RngStream rng{21, 5};
        const int64_t offset = 6;  // element 0 is lane 2 of its Philox group
        OpContext ctx;
        for (bool rms : {false, true})
            for (bool with_bias : {false, true})
                for (float p : {0.0f, 0.15f})
                    for (bool in_place : {false, true}) {
                        const QString what = QStringLiteral("%1 bias=%2 p=%3 in_place=%4")
                                                 .arg(rms ? "rmsnorm" : "layernorm")
                                                 .arg(with_bias)
                                                 .arg(p)
                                                 .arg(in_place);
                        Bytes res(dt, res_v), x(xt, x_v), bias(wt, bias_v), w(wt, w_v), b(wt, b_v);
                        const TensorView no;
                        // The two ops.
                        Bytes out1(dt, std::vector<float>(n)), norm1(dt, std::vector<float>(n));
                        std::vector<float> mean1(rows, -1.0f), rstd1(rows, -1.0f);
                        if (with_bias)
                            ops::bias_dropout_add_forward(ctx, out1.view({rows, h}), res.view({rows, h}),
                                                          x.view({rows, h}), bias.view({h}), p, rng, offset);
                        else
                            ops::dropout_add_forward(ctx, out1.view({rows, h}), res.view({rows, h}), x.view({rows, h}),
                                                     p, rng, offset);
                        if (rms)
                            ops::rmsnorm_forward(ctx, norm1.view({rows, h}), view_f32(rstd1.data(), {rows}),
                                                 out1.view({rows, h}), w.view({h}), kEps);
                        else
                            ops::layernorm_forward(ctx, norm1.view({rows, h}), view_f32(mean1.data(), {rows}),
                                                   view_f32(rstd1.data(), {rows}), out1.view({rows, h}), w.view({h}),
                                                   b.view({h}), kEps);
                        // Fused, out over a copy of the residual when in_place.
                        Bytes res2(dt, res_v), out2(dt, std::vector<float>(n)), norm2(dt, std::vector<float>(n));
                        Bytes& out_target = in_place ? res2 : out2;
                        std::vector<float> mean2(rows, -1.0f), rstd2(rows, -1.0f);
                        ops::bias_dropout_add_norm_forward(
                            ctx, out_target.view({rows, h}), norm2.view({rows, h}),
                            rms ? no : view_f32(mean2.data(), {rows}), view_f32(rstd2.data(), {rows}),
                            res2.view({rows, h}), x.view({rows, h}), with_bias ? bias.view({h}) : no, w.view({h}),
                            rms ? no : b.view({h}), p, rng, offset, kEps);
                        QVERIFY2(out_target.b == out1.b, qPrintable(what + ": out"));
                        QVERIFY2(norm2.b == norm1.b, qPrintable(what + ": norm_out"));
                        MWB_VERIFY_BITWISE(rstd2, rstd1);
                        MWB_VERIFY_BITWISE(mean2, mean1);
                    }
    }

    void fused_residual_norm_checks_its_arguments() {
        std::vector<float> x(12), out(12), nout(12), w(4), b(4), stat(3), bad(5);
        std::vector<uint16_t> half(12);
        OpContext ctx;
        const auto v = [](std::vector<float>& d, std::initializer_list<int64_t> s) { return view_f32(d.data(), s); };
        const TensorView no;
        const auto call = [&](TensorView norm_out, TensorView mean, TensorView rstd, TensorView bias, TensorView bb) {
            ops::bias_dropout_add_norm_forward(ctx, v(out, {3, 4}), norm_out, mean, rstd, v(x, {3, 4}), v(x, {3, 4}),
                                               bias, v(w, {4}), bb, 0.1f, RngStream{1, 2}, 0, kEps);
        };
        call(v(nout, {3, 4}), v(stat, {3}), v(stat, {3}), v(b, {4}), v(b, {4}));  // LayerNorm
        call(v(nout, {3, 4}), no, v(stat, {3}), no, no);                           // RMSNorm, no bias
        const auto fails = [&](auto f, const char* arg) {
            try {
                f();
            } catch (const mwb::Error& e) {
                const std::string want = std::string("bias_dropout_add_norm_forward: ") + arg + " must be";
                QVERIFY2(std::string(e.what()).rfind(want, 0) == 0, e.what());
                return;
            }
            QFAIL(qPrintable(QStringLiteral("accepted a wrong %1").arg(arg)));
        };
        fails([&] { call(v(nout, {3, 4}), v(stat, {3}), v(stat, {3}), no, no); }, "b");      // mean without b
        fails([&] { call(v(nout, {3, 4}), no, v(stat, {3}), no, v(b, {4})); }, "mean");      // b without mean
        fails([&] { call(v(nout, {3, 4}), no, v(stat, {3}), v(bad, {5}), no); }, "bias");    // bias per column
        fails([&] { call(v(nout, {3, 4}), no, v(bad, {5}), no, no); }, "rstd");              // rstd per row
        fails([&] { call(make_view(half.data(), DType::BF16, {3, 4}), no, v(stat, {3}), no, no); },
              "norm_out");  // stored like out
    }

    void mismatched_shapes_throw() {
        std::vector<float> x(12), out(12), w(4), b(4), stat(3), dx(12), dw(4), db(4), bad(5);
        OpContext ctx;
        const auto v = [](std::vector<float>& d, std::initializer_list<int64_t> s) { return view_f32(d.data(), s); };
        // x (3, 4): w and b need 4 elements, mean and rstd 3.
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::layernorm_forward(ctx, v(out, {3, 4}), v(stat, {3}), v(stat, {3}),
                                                                    v(x, {3, 4}), v(bad, {5}), v(b, {4}), kEps));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::layernorm_forward(ctx, v(out, {3, 4}), v(stat, {3}), v(stat, {3}),
                                                                    v(x, {3, 4}), v(w, {4}), v(bad, {5}), kEps));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::layernorm_forward(ctx, v(out, {3, 4}), v(bad, {5}), v(stat, {3}),
                                                                    v(x, {3, 4}), v(w, {4}), v(b, {4}), kEps));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::layernorm_forward(ctx, v(out, {3, 4}), v(stat, {3}), v(bad, {5}),
                                                                    v(x, {3, 4}), v(w, {4}), v(b, {4}), kEps));
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error, ops::layernorm_backward(ctx, v(bad, {5}), v(dw, {4}), v(db, {4}), v(out, {3, 4}), v(x, {3, 4}),
                                                v(stat, {3}), v(stat, {3}), v(w, {4}), false));
        QVERIFY_THROWS_EXCEPTION(mwb::Error,
                                 ops::layernorm_backward(ctx, v(dx, {3, 4}), v(bad, {5}), v(db, {4}), v(out, {3, 4}),
                                                         v(x, {3, 4}), v(stat, {3}), v(stat, {3}), v(w, {4}), false));
        QVERIFY_THROWS_EXCEPTION(mwb::Error,
                                 ops::layernorm_backward(ctx, v(dx, {3, 4}), v(dw, {4}), v(bad, {5}), v(out, {3, 4}),
                                                         v(x, {3, 4}), v(stat, {3}), v(stat, {3}), v(w, {4}), false));
        QVERIFY_THROWS_EXCEPTION(mwb::Error,
                                 ops::rmsnorm_forward(ctx, v(out, {3, 4}), v(bad, {5}), v(x, {3, 4}), v(w, {4}), kEps));
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error, ops::rmsnorm_forward(ctx, v(out, {3, 4}), v(stat, {3}), v(x, {3, 4}), v(bad, {5}), kEps));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::rmsnorm_backward(ctx, v(bad, {5}), v(dw, {4}), v(out, {3, 4}),
                                                                   v(x, {3, 4}), v(stat, {3}), v(w, {4}), false));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::rmsnorm_backward(ctx, v(dx, {3, 4}), v(bad, {5}), v(out, {3, 4}),
                                                                   v(x, {3, 4}), v(stat, {3}), v(w, {4}), false));
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_norm, TestNorm)
}  // namespace test_kernels_norm
#include "test_norm.moc"
