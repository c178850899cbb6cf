// Generation's attention over a key/value cache (ops::cached_attention_forward): the CPU op and the CUDA
// kernels (kernels/cuda/cached_attention_kernels.cuh, executed on CPU threads by cuda_emulation.h) against
// a float64 reference written here from the definition (softmax(q·kᵀ/√D)·v over the row's positions
// [0, pos], K/V of the query head's group), and the CPU op against the training op: prefilling a whole
// sequence into an empty cache row gives attention_forward's causal output. Multi-head, grouped (A/G = 4)
// and multi-query layouts, head dims 32, 64, 80 and 128 (80: lanes past D idle), lengths below and above
// the kernel's four warps, a prefill (tokens of one call reading each other's k/v) and a decode step of
// rows at different positions. Outputs and the cache start as sentinels: an element that is never written
// fails, and the cache outside the written positions must keep its sentinel. No GPU.
#include "cuda_emulation.h"

#include "cached_attention_kernels.cuh"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"
#include "support/reference.h"
#include "support/suite.h"

#include <QtTest>

#include <cmath>
#include <random>
#include <vector>

namespace test_kernels_cached_attention_emulated {

using namespace mwb;
namespace ca = mwb::cuda::cached_attention;
namespace emu = mwb::emulation;

namespace {

constexpr float kSentinel = -777.0f;

struct Shape {
    int A, G;
    int64_t D;
};

/// One cache (R rows of L positions) and its calls; `ref_k/ref_v` mirror what the cache must hold.
struct Cache {
    Shape s;
    int64_t R, L;
    std::vector<float> k, v;           // the op's cache (R, G, L, D)
    std::vector<double> ref_k, ref_v;  // what it must hold
    std::vector<bool> filled;          // (R, G, L): written positions
    int64_t W() const { return (s.A + 2 * s.G) * s.D; }
    int64_t at(int64_t row, int64_t g, int64_t pos) const { return ((row * s.G + g) * L + pos) * s.D; }
    Cache(Shape shape, int64_t rows, int64_t len) : s(shape), R(rows), L(len) {
        const auto n = static_cast<std::size_t>(R * s.G * L * s.D);
        k.assign(n, kSentinel);
        v.assign(n, kSentinel);
        ref_k.assign(n, kSentinel);
        ref_v.assign(n, kSentinel);
    }
};

AttentionParams params(const Shape& s) {
    AttentionParams p;
    p.num_heads = s.A;
    p.num_query_groups = s.G;
    p.total_heads = s.A;
    p.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.D)));
    return p;
}

/// The float64 reference of one call: append k/v, then each (token, head) over its row.
std::vector<double> reference(Cache& c, const std::vector<float>& qkv, const std::vector<int32_t>& rows,
                              const std::vector<int32_t>& pos) {
    const int64_t n = static_cast<int64_t>(rows.size()), A = c.s.A, G = c.s.G, D = c.s.D, per = A / G;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t g = 0; g < G; ++g)
            for (int64_t d = 0; d < D; ++d) {
                const int64_t col = (g * (per + 2) + per) * D + d;
                c.ref_k[c.at(rows[i], g, pos[i]) + d] = qkv[i * c.W() + col];
                c.ref_v[c.at(rows[i], g, pos[i]) + d] = qkv[i * c.W() + col + D];
            }
    std::vector<double> out(static_cast<std::size_t>(n * A * D));
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < A; ++h) {
            const int64_t g = h / per, len = pos[i] + 1;
            const float* q = qkv.data() + i * c.W() + (g * (per + 2) + h % per) * D;
            std::vector<double> s(static_cast<std::size_t>(len));
            double max = -INFINITY, sum = 0;
            for (int64_t j = 0; j < len; ++j) {
                double dot = 0;
                for (int64_t d = 0; d < D; ++d) dot += double{q[d]} * c.ref_k[c.at(rows[i], g, j) + d];
                s[j] = dot * scale;
                max = std::max(max, s[j]);
            }
            for (double& x : s) sum += (x = std::exp(x - max));
            for (int64_t j = 0; j < len; ++j)
                for (int64_t d = 0; d < D; ++d)
                    out[(i * A + h) * D + d] += s[j] / sum * c.ref_v[c.at(rows[i], g, j) + d];
        }
    return out;
}

double normwise(const std::vector<float>& got, const std::vector<double>& want) {
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        diff = std::max(diff, std::abs(double{got[i]} - want[i]));
        scale = std::max(scale, std::abs(want[i]));
    }
    return diff / scale;
}

