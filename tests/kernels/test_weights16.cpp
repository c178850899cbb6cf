// 16-bit WEIGHT arguments on the CPU (the weights' working copy of a bf16/fp16 run is a 16-bit arena):
// linear's weight and bias, the fused linear + GELU, bias + dropout + residual, LayerNorm/RMSNorm gamma
// and beta, the word and position embedding tables, and AdamW writing the rounded copy straight into a
// 16-bit arena (a CUDA context's dispatcher takes it too: no GPU here). Each runs on bf16/f16 views
// against the same op on f32 views holding the same values
// (the emulated storage this replaces): the results must be the same bits. fill/copy's conversions
// against independent encoders (the compiler's _Float16, bf16 from its definition).
#include "support/precision_ref.h"
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"
#include "mwb/kernels/precision.h"

#include <QRegularExpression>
#include <QtTest>

#include <cmath>
#include <vector>

namespace test_kernels_weights16 {

using namespace mwb;
using mwb::test::random_floats;

namespace {

/// A weight as a 16-bit run holds it: its values rounded (f32) and the same values encoded.
struct Weight {
    std::vector<float> f32;
    std::vector<uint16_t> bits;
    DType dt;
    TensorView v32(std::initializer_list<int64_t> shape) { return view_f32(f32.data(), shape); }
    TensorView v16(std::initializer_list<int64_t> shape) { return make_view(bits.data(), dt, shape); }
};

Weight weight(DType dt, std::vector<float> x) {
    Weight w{std::move(x), {}, dt};
    w.bits.resize(w.f32.size());
    for (std::size_t i = 0; i < w.f32.size(); ++i) {
        w.bits[i] = dt == DType::BF16 ? bf16_bits(w.f32[i]) : fp16_bits(w.f32[i]);
        w.f32[i] = dt == DType::BF16 ? from_bf16_bits(w.bits[i]) : from_fp16_bits(w.bits[i]);
    }
    return w;
}

/// The encoding a reference nobody here wrote gives for x (precision_ref.h), as float.
float reference_rounding(DType dt, float x) {
    return dt == DType::BF16 ? test::bf16_ref(x) : test::fp16_ref(x);
}

void both_dtypes() {
    QTest::addColumn<int>("dtype");
    QTest::newRow("bf16") << int(DType::BF16);
    QTest::newRow("f16") << int(DType::F16);
}

}  // namespace

class TestWeights16 : public QObject {
    Q_OBJECT
private slots:
    void linear_with_16bit_weight_and_bias_data() { both_dtypes(); }
    void linear_with_16bit_weight_and_bias() {
        QFETCH(int, dtype);
        const DType dt = static_cast<DType>(dtype);
        OpContext ctx;
        const int64_t N = 48, in = 40, out = 72;
        std::vector<float> x = random_floats(N * in, 1, -2, 2);
        Weight w = weight(dt, random_floats(out * in, 2, -0.3f, 0.3f)), b = weight(dt, random_floats(out, 3));
        const TensorView xv = view_f32(x.data(), {N, in});
        std::vector<float> y_e(N * out), y_s(N * out);
        ops::linear_forward(ctx, view_f32(y_e.data(), {N, out}), xv, w.v32({out, in}), b.v32({out}));
        ops::linear_forward(ctx, view_f32(y_s.data(), {N, out}), xv, w.v16({out, in}), b.v16({out}));
        MWB_VERIFY_BITWISE(y_s, y_e);

        // Backward reads the 16-bit weight (dx = dy·W); dW and dbias are the fp32 main grads.
        std::vector<float> dy = random_floats(N * out, 4), dx_e(N * in, 1.0f), dx_s = dx_e;
        std::vector<float> dw_e(out * in, 0.5f), dw_s = dw_e, db_e(out, 0.25f), db_s = db_e;
        ops::linear_backward(ctx, view_f32(dx_e.data(), {N, in}), view_f32(dw_e.data(), {out, in}),
                             view_f32(db_e.data(), {out}), view_f32(dy.data(), {N, out}), xv, w.v32({out, in}), true);
        ops::linear_backward(ctx, view_f32(dx_s.data(), {N, in}), view_f32(dw_s.data(), {out, in}),
                             view_f32(db_s.data(), {out}), view_f32(dy.data(), {N, out}), xv, w.v16({out, in}), true);
        MWB_VERIFY_BITWISE(dx_s, dx_e);
        MWB_VERIFY_BITWISE(dw_s, dw_e);
        MWB_VERIFY_BITWISE(db_s, db_e);

        // fc1 + GELU with a 16-bit weight and bias (pre and act f32 here).
        std::vector<float> pre_e(N * out), act_e(N * out), pre_s(N * out), act_s(N * out);
        ops::linear_gelu_forward(ctx, view_f32(act_e.data(), {N, out}), view_f32(pre_e.data(), {N, out}), xv,
                                 w.v32({out, in}), b.v32({out}), dt);
        ops::linear_gelu_forward(ctx, view_f32(act_s.data(), {N, out}), view_f32(pre_s.data(), {N, out}), xv,
                                 w.v16({out, in}), b.v16({out}), dt);
        MWB_VERIFY_BITWISE(pre_s, pre_e);
        MWB_VERIFY_BITWISE(act_s, act_e);
    }

