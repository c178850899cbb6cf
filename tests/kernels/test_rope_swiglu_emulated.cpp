// The CUDA SwiGLU and RoPE kernels (kernels/cuda/rope_swiglu_kernels.cuh), executed on the CPU by
// cuda_emulation.h, against float64 references written here: SwiGLU from its definition (Shazeer 2020)
// and its backward against central differences of the float64 forward; RoPE as the rotation of each
// (a, b) pair by the table's angle, rotate-half (GPT-NeoX/Llama) and interleaved (GPT-J) pairs, full and
// partial rotary dims, a position offset, multi-head, grouped and multi-query layouts, with value heads
// and the unrotated dims left bit for bit; its backward held to the adjoint identity
// <rope(x), y> = <x, rope_backward(y)>. Both the 128-bit (V = 4) and the scalar (V = 1) kernels run
// wherever the launcher could pick them, with 32-bit and 64-bit indices, on grids small enough that the
// grid-stride loops wrap. No GPU.
#include "cuda_emulation.h"

#include "rope_swiglu_kernels.cuh"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace rs = mwb::cuda::rope_swiglu;
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
};

QTEST_GUILESS_MAIN(TestRopeSwigluEmulated)
#include "test_rope_swiglu_emulated.moc"