TensorView f32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return make_view(v.data(), DType::F32, shape);
}
TensorView i32(std::vector<int32_t>& v) {
    return make_view(v.data(), DType::I32, {static_cast<int64_t>(v.size())});
}

/// The CUDA kernels as ops_cached_attention.cu launches them.
template <int P>
void run_kernels(Cache& c, std::vector<float>& out, const std::vector<float>& qkv, const std::vector<int32_t>& rows,
                 const std::vector<int32_t>& pos) {
    ca::Geometry g{};
    g.n = static_cast<int64_t>(rows.size());
    g.A = c.s.A;
    g.G = c.s.G;
    g.D = c.s.D;
    g.R = c.R;
    g.L = c.L;
    g.per_group = c.s.A / c.s.G;
    g.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.s.D)));
    // A grid smaller than the elements: the append's grid-stride loop wraps.
    emu::launch(2, 1, 64,
                [&] { ca::k_cache_append<uint32_t>(c.k.data(), c.v.data(), qkv.data(), rows.data(), pos.data(), g); });
    emu::launch(
        static_cast<unsigned>(g.n), static_cast<unsigned>(g.A), ca::kThreads,
        [&] { ca::k_cached_attention<P>(out.data(), qkv.data(), c.k.data(), c.v.data(), rows.data(), pos.data(), g); },
        static_cast<std::size_t>(ca::kWarps * (2 + g.D)) * sizeof(float));
}

/// A prefill of `prompt` tokens into row 1, then two decode steps of rows {0, 1, 2} (row 0 and 2 given
/// short prefills first), on the CPU op (cuda = false) or the kernels; the worst error of any call's
/// output and the final cache, and whether the unwritten cache kept its sentinels.
template <int P>
double scenario(Shape shape, int64_t prompt, bool cuda, bool& untouched) {
    const int64_t R = 3, L = prompt + 8;
    Cache c(shape, R, L);
    OpContext cpu;
    const AttentionParams p = params(shape);
    double worst = 0;
    const auto call = [&](std::vector<int32_t> rows, std::vector<int32_t> pos, uint32_t seed) {
        const int64_t n = static_cast<int64_t>(rows.size());
        const std::vector<float> qkv = test::random_floats(static_cast<std::size_t>(n * c.W()), seed, -2, 2);
        std::vector<float> out(static_cast<std::size_t>(n * shape.A * shape.D), kSentinel);
        const std::vector<double> want = reference(c, qkv, rows, pos);
        if (cuda) {
            run_kernels<P>(c, out, qkv, rows, pos);
        } else {
            std::vector<float> x = qkv;
            ops::cached_attention_forward(cpu, f32(out, {n, shape.A * shape.D}), f32(c.k, {R, shape.G, L, shape.D}),
                                          f32(c.v, {R, shape.G, L, shape.D}), f32(x, {n, c.W()}), i32(rows), i32(pos),
                                          p);
        }
        worst = std::max(worst, normwise(out, want));
    };
    std::vector<int32_t> r1(static_cast<std::size_t>(prompt), 1), p1(static_cast<std::size_t>(prompt));
    for (int64_t i = 0; i < prompt; ++i) p1[i] = static_cast<int32_t>(i);
    call(r1, p1, 1);
    call({0, 0}, {0, 1}, 2);
    call({2}, {0}, 3);
    call({0, 1, 2}, {2, static_cast<int32_t>(prompt), 1}, 4);
    call({2, 1}, {2, static_cast<int32_t>(prompt + 1)}, 5);
    worst = std::max({worst, normwise(c.k, c.ref_k), normwise(c.v, c.ref_v)});
    untouched = true;
    for (std::size_t e = 0; e < c.k.size(); ++e)
        if (c.ref_k[e] == kSentinel) untouched = untouched && c.k[e] == kSentinel && c.v[e] == kSentinel;
    return worst;
}

}  // namespace

class TestCachedAttention : public QObject {
    Q_OBJECT
private slots:
    void cpu_op_matches_float64() {
        for (const Shape s : {Shape{4, 4, 32}, Shape{8, 2, 64}, Shape{4, 1, 80}, Shape{2, 2, 128}})
            for (const int64_t prompt : {1, 3, 37}) {
                bool untouched = false;
                const double e = scenario<1>(s, prompt, false, untouched);
                QVERIFY2(
                    e < 1e-5,
                    qPrintable(QString("A=%1 G=%2 D=%3 prompt %4: %5").arg(s.A).arg(s.G).arg(s.D).arg(prompt).arg(e)));
                QVERIFY(untouched);
            }
    }

