// The CUDA SwiGLU and RoPE kernels (kernels/cuda/rope_swiglu_kernels.cuh), executed on the CPU by
// cuda_emulation.h, against float64 references written here: SwiGLU from its definition (Shazeer 2020)
// and its backward against central differences of the float64 forward; RoPE as the rotation of each
// (a, b) pair by the table's angle, rotate-half (GPT-NeoX/Llama) and interleaved (GPT-J) pairs, full and
// partial rotary dims, a position offset, multi-head, grouped and multi-query layouts, with value heads
// and the unrotated dims left bit for bit; its backward held to the adjoint identity
// <rope(x), y> = <x, rope_backward(y)>. Both the 128-bit (V = 4) and the scalar (V = 1) kernels run
// wherever the launcher could pick them, with 32-bit and 64-bit indices, on grids small enough that the
// grid-stride loops wrap. On bf16 and f16 views (V = 8, 4 and 1): each kernel's output bits are the
// same kernel's on the f32 values rounded after (an emulated 16-bit run: one rounding per stored
// element, unrotated elements untouched), in place for SwiGLU's backward, and within one step of the
// 16-bit format of the CPU ops on the same views (exp_approx against expf, other operation orders).
// No GPU.
#include "cuda_emulation.h"

#include "emulated_storage.h"
#include "rope_swiglu_kernels.cuh"

#include "mwb/kernels/ops.h"

#include "support/suite.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace test_kernels_rope_swiglu_emulated {

namespace rs = mwb::cuda::rope_swiglu;
namespace st = mwb::cuda::storage;
using mwb::DType;
using mwb::test::decode16;
using mwb::test::encode16;
using mwb::test::max_ulp16;
namespace emu = mwb::emulation;

namespace {

constexpr int kThreads = 64;
constexpr unsigned kBlocks = 3;

std::vector<float> uniform(std::size_t n, uint32_t seed, float lo, float hi) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(gen);
    return v;
}

/// max |got − want| / max |want|.
double normwise(const std::vector<float>& got, const std::vector<double>& want) {
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
        scale = std::max(scale, std::abs(want[i]));
    }
    return diff / scale;
}

double silu(double g) {
    return g / (1.0 + std::exp(-g));
}

// ---- SwiGLU --------------------------------------------------------------------------------------------

struct SwigluErrors {
    double forward = 0, backward = 0;
};

template <int V, class I = uint32_t>
SwigluErrors swiglu_case(int64_t rows, int64_t F, uint32_t seed) {
    std::vector<float> x = uniform(static_cast<std::size_t>(rows * 2 * F), seed, -8, 8);
    const std::vector<float> dout = uniform(static_cast<std::size_t>(rows * F), seed + 1, -1, 1);
    x[0] = 30.0f;  // saturated sigmoid at both ends, and zero
    x[1] = -30.0f;
    x[2] = 0.0f;
    std::vector<double> out(dout.size()), dx(x.size());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < F; ++c) {
            const double g = x[r * 2 * F + c], u = x[r * 2 * F + F + c], d = dout[r * F + c];
            out[r * F + c] = silu(g) * u;
            // Central differences of the float64 forward (step relative to |g|), not the formula.
            const double h = 1e-5 * std::max(1.0, std::abs(g));
            dx[r * 2 * F + c] = d * u * (silu(g + h) - silu(g - h)) / (2 * h);
            dx[r * 2 * F + F + c] = d * silu(g);
        }
    std::vector<float> gout(out.size(), -7.0f), gdx(dx.size(), -7.0f);
    emu::launch(kBlocks, 1, kThreads, [&] { rs::k_swiglu_fwd<V, I>(gout.data(), x.data(), rows, F); });
    emu::launch(kBlocks, 1, kThreads, [&] { rs::k_swiglu_bwd<V, I>(gdx.data(), dout.data(), x.data(), rows, F); });
    // In place (dx aliasing x) gives the same bits.
    std::vector<float> inplace = x;
    emu::launch(kBlocks, 1, kThreads,
                [&] { rs::k_swiglu_bwd<V, I>(inplace.data(), dout.data(), inplace.data(), rows, F); });
    if (inplace != gdx) return {0, 1.0};
    return {normwise(gout, out), normwise(gdx, dx)};
}

// ---- RoPE ----------------------------------------------------------------------------------------------

struct RopeCase {
    int64_t S, B, A, G, D, R;
    int64_t offset;
    bool interleaved;
};

struct RopeErrors {
    double forward = 0, adjoint = 0;
    int64_t untouched_changed = 0;  // value heads and dims past R that differ from the input
};