    void bias_dropout_add_with_16bit_bias_data() { both_dtypes(); }
    void bias_dropout_add_with_16bit_bias() {
        QFETCH(int, dtype);
        const DType dt = static_cast<DType>(dtype);
        OpContext ctx;
        const int64_t N = 33, H = 1100;  // rows longer than one dropout chunk
        std::vector<float> x = random_floats(N * H, 5), r = random_floats(N * H, 6), e(N * H), s(N * H);
        Weight b = weight(dt, random_floats(H, 7));
        const RngStream rng{11, 12};
        ops::bias_dropout_add_forward(ctx, view_f32(e.data(), {N, H}), view_f32(r.data(), {N, H}),
                                      view_f32(x.data(), {N, H}), b.v32({H}), 0.1f, rng, 64);
        ops::bias_dropout_add_forward(ctx, view_f32(s.data(), {N, H}), view_f32(r.data(), {N, H}),
                                      view_f32(x.data(), {N, H}), b.v16({H}), 0.1f, rng, 64);
        MWB_VERIFY_BITWISE(s, e);
    }

    void norms_with_16bit_gamma_and_beta_data() { both_dtypes(); }
    void norms_with_16bit_gamma_and_beta() {
        QFETCH(int, dtype);
        const DType dt = static_cast<DType>(dtype);
        OpContext ctx;
        const int64_t N = 37, H = 136;  // H not a multiple of the 64-column blocks
        std::vector<float> x = random_floats(N * H, 8, -3, 3), dout = random_floats(N * H, 9);
        Weight g = weight(dt, random_floats(H, 10, 0.5f, 1.5f)), b = weight(dt, random_floats(H, 11));
        const TensorView xv = view_f32(x.data(), {N, H}), dv = view_f32(dout.data(), {N, H});
        for (bool rms : {false, true}) {
            std::vector<float> out_e(N * H), out_s(N * H), mean_e(N), mean_s(N), rstd_e(N), rstd_s(N);
            if (rms) {
                ops::rmsnorm_forward(ctx, view_f32(out_e.data(), {N, H}), view_f32(rstd_e.data(), {N}), xv,
                                     g.v32({H}), 1e-5f);
                ops::rmsnorm_forward(ctx, view_f32(out_s.data(), {N, H}), view_f32(rstd_s.data(), {N}), xv,
                                     g.v16({H}), 1e-5f);
            } else {
                ops::layernorm_forward(ctx, view_f32(out_e.data(), {N, H}), view_f32(mean_e.data(), {N}),
                                       view_f32(rstd_e.data(), {N}), xv, g.v32({H}), b.v32({H}), 1e-5f);
                ops::layernorm_forward(ctx, view_f32(out_s.data(), {N, H}), view_f32(mean_s.data(), {N}),
                                       view_f32(rstd_s.data(), {N}), xv, g.v16({H}), b.v16({H}), 1e-5f);
            }
            MWB_VERIFY_BITWISE(out_s, out_e);
            MWB_VERIFY_BITWISE(rstd_s, rstd_e);
            std::vector<float> dx_e(N * H, 0.5f), dx_s = dx_e, dg_e(H, 0.25f), dg_s = dg_e, db_e(H), db_s(H);
            if (rms) {
                ops::rmsnorm_backward(ctx, view_f32(dx_e.data(), {N, H}), view_f32(dg_e.data(), {H}), dv, xv,
                                      view_f32(rstd_e.data(), {N}), g.v32({H}), true);
                ops::rmsnorm_backward(ctx, view_f32(dx_s.data(), {N, H}), view_f32(dg_s.data(), {H}), dv, xv,
                                      view_f32(rstd_e.data(), {N}), g.v16({H}), true);
            } else {
                ops::layernorm_backward(ctx, view_f32(dx_e.data(), {N, H}), view_f32(dg_e.data(), {H}),
                                        view_f32(db_e.data(), {H}), dv, xv, view_f32(mean_e.data(), {N}),
                                        view_f32(rstd_e.data(), {N}), g.v32({H}), true);
                ops::layernorm_backward(ctx, view_f32(dx_s.data(), {N, H}), view_f32(dg_s.data(), {H}),
                                        view_f32(db_s.data(), {H}), dv, xv, view_f32(mean_e.data(), {N}),
                                        view_f32(rstd_e.data(), {N}), g.v16({H}), true);
            }
            MWB_VERIFY_BITWISE(dx_s, dx_e);
            MWB_VERIFY_BITWISE(dg_s, dg_e);
            MWB_VERIFY_BITWISE(db_s, db_e);
        }
    }

