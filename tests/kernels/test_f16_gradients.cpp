// Parameter gradients accumulated into an f16 arena on the CPU (fp16 runs without
// accumulate_allreduce_grads_in_fp32): every op that writes into the gradient arena — linear's dW and
// dbias, the fused linear + GELU's bias gradients, LayerNorm/RMSNorm gamma and beta, the word and
// position embedding tables — and the gradient norm reading it. Reference for each: the same op on an
// f32 gradient holding the f16 arena's values (the fp32 sum, g0 + this call's contribution), then
// rounded once by an encoder nobody here wrote (test::fp16_ref, the compiler's _Float16): the f16
// result must be those bits, i.e. each element's fp32 sum rounded exactly once per call.
#include "support/precision_ref.h"
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"

#include "mwb/kernels/ops.h"
#include "mwb/kernels/precision.h"

#include <QtTest>

#include <cmath>
#include <vector>

namespace test_kernels_f16_gradients {

using namespace mwb;
using mwb::test::random_floats;

namespace {

/// A gradient as the f16 arena holds it (bits) and the same values as f32 (the reference's start).
struct Grad {
    std::vector<uint16_t> bits;
    std::vector<float> f32;
    TensorView v16(std::initializer_list<int64_t> shape) { return make_view(bits.data(), DType::F16, shape); }
    TensorView v32(std::initializer_list<int64_t> shape) { return view_f32(f32.data(), shape); }
    /// The f16 arena's values, widened.
    std::vector<float> values() const {
        std::vector<float> v(bits.size());
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = from_fp16_bits(bits[i]);
        return v;
    }
    /// The fp32 reference rounded once by the independent encoder.
    std::vector<float> expected() const {
        std::vector<float> v(f32.size());
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = test::fp16_ref(f32[i]);
        return v;
    }
};

/// n gradient elements starting from fp16 values of `scale` (an earlier micro-batch's sum).
Grad grad(std::size_t n, uint32_t seed, float scale = 0.5f) {
    Grad g;
    g.f32 = random_floats(n, seed, -scale, scale);
    g.bits.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        g.bits[i] = fp16_bits(g.f32[i]);
        g.f32[i] = from_fp16_bits(g.bits[i]);
    }
    return g;
}

/// At least one element must have needed its rounding (else the check could not tell one rounding from none).
bool some_rounding(const Grad& g) {
    for (float x : g.f32)
        if (test::fp16_ref(x) != x) return true;
    return false;
}

}  // namespace

class TestF16Gradients : public QObject {
    Q_OBJECT
private slots:
    void linear_backward_dw_and_dbias() {
        OpContext ctx;
        const int64_t N = 48, in = 40, out = 72;
        std::vector<float> x = random_floats(N * in, 1, -2, 2), w = random_floats(out * in, 2, -0.3f, 0.3f);
        std::vector<float> dy = random_floats(N * out, 3);
        Grad dw = grad(out * in, 4), db = grad(out, 5);
        const TensorView xv = view_f32(x.data(), {N, in}), wv = view_f32(w.data(), {out, in});
        const TensorView dyv = view_f32(dy.data(), {N, out});
        ops::linear_backward(ctx, {}, dw.v32({out, in}), db.v32({out}), dyv, xv, wv);
        ops::linear_backward(ctx, {}, dw.v16({out, in}), db.v16({out}), dyv, xv, wv);
        QVERIFY(some_rounding(dw) && some_rounding(db));
        MWB_VERIFY_BITWISE(dw.values(), dw.expected());
        MWB_VERIFY_BITWISE(db.values(), db.expected());
    }

    void linear_backward_gelu_bias_gradients() {
        OpContext ctx;
        const int64_t N = 32, in = 24, out = 16;  // x = act (N, in): fc2's input; dpre_bias is fc1's bias
        std::vector<float> act = random_floats(N * in, 6), pre = random_floats(N * in, 7, -2, 2);
        std::vector<float> w = random_floats(out * in, 8, -0.3f, 0.3f), dy = random_floats(N * out, 9);
        Grad dw = grad(out * in, 10), db = grad(out, 11), dpb = grad(in, 12);
        std::vector<float> dpre(N * in);
        const auto run = [&](TensorView dpb_v, TensorView dw_v, TensorView db_v) {
            ops::linear_backward_gelu(ctx, view_f32(dpre.data(), {N, in}), dpb_v, dw_v, db_v,
                                      view_f32(dy.data(), {N, out}), view_f32(act.data(), {N, in}),
                                      view_f32(w.data(), {out, in}), view_f32(pre.data(), {N, in}), DType::F16);
        };
        run(dpb.v32({in}), dw.v32({out, in}), db.v32({out}));
        run(dpb.v16({in}), dw.v16({out, in}), db.v16({out}));
        MWB_VERIFY_BITWISE(dw.values(), dw.expected());
        MWB_VERIFY_BITWISE(db.values(), db.expected());
        MWB_VERIFY_BITWISE(dpb.values(), dpb.expected());
    }