/// Angles as Llama's tables: position p, frequency i -> p·10000^(−2i/R), in float64, stored as float.
void tables(const RopeCase& c, int64_t rows, std::vector<float>& cos_t, std::vector<float>& sin_t) {
    const int64_t half = c.R / 2;
    cos_t.resize(static_cast<std::size_t>(rows * half));
    sin_t.resize(cos_t.size());
    for (int64_t p = 0; p < rows; ++p)
        for (int64_t i = 0; i < half; ++i) {
            const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / c.R);
            cos_t[p * half + i] = static_cast<float>(std::cos(angle));
            sin_t[p * half + i] = static_cast<float>(std::sin(angle));
        }
}

/// The float64 rotation of every query and key head of x (sign −1: by the negative angle).
std::vector<double> rope_reference(const RopeCase& c, const std::vector<float>& x, const std::vector<float>& cos_t,
                                   const std::vector<float>& sin_t, double sign) {
    std::vector<double> y(x.begin(), x.end());
    const int64_t per = c.A / c.G, half = c.R / 2;
    for (int64_t s = 0; s < c.S; ++s)
        for (int64_t b = 0; b < c.B; ++b)
            for (int64_t grp = 0; grp < c.G; ++grp)
                for (int64_t slot = 0; slot <= per; ++slot) {  // the group's query heads, then its key
                    const int64_t head = ((s * c.B + b) * (c.A + 2 * c.G) + grp * (per + 2) + slot) * c.D;
                    for (int64_t i = 0; i < half; ++i) {
                        const int64_t ia = head + (c.interleaved ? 2 * i : i);
                        const int64_t ib = head + (c.interleaved ? 2 * i + 1 : i + half);
                        const double co = cos_t[(s + c.offset) * half + i],
                                     si = sign * sin_t[(s + c.offset) * half + i];
                        const double a = x[ia], bv = x[ib];
                        y[ia] = a * co - bv * si;
                        y[ib] = bv * co + a * si;
                    }
                }
    return y;
}

template <int V, bool Interleaved, class I>
void run_rope(std::vector<float>& x, const std::vector<float>& cos_t, const std::vector<float>& sin_t,
              const RopeCase& c, float sign) {
    rs::RopeGeometry g{c.S, c.B, c.A, c.G, c.D, c.R, c.offset, sign};
    emu::launch(kBlocks, 1, kThreads, [&] { rs::k_rope<V, Interleaved, I>(x.data(), cos_t.data(), sin_t.data(), g); });
}

template <int V, class I = uint32_t>
RopeErrors rope_case(const RopeCase& c) {
    const int64_t n = c.S * c.B * (c.A + 2 * c.G) * c.D;
    const std::vector<float> x = uniform(static_cast<std::size_t>(n), 7, -2, 2);
    const std::vector<float> y = uniform(static_cast<std::size_t>(n), 8, -2, 2);
    std::vector<float> cos_t, sin_t;
    tables(c, c.S + c.offset + 3, cos_t, sin_t);  // a few rows more than needed: the offset picks them
    std::vector<float> fx = x, by = y;
    if (c.interleaved) {
        run_rope<V, true, I>(fx, cos_t, sin_t, c, 1.0f);
        run_rope<V, true, I>(by, cos_t, sin_t, c, -1.0f);
    } else {
        run_rope<V, false, I>(fx, cos_t, sin_t, c, 1.0f);
        run_rope<V, false, I>(by, cos_t, sin_t, c, -1.0f);
    }
    RopeErrors e;
    const std::vector<double> want = rope_reference(c, x, cos_t, sin_t, 1.0);
    e.forward = normwise(fx, want);
    // Backward is the adjoint of forward: <rope(x), y> = <x, rope_backward(y)>, both sides in float64.
    double lhs = 0, rhs = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
        lhs += static_cast<double>(fx[i]) * y[i];
        rhs += static_cast<double>(x[i]) * by[i];
        mag += std::abs(static_cast<double>(x[i]) * y[i]);
    }
    e.adjoint = std::abs(lhs - rhs) / mag;
    // What the rotation must not touch: the reference leaves those elements as x, so compare bits.
    const int64_t per = c.A / c.G;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t d = i % c.D, slot = (i / c.D) % (c.A + 2 * c.G) % (per + 2);
        if ((slot == per + 1 || d >= c.R) && (fx[i] != x[i] || by[i] != y[i])) ++e.untouched_changed;
    }
    return e;
}

// ---- 16-bit views ----------------------------------------------------------------------------------------