    void embeddings_from_16bit_tables_data() { both_dtypes(); }
    void embeddings_from_16bit_tables() {
        QFETCH(int, dtype);
        const DType dt = static_cast<DType>(dtype);
        OpContext ctx;
        const int64_t V = 50, H = 24, S = 6, B = 3, P = 10;
        Weight wte = weight(dt, random_floats(V * H, 12)), wpe = weight(dt, random_floats(P * H, 13));
        // A vocabulary shard [20, 70): ids outside it gather zeros.
        std::vector<int32_t> ids = {20, 21, 69, 5, 70, 44, 20, 33, 68, 0, 27, 50, 61, 22, 23, 24, 25, 26};
        const TensorView idv = view_i32(ids.data(), {S * B});
        std::vector<float> e(S * B * H), s(S * B * H);
        ops::embedding_forward(ctx, view_f32(e.data(), {S * B, H}), idv, wte.v32({V, H}), 20);
        ops::embedding_forward(ctx, view_f32(s.data(), {S * B, H}), idv, wte.v16({V, H}), 20);
        MWB_VERIFY_BITWISE(s, e);
        QCOMPARE(s[3 * H], 0.0f);                     // id 5 is outside the shard
        QCOMPARE(s[0], wte.f32[0]);                   // id 20 is the shard's row 0, widened exactly
        ops::position_embedding_forward(ctx, view_f32(e.data(), {S, B, H}), wpe.v32({P, H}), 3);
        ops::position_embedding_forward(ctx, view_f32(s.data(), {S, B, H}), wpe.v16({P, H}), 3);
        MWB_VERIFY_BITWISE(s, e);
    }

    void fill_and_copy_convert_between_storage_dtypes_data() { both_dtypes(); }
    void fill_and_copy_convert_between_storage_dtypes() {
        QFETCH(int, dtype);
        const DType dt = static_cast<DType>(dtype);
        OpContext ctx;
        const int64_t n = 4099;
        std::vector<float> x = random_floats(n, 14, -70000.0f, 70000.0f), back(n);
        x[0] = 1e-7f;  // an fp16 subnormal
        x[1] = 3.0e38f;  // bf16 keeps it, fp16 overflows to infinity
        std::vector<uint16_t> h(n);
        ops::copy(ctx, make_view(h.data(), dt, {n}), view_f32(x.data(), {n}));  // narrowing rounds
        ops::copy(ctx, view_f32(back.data(), {n}), make_view(h.data(), dt, {n}));  // widening is exact
        std::vector<float> want(n);
        for (int64_t i = 0; i < n; ++i) want[i] = reference_rounding(dt, x[i]);
        MWB_VERIFY_BITWISE(back, want);
        std::vector<uint16_t> h2(n);
        ops::copy(ctx, make_view(h2.data(), dt, {n}), make_view(h.data(), dt, {n}));
        QVERIFY(h2 == h);
        ops::fill(ctx, make_view(h.data(), dt, {n}), 0.1f);
        ops::copy(ctx, view_f32(back.data(), {n}), make_view(h.data(), dt, {n}));
        MWB_VERIFY_BITWISE(back, std::vector<float>(n, reference_rounding(dt, 0.1f)));
    }