    void norm_gamma_and_beta() {
        OpContext ctx;
        const int64_t N = 40, H = 96;
        std::vector<float> x = random_floats(N * H, 13, -2, 2), w = random_floats(H, 14, 0.5f, 1.5f);
        std::vector<float> b = random_floats(H, 15), dout = random_floats(N * H, 16);
        std::vector<float> out(N * H), mean(N), rstd(N), dx(N * H);
        const TensorView xv = view_f32(x.data(), {N, H}), wv = view_f32(w.data(), {H});
        const TensorView dv = view_f32(dout.data(), {N, H}), dxv = view_f32(dx.data(), {N, H});
        ops::layernorm_forward(ctx, view_f32(out.data(), {N, H}), view_f32(mean.data(), {N}),
                               view_f32(rstd.data(), {N}), xv, wv, view_f32(b.data(), {H}), 1e-5f);
        Grad dw = grad(H, 17), db = grad(H, 18);
        for (const bool f16 : {false, true})
            ops::layernorm_backward(ctx, dxv, f16 ? dw.v16({H}) : dw.v32({H}), f16 ? db.v16({H}) : db.v32({H}), dv,
                                    xv, view_f32(mean.data(), {N}), view_f32(rstd.data(), {N}), wv, false);
        QVERIFY(some_rounding(dw) && some_rounding(db));
        MWB_VERIFY_BITWISE(dw.values(), dw.expected());
        MWB_VERIFY_BITWISE(db.values(), db.expected());

        ops::rmsnorm_forward(ctx, view_f32(out.data(), {N, H}), view_f32(rstd.data(), {N}), xv, wv, 1e-5f);
        Grad dg = grad(H, 19);
        for (const bool f16 : {false, true})
            ops::rmsnorm_backward(ctx, dxv, f16 ? dg.v16({H}) : dg.v32({H}), dv, xv, view_f32(rstd.data(), {N}), wv,
                                  false);
        MWB_VERIFY_BITWISE(dg.values(), dg.expected());
    }

    void embedding_tables() {
        OpContext ctx;
        const int64_t V = 12, H = 80, S = 6, B = 4, P = 10;
        std::vector<int32_t> ids(S * B);
        for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % 14);  // some outside [2, 14)
        std::vector<float> dout = random_floats(S * B * H, 20);
        Grad dt = grad(V * H, 21);
        for (const bool f16 : {false, true})
            ops::embedding_backward(ctx, f16 ? dt.v16({V, H}) : dt.v32({V, H}), view_f32(dout.data(), {S * B, H}),
                                    make_view(ids.data(), DType::I32, {S * B}), 2);
        QVERIFY(some_rounding(dt));
        MWB_VERIFY_BITWISE(dt.values(), dt.expected());

        Grad dp = grad(P * H, 22);
        for (const bool f16 : {false, true})
            ops::position_embedding_backward(ctx, f16 ? dp.v16({P, H}) : dp.v32({P, H}),
                                             view_f32(dout.data(), {S, B, H}), 3);
        QVERIFY(some_rounding(dp));
        MWB_VERIFY_BITWISE(dp.values(), dp.expected());
    }

    /// AdamW reading an f16 gradient (exact widening): the same bits as from an f32 gradient holding
    /// its values, and the f16 gradient zeroed with p.zero_grad.
    void adamw_reads_an_f16_gradient() {
        OpContext ctx;
        const int64_t n = 1000;
        Grad g = grad(n, 24, 2.0f);
        std::vector<float> w0 = random_floats(n, 25), m0 = random_floats(n, 26, -0.1f, 0.1f);
        std::vector<float> v0 = random_floats(n, 27, 0.0f, 0.01f);
        std::vector<float> w_e = w0, m_e = m0, v_e = v0, w_s = w0, m_s = m0, v_s = v0;
        AdamWParams p;
        p.lr = 1e-3f;
        p.step = 3;
        p.weight_decay = 0.1f;
        p.grad_scale = 1.0f / 1024;
        p.zero_grad = true;
        ops::adamw_update(ctx, view_f32(w_e.data(), {n}), g.v32({n}), view_f32(m_e.data(), {n}),
                          view_f32(v_e.data(), {n}), p);
        ops::adamw_update(ctx, view_f32(w_s.data(), {n}), g.v16({n}), view_f32(m_s.data(), {n}),
                          view_f32(v_s.data(), {n}), p);
        MWB_VERIFY_BITWISE(w_s, w_e);
        MWB_VERIFY_BITWISE(m_s, m_e);
        MWB_VERIFY_BITWISE(v_s, v_e);
        for (uint16_t b : g.bits) QCOMPARE(b, uint16_t{0});
    }

    /// The gradient norm's Σ x² over an f16 arena: each element widened exactly and squared in float64,
    /// against a float64 sum of the same values; an fp16 overflow (inf) propagates (the step is skipped).
    void sum_squares_of_an_f16_arena() {
        OpContext ctx;
        Grad g = grad(70000, 23, 4.0f);  // several 2^14 chunks
        double sum = 0, ref = 0;
        const TensorView out = make_view(&sum, DType::F64, {1});
        ops::sum_squares_ranges(ctx, out, g.v16({70000}), {{5, 40000}, {50000, 19000}});
        for (int64_t i = 5; i < 40005; ++i) ref += static_cast<double>(g.f32[i]) * g.f32[i];
        for (int64_t i = 50000; i < 69000; ++i) ref += static_cast<double>(g.f32[i]) * g.f32[i];
        QVERIFY2(std::abs(sum - ref) <= 1e-12 * ref, qPrintable(QStringLiteral("%1 vs %2").arg(sum).arg(ref)));
        g.bits[60000] = fp16_bits(65504.0f * 2);  // overflows to inf
        QCOMPARE(g.bits[60000], uint16_t{0x7C00});
        ops::sum_squares_ranges(ctx, out, g.v16({70000}), {{5, 40000}, {50000, 19000}});
        QVERIFY(std::isinf(sum));
    }
};

MWB_TEST_SUITE_GUILESS(test_kernels_f16_gradients, TestF16Gradients)
}  // namespace test_kernels_f16_gradients
#include "test_f16_gradients.moc"