/// SwiGLU forward and backward with x, out, dout, dx in S (V per thread), against the f32 kernel on the
/// same values rounded after (bit for bit) and the CPU ops on the same views (one 16-bit step).
template <class S, int V>
void swiglu_16bit(int64_t rows, int64_t F) {
    constexpr DType dt = S::dtype;
    std::vector<uint16_t> x = encode16(dt, uniform(static_cast<std::size_t>(rows * 2 * F), 41, -8, 8));
    std::vector<uint16_t> dout = encode16(dt, uniform(static_cast<std::size_t>(rows * F), 42, -1, 1));
    std::vector<uint16_t> out(dout.size()), dx(x.size());
    emu::launch(kBlocks, 1, kThreads, [&] { rs::k_swiglu_fwd<V, uint32_t, S, S>(out.data(), x.data(), rows, F); });
    emu::launch(kBlocks, 1, kThreads,
                [&] { rs::k_swiglu_bwd<V, uint32_t, S, S>(dx.data(), dout.data(), x.data(), rows, F); });
    std::vector<float> x32 = decode16(dt, x), d32 = decode16(dt, dout), out32(out.size()), dx32(dx.size());
    emu::launch(kBlocks, 1, kThreads, [&] { rs::k_swiglu_fwd<1, uint32_t>(out32.data(), x32.data(), rows, F); });
    emu::launch(kBlocks, 1, kThreads,
                [&] { rs::k_swiglu_bwd<1, uint32_t>(dx32.data(), d32.data(), x32.data(), rows, F); });
    QCOMPARE(out, encode16(dt, out32));
    QCOMPARE(dx, encode16(dt, dx32));
    std::vector<uint16_t> inplace = x;  // dx aliasing x
    emu::launch(kBlocks, 1, kThreads,
                [&] { rs::k_swiglu_bwd<V, uint32_t, S, S>(inplace.data(), dout.data(), inplace.data(), rows, F); });
    QCOMPARE(inplace, dx);
    std::vector<uint16_t> cpu_out(out.size()), cpu_dx(dx.size());
    mwb::OpContext ctx;
    const auto v = [&](std::vector<uint16_t>& t, int64_t cols) { return mwb::make_view(t.data(), dt, {rows, cols}); };
    mwb::ops::swiglu_forward(ctx, v(cpu_out, F), v(x, 2 * F));
    mwb::ops::swiglu_backward(ctx, v(cpu_dx, 2 * F), v(dout, F), v(x, 2 * F));
    QVERIFY2(max_ulp16(out, cpu_out) <= 1, "swiglu_forward: more than one 16-bit step from the CPU op");
    QVERIFY2(max_ulp16(dx, cpu_dx) <= 1, "swiglu_backward: more than one 16-bit step from the CPU op");
}

/// RoPE forward and backward in place on a 16-bit qkv (tables f32), as swiglu_16bit.
template <class S, int V, bool Interleaved>
void rope_16bit(const RopeCase& c) {
    constexpr DType dt = S::dtype;
    const int64_t n = c.S * c.B * (c.A + 2 * c.G) * c.D;
    std::vector<float> cos_t, sin_t;
    tables(c, c.S + c.offset + 3, cos_t, sin_t);
    const std::vector<uint16_t> x = encode16(dt, uniform(static_cast<std::size_t>(n), 43, -2, 2));
    mwb::AttentionParams p;
    p.num_heads = static_cast<int>(c.A);
    p.num_query_groups = static_cast<int>(c.G);
    p.batch = static_cast<int>(c.B);
    p.total_heads = static_cast<int>(c.A);
    for (float sign : {1.0f, -1.0f}) {
        rs::RopeGeometry g{c.S, c.B, c.A, c.G, c.D, c.R, c.offset, sign};
        std::vector<uint16_t> got = x;
        emu::launch(kBlocks, 1, kThreads,
                    [&] { rs::k_rope<V, Interleaved, uint32_t, S>(got.data(), cos_t.data(), sin_t.data(), g); });
        std::vector<float> want = decode16(dt, x);
        emu::launch(kBlocks, 1, kThreads,
                    [&] { rs::k_rope<1, Interleaved, uint32_t>(want.data(), cos_t.data(), sin_t.data(), g); });
        QCOMPARE(got, encode16(dt, want));  // also: what is not rotated keeps its bits
        std::vector<uint16_t> cpu = x;
        mwb::OpContext ctx;
        const mwb::TensorView qkv = mwb::make_view(cpu.data(), dt, {c.S, c.B, (c.A + 2 * c.G) * c.D});
        const int64_t rows = static_cast<int64_t>(cos_t.size()) / (c.R / 2);
        const mwb::TensorView ct = mwb::view_f32(cos_t.data(), {rows, c.R / 2}), stt = mwb::view_f32(sin_t.data(), {rows, c.R / 2});
        if (sign > 0)
            mwb::ops::rope_forward(ctx, qkv, ct, stt, p, static_cast<int>(c.R), Interleaved, c.offset);
        else
            mwb::ops::rope_backward(ctx, qkv, ct, stt, p, static_cast<int>(c.R), Interleaved, c.offset);
        QVERIFY2(max_ulp16(got, cpu) <= 1, "rope: more than one 16-bit step from the CPU op");
    }
}

}  // namespace