    void cuda_kernels_match_float64() {
        struct Case {
            Shape s;
            int64_t prompt;
        };
        // Each block is 128 host threads here: few, short cases (the CPU op above covers the rest).
        for (const Case c : {Case{{4, 4, 32}, 1}, Case{{2, 2, 32}, 37}, Case{{8, 2, 64}, 3}, Case{{4, 1, 80}, 21},
                             Case{{2, 2, 128}, 2}}) {
            bool untouched = false;
            double e = 0;
            switch ((c.s.D + 31) / 32) {
                case 1:
                    e = scenario<1>(c.s, c.prompt, true, untouched);
                    break;
                case 2:
                    e = scenario<2>(c.s, c.prompt, true, untouched);
                    break;
                case 3:
                    e = scenario<3>(c.s, c.prompt, true, untouched);
                    break;
                default:
                    e = scenario<4>(c.s, c.prompt, true, untouched);
                    break;
            }
            QVERIFY2(
                e < 1e-5,
                qPrintable(
                    QString("A=%1 G=%2 D=%3 prompt %4: %5").arg(c.s.A).arg(c.s.G).arg(c.s.D).arg(c.prompt).arg(e)));
            QVERIFY(untouched);
        }
    }

    void prefill_equals_training_attention() {
        // A whole sequence prefilled into an empty row is causal self-attention: attention_forward's output.
        const Shape s{8, 2, 64};
        const int64_t S = 45, W = (s.A + 2 * s.G) * s.D;
        AttentionParams p = params(s);
        std::vector<float> qkv = test::random_floats(static_cast<std::size_t>(S * W), 7, -2, 2);
        OpContext cpu;
        std::vector<float> want(static_cast<std::size_t>(S * s.A * s.D)), got(want.size(), kSentinel);
        std::vector<float> probs(static_cast<std::size_t>(ops::attention_saved_elements(Device::CPU, p, S)));
        std::vector<float> ws(
            static_cast<std::size_t>(ops::attention_workspace_bytes(Device::CPU, p, S, ops::num_threads()) / 4 + 1));
        ops::attention_forward(cpu, f32(want, {S, 1, s.A * s.D}), f32(probs, {static_cast<int64_t>(probs.size())}),
                               f32(qkv, {S, 1, W}), f32(ws, {static_cast<int64_t>(ws.size())}), p);
        std::vector<float> k(static_cast<std::size_t>(2 * s.G * 64 * s.D)), v(k.size());
        std::vector<int32_t> rows(S, 1), pos(S);
        for (int64_t i = 0; i < S; ++i) pos[i] = static_cast<int32_t>(i);
        ops::cached_attention_forward(cpu, f32(got, {S, s.A * s.D}), f32(k, {2, s.G, 64, s.D}),
                                      f32(v, {2, s.G, 64, s.D}), f32(qkv, {S, W}), i32(rows), i32(pos), p);
        double diff = 0;
        for (std::size_t e = 0; e < want.size(); ++e) diff = std::max(diff, double{std::abs(got[e] - want[e])});
        QVERIFY2(diff < 1e-5, qPrintable(QString::number(diff)));
    }

    void bad_shapes_and_indices_name_the_op() {
        const Shape s{4, 2, 32};
        const int64_t W = (s.A + 2 * s.G) * s.D;
        OpContext cpu;
        std::vector<float> qkv(static_cast<std::size_t>(W)), out(static_cast<std::size_t>(s.A * s.D));
        std::vector<float> k(static_cast<std::size_t>(s.G * 8 * s.D)), v(k.size());
        std::vector<int32_t> rows{0}, pos{8};
        const auto call = [&](int64_t groups) {
            ops::cached_attention_forward(cpu, f32(out, {1, s.A * s.D}), f32(k, {1, groups, 8 * s.G / groups, s.D}),
                                          f32(v, {1, groups, 8 * s.G / groups, s.D}), f32(qkv, {1, W}), i32(rows),
                                          i32(pos), params(s));
        };
        try {  // position 8 of an 8-position cache
            call(s.G);
            QFAIL("no error");
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).contains("cached_attention_forward") && QString(e.what()).contains("position 8"),
                     e.what());
        }
        pos[0] = 0;
        try {  // a cache of 1 group for G = 2
            call(1);
            QFAIL("no error");
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).contains("k_cache"), e.what());
        }
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_cached_attention_emulated, TestCachedAttention)
}  // namespace test_kernels_cached_attention_emulated
#include "test_cached_attention_emulated.moc"