    void adamw_writes_the_rounded_copy_into_a_16bit_arena_data() { both_dtypes(); }
    void adamw_writes_the_rounded_copy_into_a_16bit_arena() {
        QFETCH(int, dtype);
        const DType dt = static_cast<DType>(dtype);
        OpContext ctx;
        const int64_t n = 1000;
        AdamWParams p;
        p.lr = 1e-2f;
        p.weight_decay = 0.1f;
        p.step = 3;
        std::vector<float> w_e = random_floats(n, 15), g = random_floats(n, 16), m_e = random_floats(n, 17, 0, 0.1f);
        std::vector<float> v_e = random_floats(n, 18, 0, 0.01f), w_s = w_e, m_s = m_e, v_s = v_e, copy_e(n);
        std::vector<uint16_t> copy_s(n);
        ops::adamw_update(ctx, view_f32(w_e.data(), {n}), view_f32(g.data(), {n}), view_f32(m_e.data(), {n}),
                          view_f32(v_e.data(), {n}), p, view_f32(copy_e.data(), {n}), dt);
        ops::adamw_update(ctx, view_f32(w_s.data(), {n}), view_f32(g.data(), {n}), view_f32(m_s.data(), {n}),
                          view_f32(v_s.data(), {n}), p, make_view(copy_s.data(), dt, {n}), dt);
        MWB_VERIFY_BITWISE(w_s, w_e);  // the fp32 masters
        std::vector<float> widened(n);
        ops::copy(ctx, view_f32(widened.data(), {n}), make_view(copy_s.data(), dt, {n}));
        MWB_VERIFY_BITWISE(widened, copy_e);
        for (int64_t i = 0; i < n; ++i) QCOMPARE(widened[i], reference_rounding(dt, w_e[i]));
        // A 16-bit copy of another dtype than copy_dtype is refused by name.
        try {
            ops::adamw_update(ctx, view_f32(w_s.data(), {n}), view_f32(g.data(), {n}), view_f32(m_s.data(), {n}),
                              view_f32(v_s.data(), {n}), p, make_view(copy_s.data(), dt, {n}),
                              dt == DType::BF16 ? DType::F16 : DType::BF16);
            QFAIL("no error");
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).contains("adamw_update: param_copy must be f32 or of copy_dtype"), e.what());
        }
    }

    void cuda_context_takes_a_16bit_adamw_copy_and_gradient() {
        // CUDA's AdamW kernel writes the rounded copy into the 16-bit arena and reads 16-bit gradients,
        // as the CPU op does: the dispatcher lets them through (no GPU here: the call then fails inside
        // CUDA, with a message that names no argument), and refuses by name what neither device takes.
        OpContext ctx{Device::CUDA, nullptr};
        float w[4] = {}, g[4] = {}, m[4] = {}, v[4] = {};
        uint16_t copy[4] = {}, g16[4] = {};
        AdamWParams p;
        p.step = 1;
        const auto f32 = [](float* d) { return make_view(d, DType::F32, {4}, Device::CUDA); };
        const auto h16 = [](uint16_t* d, DType dt) { return make_view(d, dt, {4}, Device::CUDA); };
        const auto message = [&](const TensorView& grad, const TensorView& exp_avg, const TensorView& param_copy,
                                 DType copy_dtype) -> QString {
            try {
                ops::adamw_update(ctx, f32(w), grad, exp_avg, f32(v), p, param_copy, copy_dtype);
            } catch (const Error& e) {
                return e.what();
            }
            return "no error";
        };
        for (DType dt : {DType::BF16, DType::F16}) {
            for (const QString& why : {message(f32(g), f32(m), h16(copy, dt), dt), message(h16(g16, dt), f32(m), {}, dt),
                                       message(h16(g16, dt), f32(m), h16(copy, dt), dt)})
                QVERIFY2(!QRegularExpression("^adamw_update: [a-z_.]+ must be").match(why).hasMatch(), qPrintable(why));
            const DType other = dt == DType::BF16 ? DType::F16 : DType::BF16;
            QVERIFY(message(f32(g), f32(m), h16(copy, dt), other).contains("adamw_update: param_copy must be f32 or of copy_dtype"));
            QVERIFY(message(f32(g), h16(g16, dt), h16(copy, dt), dt).contains("adamw_update: exp_avg must be a tensor of dtype f32"));
        }
    }
};

MWB_TEST_SUITE_GUILESS(test_kernels_weights16, TestWeights16)
}  // namespace test_kernels_weights16
#include "test_weights16.moc"