class TestRopeSwigluEmulated : public QObject {
    Q_OBJECT

    static void check_rope(const RopeErrors& e, const char* what) {
        QVERIFY2(e.forward <= 1e-6, qPrintable(QString("%1: forward error %2 > 1e-6").arg(what).arg(e.forward)));
        QVERIFY2(
            e.adjoint <= 1e-6,
            qPrintable(QString("%1: <rope(x), y> − <x, rope_backward(y)> = %2 (relative)").arg(what).arg(e.adjoint)));
        QVERIFY2(
            e.untouched_changed == 0,
            qPrintable(QString("%1: %2 value-head or unrotated elements changed").arg(what).arg(e.untouched_changed)));
    }
    static void check_swiglu(const SwigluErrors& e, const char* what) {
        QVERIFY2(e.forward <= 1e-6, qPrintable(QString("%1: forward error %2 > 1e-6").arg(what).arg(e.forward)));
        // The central differences themselves carry ~1e-9 of truncation and rounding.
        QVERIFY2(e.backward <= 1e-6,
                 qPrintable(QString("%1: backward error %2 > 1e-6 (1: in-place differs)").arg(what).arg(e.backward)));
    }

private slots:
    void swiglu_matches_float64() {
        check_swiglu(swiglu_case<4>(37, 12, 1), "V 4, 37 rows of 2·12");
        check_swiglu(swiglu_case<1>(37, 12, 1), "V 1, 37 rows of 2·12");
        check_swiglu(swiglu_case<1>(19, 7, 2), "V 1, 19 rows of 2·7");
        check_swiglu(swiglu_case<4, int64_t>(37, 12, 1), "V 4, 64-bit indices");
    }

    void rope_rotate_half_matches_float64() {
        // Multi-head (G = A), full rotary dim; then partial (R = D/2) with an offset in a grouped layout.
        check_rope(rope_case<4>({9, 2, 3, 3, 16, 16, 0, false}), "rotate-half V 4, MHA, R = D");
        check_rope(rope_case<1>({9, 2, 3, 3, 16, 16, 0, false}), "rotate-half V 1, MHA, R = D");
        check_rope(rope_case<4>({7, 2, 4, 2, 32, 16, 5, false}), "rotate-half V 4, GQA 4/2, R = D/2, offset 5");
        check_rope(rope_case<1>({7, 2, 4, 2, 32, 16, 5, false}), "rotate-half V 1, GQA 4/2, R = D/2, offset 5");
        check_rope(rope_case<1>({5, 3, 4, 1, 12, 6, 2, false}), "rotate-half V 1, MQA, R/2 = 3, offset 2");
        check_rope(rope_case<4, int64_t>({7, 2, 4, 2, 32, 16, 5, false}), "rotate-half V 4, 64-bit indices");
    }

    void rope_interleaved_matches_float64() {
        check_rope(rope_case<4>({9, 2, 3, 3, 16, 16, 0, true}), "interleaved V 4, MHA, R = D");
        check_rope(rope_case<1>({9, 2, 3, 3, 16, 16, 0, true}), "interleaved V 1, MHA, R = D");
        check_rope(rope_case<4>({7, 1, 6, 2, 24, 8, 11, true}), "interleaved V 4, GQA 6/2, R = D/3, offset 11");
        check_rope(rope_case<1>({6, 2, 2, 1, 10, 6, 1, true}), "interleaved V 1, MQA, D 10, R 6, offset 1");
        check_rope(rope_case<1, int64_t>({6, 2, 2, 1, 10, 6, 1, true}), "interleaved V 1, 64-bit indices");
    }

    void swiglu_on_16bit_views() {
        swiglu_16bit<st::BF16, 8>(21, 16);
        swiglu_16bit<st::BF16, 4>(21, 12);
        swiglu_16bit<st::F16, 8>(21, 16);
        swiglu_16bit<st::F16, 1>(19, 7);
    }

    void rope_on_16bit_views() {
        rope_16bit<st::BF16, 8, false>({7, 2, 4, 2, 32, 16, 5, false});
        rope_16bit<st::BF16, 4, true>({9, 2, 3, 3, 16, 8, 0, true});
        rope_16bit<st::F16, 8, true>({7, 2, 4, 2, 32, 16, 5, true});
        rope_16bit<st::F16, 1, false>({5, 3, 4, 1, 12, 6, 2, false});
    }
};

MWB_TEST_SUITE_GUILESS(test_kernels_rope_swiglu_emulated, TestRopeSwigluEmulated)
}  // namespace test_kernels_rope_swiglu_emulated
#include "test_rope_swiglu_emulated.moc"
