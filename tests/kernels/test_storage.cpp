// 16-bit storage on the CPU: the bf16/fp16 encodings (mwb/kernels/precision.h) against the compiler's
// IEEE binary16 (_Float16) and bf16's definition, bit for bit over every 16-bit pattern and over random
// float32 bit patterns; and every op that reads or writes a stored activation or its gradient (linear,
// GELU, SwiGLU, RoPE, attention; norms, dropout and residual adds, embeddings, fill/copy/scale/add/round_to
// on the residual stream) run on bf16/f16 views against the same op on f32 views followed by round_to, the
// emulated storage this replaces: the results must be the same bits.
#include "support/precision_ref.h"
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"
#include "mwb/kernels/precision.h"

#include <QtTest>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace test_kernels_storage {

using namespace mwb;
using mwb::test::bf16_ref;
using mwb::test::bits_of;
using mwb::test::random_floats;

namespace {

/// Random float32 bit patterns: every exponent, NaNs and infinities included.
std::vector<float> random_bit_patterns(std::size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = std::bit_cast<float>(static_cast<uint32_t>(gen()));
    return v;
}

/// Values a 16-bit run holds in f32 (emulated) and the same values encoded.
struct Stored {
    std::vector<float> f32;
    std::vector<uint16_t> bits;
};

Stored stored(DType dt, std::vector<float> x) {
    OpContext ctx;
    ops::round_to(ctx, view_f32(x.data(), {int64_t(x.size())}), dt);
    Stored s{x, std::vector<uint16_t>(x.size())};
    for (std::size_t i = 0; i < x.size(); ++i) s.bits[i] = dt == DType::BF16 ? bf16_bits(x[i]) : fp16_bits(x[i]);
    return s;
}

std::vector<float> decoded(DType dt, const std::vector<uint16_t>& bits) {
    std::vector<float> out(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i)
        out[i] = dt == DType::BF16 ? from_bf16_bits(bits[i]) : from_fp16_bits(bits[i]);
    return out;
}

TensorView view16(std::vector<uint16_t>& v, DType dt, std::initializer_list<int64_t> shape) {
    return make_view(v.data(), dt, shape);
}

/// The first index where a and b differ in their bits, or -1.
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (bits_of(a[i]) != bits_of(b[i])) return int64_t(i);
    return -1;
}

#define QCOMPARE_BITS(got, want)                                                            \
    do {                                                                                    \
        const int64_t at = first_difference(got, want);                                     \
        QVERIFY2(at < 0, qPrintable(QStringLiteral("differs at %1: %2 vs %3")               \
                                        .arg(at)                                            \
                                        .arg(double(at < 0 ? 0 : (got)[at]), 0, 'g', 9)     \
                                        .arg(double(at < 0 ? 0 : (want)[at]), 0, 'g', 9))); \
    } while (0)

}  // namespace

class TestStorage : public QObject {
    Q_OBJECT
private slots:
    void fp16_decoding_matches_float16_for_every_pattern() {
        for (uint32_t h = 0; h < 0x10000u; ++h) {
            const float want = static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(h)));
            const float got = from_fp16_bits(static_cast<uint16_t>(h));
            if (std::isnan(want)) {
                QVERIFY2(std::isnan(got), qPrintable(QString::number(h, 16)));
                continue;
            }
            QVERIFY2(bits_of(got) == bits_of(want), qPrintable(QString::number(h, 16)));
            QCOMPARE(fp16_bits(got), static_cast<uint16_t>(h));  // and back
        }
    }

    void fp16_encoding_matches_float16() {
        auto x = random_bit_patterns(1 << 20, 7);
        for (float v : random_floats(1 << 16, 8, -7e4f, 7e4f)) x.push_back(v);
        for (float v : random_floats(1 << 16, 9, -1e-4f, 1e-4f)) x.push_back(v);  // subnormal fp16 range
        for (float v : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1035e-5f, INFINITY,
                        -INFINITY, NAN})
            x.push_back(v);
        for (float v : x) {
            const _Float16 want = static_cast<_Float16>(v);
            const uint16_t got = fp16_bits(v);
            if (std::isnan(v)) {
                QVERIFY(std::isnan(from_fp16_bits(got)));
                continue;
            }
            QVERIFY2(got == std::bit_cast<uint16_t>(want), qPrintable(QString::number(double(v), 'g', 9)));
        }
    }

    void bf16_encoding_matches_definition() {
        for (uint32_t h = 0; h < 0x10000u; ++h) {
            const float v = from_bf16_bits(static_cast<uint16_t>(h));
            QCOMPARE(bits_of(v), h << 16);
            if (!std::isnan(v)) QCOMPARE(bf16_bits(v), static_cast<uint16_t>(h));
        }
        for (float v : random_bit_patterns(1 << 20, 11)) QCOMPARE(uint32_t(bf16_bits(v)) << 16, bits_of(bf16_ref(v)));
    }

    void ops_on_16bit_views_equal_emulated_storage_data() {
        QTest::addColumn<int>("dtype");
        QTest::newRow("bf16") << int(DType::BF16);
        QTest::newRow("f16") << int(DType::F16);
    }
    void ops_on_16bit_views_equal_emulated_storage() {
        QFETCH(int, dtype);
        const DType dt = static_cast<DType>(dtype);
        OpContext ctx;
        const int64_t N = 48, in = 40, out = 72;
        Stored x = stored(dt, random_floats(N * in, 1, -2, 2));
        const Stored w = stored(dt, random_floats(out * in, 2, -0.3f, 0.3f));
        std::vector<float> bias = random_floats(out, 3), w32 = w.f32;
        const TensorView wv = view_f32(w32.data(), {out, in}), bv = view_f32(bias.data(), {out});

        // linear_forward: 16-bit x and y (qkv, fc1 / context, act as inputs).
        std::vector<float> y_emul(N * out);
        ops::linear_forward(ctx, view_f32(y_emul.data(), {N, out}), view_f32(x.f32.data(), {N, in}), wv, bv);
        ops::round_to(ctx, view_f32(y_emul.data(), {N, out}), dt);
        std::vector<uint16_t> y16(N * out);
        ops::linear_forward(ctx, view16(y16, dt, {N, out}), view16(x.bits, dt, {N, in}), wv, bv);
        QCOMPARE_BITS(decoded(dt, y16), y_emul);

        // linear_backward with a 16-bit x: dx, dw (accumulated) and dbias are f32.
        const std::vector<float> dy = random_floats(N * out, 4);
        std::vector<float> dx_e(N * in), dw_e(out * in, 0.5f), db_e(out, 0.25f);
        std::vector<float> dx_s = dx_e, dw_s = dw_e, db_s = db_e;
        auto dyc = dy;
        ops::linear_backward(ctx, view_f32(dx_e.data(), {N, in}), view_f32(dw_e.data(), {out, in}),
                             view_f32(db_e.data(), {out}), view_f32(dyc.data(), {N, out}),
                             view_f32(x.f32.data(), {N, in}), wv);
        ops::linear_backward(ctx, view_f32(dx_s.data(), {N, in}), view_f32(dw_s.data(), {out, in}),
                             view_f32(db_s.data(), {out}), view_f32(dyc.data(), {N, out}), view16(x.bits, dt, {N, in}),
                             wv);
        QCOMPARE_BITS(dx_s, dx_e);
        QCOMPARE_BITS(dw_s, dw_e);
        QCOMPARE_BITS(db_s, db_e);
        // ... and with 16-bit dy and dx (the gradients of stored intermediates), dx rounded once.
        Stored dy16 = stored(dt, dy);
        std::vector<float> dw_h(out * in, 0.5f), db_h(out, 0.25f), dw_e2(out * in, 0.5f), db_e2(out, 0.25f);
        std::vector<float> dx_e2(N * in);
        ops::linear_backward(ctx, view_f32(dx_e2.data(), {N, in}), view_f32(dw_e2.data(), {out, in}),
                             view_f32(db_e2.data(), {out}), view_f32(dy16.f32.data(), {N, out}),
                             view_f32(x.f32.data(), {N, in}), wv);
        ops::round_to(ctx, view_f32(dx_e2.data(), {N, in}), dt);
        std::vector<uint16_t> dx16(N * in);
        ops::linear_backward(ctx, view16(dx16, dt, {N, in}), view_f32(dw_h.data(), {out, in}),
                             view_f32(db_h.data(), {out}), view16(dy16.bits, dt, {N, out}), view16(x.bits, dt, {N, in}),
                             wv);
        QCOMPARE_BITS(decoded(dt, dx16), dx_e2);
        QCOMPARE_BITS(dw_h, dw_e2);
        QCOMPARE_BITS(db_h, db_e2);

        // GELU forward (16-bit in and out) and backward (16-bit x).
        Stored a = stored(dt, random_floats(N * out, 5, -5, 5));
        std::vector<float> g_e(N * out);
        ops::gelu_forward(ctx, view_f32(g_e.data(), {N, out}), view_f32(a.f32.data(), {N, out}));
        ops::round_to(ctx, view_f32(g_e.data(), {N, out}), dt);
        std::vector<uint16_t> g16(N * out);
        ops::gelu_forward(ctx, view16(g16, dt, {N, out}), view16(a.bits, dt, {N, out}));
        QCOMPARE_BITS(decoded(dt, g16), g_e);
        std::vector<float> gd_e(N * out), gd_s(N * out);
        ops::gelu_backward(ctx, view_f32(gd_e.data(), {N, out}), view_f32(dyc.data(), {N, out}),
                           view_f32(a.f32.data(), {N, out}));
        ops::gelu_backward(ctx, view_f32(gd_s.data(), {N, out}), view_f32(dyc.data(), {N, out}),
                           view16(a.bits, dt, {N, out}));
        QCOMPARE_BITS(gd_s, gd_e);
        {  // in place on a 16-bit gradient, as the model runs it
            std::vector<float> e = dy16.f32;
            ops::gelu_backward(ctx, view_f32(e.data(), {N, out}), view_f32(e.data(), {N, out}),
                               view_f32(a.f32.data(), {N, out}));
            ops::round_to(ctx, view_f32(e.data(), {N, out}), dt);
            std::vector<uint16_t> g = dy16.bits;
            ops::gelu_backward(ctx, view16(g, dt, {N, out}), view16(g, dt, {N, out}), view16(a.bits, dt, {N, out}));
            QCOMPARE_BITS(decoded(dt, g), e);
        }

        // The fused fc1 + GELU and fc2-backward + GELU' ops: pre and act (dpre) 16-bit.
        {
            std::vector<float> pre_e(N * out), act_e(N * out);
            ops::linear_gelu_forward(ctx, view_f32(act_e.data(), {N, out}), view_f32(pre_e.data(), {N, out}),
                                     view_f32(x.f32.data(), {N, in}), wv, bv, dt);
            ops::round_to(ctx, view_f32(act_e.data(), {N, out}), dt);  // the caller's store
            std::vector<uint16_t> pre16(N * out), act16(N * out);
            ops::linear_gelu_forward(ctx, view16(act16, dt, {N, out}), view16(pre16, dt, {N, out}),
                                     view16(x.bits, dt, {N, in}), wv, bv, dt);
            QCOMPARE_BITS(decoded(dt, pre16), pre_e);
            QCOMPARE_BITS(decoded(dt, act16), act_e);
            // fc2: y (N, in) = act·w2ᵀ with w2 (in, out); dpre (N, out), fc1's bias gradient (out).
            std::vector<float> w2 = stored(dt, random_floats(in * out, 6, -0.3f, 0.3f)).f32;
            const TensorView w2v = view_f32(w2.data(), {in, out});
            std::vector<float> dy2 = random_floats(N * in, 7), dpre_e(N * out), pb_e(out, 0.5f), pb_s(out, 0.5f);
            std::vector<float> dw2_e(in * out, 0.25f), dw2_s(in * out, 0.25f);
            const Stored act_st = stored(dt, act_e);
            ops::linear_backward_gelu(ctx, view_f32(dpre_e.data(), {N, out}), view_f32(pb_e.data(), {out}),
                                      view_f32(dw2_e.data(), {in, out}), {}, view_f32(dy2.data(), {N, in}),
                                      view_f32(act_e.data(), {N, out}), w2v, view_f32(pre_e.data(), {N, out}), dt);
            std::vector<uint16_t> dpre16(N * out), act_bits = act_st.bits;
            ops::linear_backward_gelu(ctx, view16(dpre16, dt, {N, out}), view_f32(pb_s.data(), {out}),
                                      view_f32(dw2_s.data(), {in, out}), {}, view_f32(dy2.data(), {N, in}),
                                      view16(act_bits, dt, {N, out}), w2v, view16(pre16, dt, {N, out}), dt);
            QCOMPARE_BITS(decoded(dt, dpre16), dpre_e);
            QCOMPARE_BITS(pb_s, pb_e);
            QCOMPARE_BITS(dw2_s, dw2_e);
        }

        // SwiGLU over rows [gate | up] of width out = 2F.
        const int64_t F = out / 2;
        std::vector<float> s_e(N * F);
        ops::swiglu_forward(ctx, view_f32(s_e.data(), {N, F}), view_f32(a.f32.data(), {N, out}));
        ops::round_to(ctx, view_f32(s_e.data(), {N, F}), dt);
        std::vector<uint16_t> s16(N * F);
        ops::swiglu_forward(ctx, view16(s16, dt, {N, F}), view16(a.bits, dt, {N, out}));
        QCOMPARE_BITS(decoded(dt, s16), s_e);
        std::vector<float> sd_e(N * out), sd_s(N * out);
        ops::swiglu_backward(ctx, view_f32(sd_e.data(), {N, out}), view_f32(dyc.data(), {N, F}),
                             view_f32(a.f32.data(), {N, out}));
        ops::swiglu_backward(ctx, view_f32(sd_s.data(), {N, out}), view_f32(dyc.data(), {N, F}),
                             view16(a.bits, dt, {N, out}));
        QCOMPARE_BITS(sd_s, sd_e);
        {  // 16-bit gradients in and out
            std::vector<float> e(N * out);
            ops::swiglu_backward(ctx, view_f32(e.data(), {N, out}), view_f32(dy16.f32.data(), {N, F}),
                                 view_f32(a.f32.data(), {N, out}));
            ops::round_to(ctx, view_f32(e.data(), {N, out}), dt);
            std::vector<uint16_t> g(N * out);
            ops::swiglu_backward(ctx, view16(g, dt, {N, out}), view16(dy16.bits, dt, {N, F}),
                                 view16(a.bits, dt, {N, out}));
            QCOMPARE_BITS(decoded(dt, g), e);
        }
    }

    void attention_and_rope_on_16bit_qkv_equal_emulated_storage_data() {
        QTest::addColumn<int>("dtype");
        QTest::addColumn<bool>("interleaved");
        QTest::newRow("bf16") << int(DType::BF16) << false;
        QTest::newRow("f16 interleaved") << int(DType::F16) << true;
    }
    void attention_and_rope_on_16bit_qkv_equal_emulated_storage() {
        QFETCH(int, dtype);
        QFETCH(bool, interleaved);
        const DType dt = static_cast<DType>(dtype);
        OpContext ctx;
        // Grouped-query: 4 query heads in 2 groups, head dim 8, with attention dropout.
        const int64_t S = 70, B = 2, A = 4, G = 2, D = 8, R = 6, W = (A + 2 * G) * D;
        AttentionParams p;
        p.num_heads = int(A);
        p.num_query_groups = int(G);
        p.total_heads = int(A);
        p.batch = int(B);
        p.softmax_scale = 1.0f / std::sqrt(float(D));
        p.dropout_p = 0.2f;
        p.rng = RngStream{5, 9};
        Stored qkv = stored(dt, random_floats(S * B * W, 21, -2, 2));
        std::vector<float> cos(S * R / 2), sin(S * R / 2);
        for (int64_t i = 0; i < S * R / 2; ++i) {
            cos[i] = float(std::cos(0.01 * double(i)));
            sin[i] = float(std::sin(0.01 * double(i)));
        }
        const TensorView cv = view_f32(cos.data(), {S, R / 2}), sv = view_f32(sin.data(), {S, R / 2});

        ops::rope_forward(ctx, view_f32(qkv.f32.data(), {S, B, W}), cv, sv, p, int(R), interleaved, 0);
        ops::round_to(ctx, view_f32(qkv.f32.data(), {S * B * W}), dt);
        ops::rope_forward(ctx, view16(qkv.bits, dt, {S, B, W}), cv, sv, p, int(R), interleaved, 0);
        QCOMPARE_BITS(decoded(dt, qkv.bits), qkv.f32);

        const int64_t saved = ops::attention_saved_elements(Device::CPU, p, S);
        std::vector<float> ws(ops::attention_workspace_bytes(p, S, ops::num_threads()) / sizeof(float) + 1);
        const TensorView wsv = view_f32(ws.data(), {int64_t(ws.size())});
        std::vector<float> probs_e(saved), probs_s(saved), out_e(S * B * A * D);
        ops::attention_forward(ctx, view_f32(out_e.data(), {S, B, A * D}), view_f32(probs_e.data(), {saved}),
                               view_f32(qkv.f32.data(), {S, B, W}), wsv, p);
        ops::round_to(ctx, view_f32(out_e.data(), {S * B * A * D}), dt);
        std::vector<uint16_t> out16(S * B * A * D);
        ops::attention_forward(ctx, view16(out16, dt, {S, B, A * D}), view_f32(probs_s.data(), {saved}),
                               view16(qkv.bits, dt, {S, B, W}), wsv, p);
        QCOMPARE_BITS(decoded(dt, out16), out_e);
        QCOMPARE_BITS(probs_s, probs_e);

        std::vector<float> dout = random_floats(S * B * A * D, 22), dq_e(S * B * W), dq_s(S * B * W);
        ops::attention_backward(ctx, view_f32(dq_e.data(), {S, B, W}), view_f32(dout.data(), {S, B, A * D}),
                                view_f32(qkv.f32.data(), {S, B, W}), view_f32(out_e.data(), {S, B, A * D}),
                                view_f32(probs_e.data(), {saved}), wsv, p);
        ops::attention_backward(ctx, view_f32(dq_s.data(), {S, B, W}), view_f32(dout.data(), {S, B, A * D}),
                                view16(qkv.bits, dt, {S, B, W}), view16(out16, dt, {S, B, A * D}),
                                view_f32(probs_s.data(), {saved}), wsv, p);
        QCOMPARE_BITS(dq_s, dq_e);
        // 16-bit dout and dqkv (the context's and qkv's gradients), then RoPE's backward on it in place.
        Stored dout16 = stored(dt, dout);
        std::vector<float> dq_e2(S * B * W);
        ops::attention_backward(ctx, view_f32(dq_e2.data(), {S, B, W}), view_f32(dout16.f32.data(), {S, B, A * D}),
                                view_f32(qkv.f32.data(), {S, B, W}), view_f32(out_e.data(), {S, B, A * D}),
                                view_f32(probs_e.data(), {saved}), wsv, p);
        ops::round_to(ctx, view_f32(dq_e2.data(), {S * B * W}), dt);
        ops::rope_backward(ctx, view_f32(dq_e2.data(), {S, B, W}), cv, sv, p, int(R), interleaved, 0);
        ops::round_to(ctx, view_f32(dq_e2.data(), {S * B * W}), dt);
        std::vector<uint16_t> dq16(S * B * W);
        ops::attention_backward(ctx, view16(dq16, dt, {S, B, W}), view16(dout16.bits, dt, {S, B, A * D}),
                                view16(qkv.bits, dt, {S, B, W}), view16(out16, dt, {S, B, A * D}),
                                view_f32(probs_s.data(), {saved}), wsv, p);
        ops::rope_backward(ctx, view16(dq16, dt, {S, B, W}), cv, sv, p, int(R), interleaved, 0);
        QCOMPARE_BITS(decoded(dt, dq16), dq_e2);
    }

    void residual_stream_ops_on_16bit_views_equal_emulated_storage_data() {
        QTest::addColumn<int>("dtype");
        QTest::addColumn<float>("p");
        QTest::newRow("bf16") << int(DType::BF16) << 0.0f;
        QTest::newRow("bf16 dropout") << int(DType::BF16) << 0.1f;
        QTest::newRow("f16 dropout") << int(DType::F16) << 0.1f;
    }
    void residual_stream_ops_on_16bit_views_equal_emulated_storage() {
        // The residual stream, norm outputs, embedding output and their gradients (norms, dropout and the
        // residual adds, embeddings, the elementwise ops) on 16-bit views against the f32 op + round_to.
        QFETCH(int, dtype);
        QFETCH(float, p);
        const DType dt = static_cast<DType>(dtype);
        OpContext ctx;
        const int64_t N = 37, H = 200;  // H: three column blocks of the parameter gradients, one partial
        const RngStream rng{3, 4};
        const auto f32 = [](std::vector<float>& v, std::initializer_list<int64_t> shape) {
            return view_f32(v.data(), shape);
        };
        const auto emulated = [&](std::vector<float>& v) { ops::round_to(ctx, f32(v, {int64_t(v.size())}), dt); };
        Stored x = stored(dt, random_floats(N * H, 31, -3, 3));
        const std::vector<float> w = stored(dt, random_floats(H, 32, 0.5f, 1.5f)).f32;
        const std::vector<float> b = stored(dt, random_floats(H, 33, -0.5f, 0.5f)).f32;
        auto wc = w, bc = b;
        const TensorView wv = f32(wc, {H}), bv = f32(bc, {H});

        for (const bool rms : {false, true}) {
            // forward: x and out 16-bit; mean and rstd f32.
            std::vector<float> out_e(N * H), mean_e(N), rstd_e(N), mean_s(N), rstd_s(N);
            std::vector<uint16_t> out16(N * H);
            if (rms) {
                ops::rmsnorm_forward(ctx, f32(out_e, {N, H}), f32(rstd_e, {N}), f32(x.f32, {N, H}), wv, 1e-5f);
                ops::rmsnorm_forward(ctx, view16(out16, dt, {N, H}), f32(rstd_s, {N}), view16(x.bits, dt, {N, H}), wv,
                                     1e-5f);
            } else {
                ops::layernorm_forward(ctx, f32(out_e, {N, H}), f32(mean_e, {N}), f32(rstd_e, {N}), f32(x.f32, {N, H}),
                                       wv, bv, 1e-5f);
                ops::layernorm_forward(ctx, view16(out16, dt, {N, H}), f32(mean_s, {N}), f32(rstd_s, {N}),
                                       view16(x.bits, dt, {N, H}), wv, bv, 1e-5f);
                QCOMPARE_BITS(mean_s, mean_e);
            }
            emulated(out_e);
            QCOMPARE_BITS(decoded(dt, out16), out_e);
            QCOMPARE_BITS(rstd_s, rstd_e);

            // backward: dx (the residual gradient) 16-bit, accumulated and rounded once; dout 16-bit (a norm
            // output's gradient) or f32 (a tensor-parallel sum); dw, db f32.
            Stored dout = stored(dt, random_floats(N * H, 34, -1, 1));
            for (const bool accumulate : {true, false})
                for (const bool dout16 : {true, false}) {
                    Stored dx = stored(dt, random_floats(N * H, 35, -1, 1));
                    std::vector<float> dw_e(H, 0.5f), db_e(H, 0.25f), dw_s = dw_e, db_s = db_e;
                    const TensorView dout_s = dout16 ? view16(dout.bits, dt, {N, H}) : f32(dout.f32, {N, H});
                    if (rms) {
                        ops::rmsnorm_backward(ctx, f32(dx.f32, {N, H}), f32(dw_e, {H}), f32(dout.f32, {N, H}),
                                              f32(x.f32, {N, H}), f32(rstd_e, {N}), wv, accumulate);
                        ops::rmsnorm_backward(ctx, view16(dx.bits, dt, {N, H}), f32(dw_s, {H}), dout_s,
                                              view16(x.bits, dt, {N, H}), f32(rstd_e, {N}), wv, accumulate);
                    } else {
                        ops::layernorm_backward(ctx, f32(dx.f32, {N, H}), f32(dw_e, {H}), f32(db_e, {H}),
                                                f32(dout.f32, {N, H}), f32(x.f32, {N, H}), f32(mean_e, {N}),
                                                f32(rstd_e, {N}), wv, accumulate);
                        ops::layernorm_backward(ctx, view16(dx.bits, dt, {N, H}), f32(dw_s, {H}), f32(db_s, {H}),
                                                dout_s, view16(x.bits, dt, {N, H}), f32(mean_e, {N}),
                                                f32(rstd_e, {N}), wv, accumulate);
                    }
                    emulated(dx.f32);
                    QCOMPARE_BITS(decoded(dt, dx.bits), dx.f32);
                    QCOMPARE_BITS(dw_s, dw_e);
                    QCOMPARE_BITS(db_s, db_e);
                }
        }

        // The residual adds: out and residual 16-bit, the branch f32 (a row-parallel sum), one rounding.
        std::vector<float> branch = random_floats(N * H, 36, -2, 2), bias = random_floats(H, 37);
        for (const bool with_bias : {false, true}) {
            std::vector<float> out_e(N * H);
            std::vector<uint16_t> out16(N * H);
            if (with_bias) {
                ops::bias_dropout_add_forward(ctx, f32(out_e, {N, H}), f32(x.f32, {N, H}), f32(branch, {N, H}),
                                              f32(bias, {H}), p, rng, 5);
                ops::bias_dropout_add_forward(ctx, view16(out16, dt, {N, H}), view16(x.bits, dt, {N, H}),
                                              f32(branch, {N, H}), f32(bias, {H}), p, rng, 5);
            } else {
                ops::dropout_add_forward(ctx, f32(out_e, {N, H}), f32(x.f32, {N, H}), f32(branch, {N, H}), p, rng, 5);
                ops::dropout_add_forward(ctx, view16(out16, dt, {N, H}), view16(x.bits, dt, {N, H}),
                                         f32(branch, {N, H}), p, rng, 5);
            }
            emulated(out_e);
            QCOMPARE_BITS(decoded(dt, out16), out_e);
        }
        // Dropout of an f32 sum into a 16-bit tensor (the embedding), and of a 16-bit gradient into f32.
        {
            std::vector<float> out_e(N * H), back_e(N * H), back_s(N * H);
            std::vector<uint16_t> out16(N * H);
            ops::dropout_forward(ctx, f32(out_e, {N, H}), f32(branch, {N, H}), p, rng, 7);
            emulated(out_e);
            ops::dropout_forward(ctx, view16(out16, dt, {N, H}), f32(branch, {N, H}), p, rng, 7);
            QCOMPARE_BITS(decoded(dt, out16), out_e);
            ops::dropout_backward(ctx, f32(back_e, {N, H}), f32(x.f32, {N, H}), p, rng, 7);
            ops::dropout_backward(ctx, f32(back_s, {N, H}), view16(x.bits, dt, {N, H}), p, rng, 7);
            QCOMPARE_BITS(back_s, back_e);
        }

        // Embeddings: 16-bit rows out (word, then positions added with one rounding) and 16-bit dout in.
        {
            const int64_t V = 11, S = 37, B = 1;
            std::vector<float> table = stored(dt, random_floats(V * H, 38)).f32, wpe = random_floats(S * H, 39);
            std::vector<int32_t> ids(N);
            for (int64_t i = 0; i < N; ++i) ids[i] = int32_t((i * 7) % (V + 3)) - 1;  // some outside [0, V)
            const TensorView idv = make_view(ids.data(), DType::I32, {N});
            std::vector<float> e(N * H);
            std::vector<uint16_t> e16(N * H);
            ops::embedding_forward(ctx, f32(e, {N, H}), idv, f32(table, {V, H}), 0);
            ops::embedding_forward(ctx, view16(e16, dt, {N, H}), idv, f32(table, {V, H}), 0);
            QCOMPARE_BITS(decoded(dt, e16), e);  // the table holds 16-bit values: exact
            ops::position_embedding_forward(ctx, f32(e, {S, B, H}), f32(wpe, {S, H}), 0);
            emulated(e);
            ops::position_embedding_forward(ctx, view16(e16, dt, {S, B, H}), f32(wpe, {S, H}), 0);
            QCOMPARE_BITS(decoded(dt, e16), e);
            std::vector<float> dt_e(V * H, 0.5f), dt_s = dt_e, dp_e(S * H, 0.25f), dp_s = dp_e;
            ops::embedding_backward(ctx, f32(dt_e, {V, H}), f32(x.f32, {N, H}), idv, 0);
            ops::embedding_backward(ctx, f32(dt_s, {V, H}), view16(x.bits, dt, {N, H}), idv, 0);
            QCOMPARE_BITS(dt_s, dt_e);
            ops::position_embedding_backward(ctx, f32(dp_e, {S, H}), f32(x.f32, {S, B, H}), 0);
            ops::position_embedding_backward(ctx, f32(dp_s, {S, H}), view16(x.bits, dt, {S, B, H}), 0);
            QCOMPARE_BITS(dp_s, dp_e);
        }

        // fill, copy (both ways), scale, add and round_to on 16-bit views.
        {
            const int64_t n = N * H;
            std::vector<float> e(n, 0.3f);
            emulated(e);
            std::vector<uint16_t> h16(n);
            ops::fill(ctx, view16(h16, dt, {n}), 0.3f);
            QCOMPARE_BITS(decoded(dt, h16), e);
            std::vector<float> c_e = branch;
            emulated(c_e);
            ops::copy(ctx, view16(h16, dt, {n}), f32(branch, {n}));  // narrowing rounds once
            QCOMPARE_BITS(decoded(dt, h16), c_e);
            std::vector<float> back(n);
            ops::copy(ctx, f32(back, {n}), view16(h16, dt, {n}));  // widening is exact
            QCOMPARE_BITS(back, c_e);
            ops::scale(ctx, f32(c_e, {n}), 0.37f);
            emulated(c_e);
            ops::scale(ctx, view16(h16, dt, {n}), 0.37f);
            QCOMPARE_BITS(decoded(dt, h16), c_e);
            std::vector<float> sum_e(n);
            ops::add(ctx, f32(sum_e, {n}), f32(c_e, {n}), f32(x.f32, {n}));
            emulated(sum_e);
            std::vector<uint16_t> sum16(n);
            ops::add(ctx, view16(sum16, dt, {n}), view16(h16, dt, {n}), view16(x.bits, dt, {n}));
            QCOMPARE_BITS(decoded(dt, sum16), sum_e);
            std::vector<uint16_t> same = sum16;
            ops::round_to(ctx, view16(same, dt, {n}), dt);  // a 16-bit view holds its precision already
            QVERIFY(same == sum16);
            // ... and rounded to the other 16-bit format, kept in its own.
            const DType other = dt == DType::BF16 ? DType::F16 : DType::BF16;
            std::vector<float> o_e = decoded(dt, sum16);
            ops::round_to(ctx, f32(o_e, {n}), other);
            ops::round_to(ctx, view16(same, dt, {n}), other);
            QCOMPARE_BITS(decoded(dt, same), o_e);
        }
    }
};

MWB_TEST_SUITE_GUILESS(test_kernels_storage, TestStorage)
#undef QCOMPARE_BITS
}  // namespace test_kernels_storage
#include "test_storage.moc"
