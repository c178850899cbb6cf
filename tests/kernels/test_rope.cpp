// Rotary position embedding: forward against a float64 implementation written the way the published
// reference code (GPT-NeoX/Llama, GPT-J) states it — x·cos + rotate_half(x)·sin with the frequency table
// repeated over both halves, or every second pair for GPT-J — on grouped qkv with partial rotary dims;
// backward against central finite differences of it; untouched parts (value heads, dims past R) exact.
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"

#include <QtTest>

#include <cmath>

namespace test_kernels_rope {

using namespace mwb;
using mwb::test::finite_difference;
using mwb::test::normwise_error;
using mwb::test::random_floats;
using mwb::test::to_double;

namespace {

struct Shape {
    int64_t S, B, A, G, D, R;
    bool interleaved = false;
    int64_t offset = 0;  // first table row used

    int64_t per_group() const { return A / G; }
    int64_t width() const { return (A + 2 * G) * D; }
    int64_t size() const { return S * B * width(); }
    int64_t positions() const { return S + offset + 3; }  // the tables hold more rows than used
    AttentionParams params() const {
        AttentionParams p;
        p.num_heads = int(A);
        p.num_query_groups = int(G);
        p.batch = int(B);
        return p;
    }
};

/// Angles pos·base^(-2i/R) in float64; the op gets them rounded to float, the reference uses those floats.
void tables(const Shape& s, std::vector<float>& cos, std::vector<float>& sin) {
    const int64_t half = s.R / 2;
    cos.resize(s.positions() * half);
    sin.resize(cos.size());
    for (int64_t p = 0; p < s.positions(); ++p)
        for (int64_t i = 0; i < half; ++i) {
            const double angle = double(p) * std::pow(10000.0, -2.0 * double(i) / double(s.R));
            cos[p * half + i] = float(std::cos(angle));
            sin[p * half + i] = float(std::sin(angle));
        }
}

/// One head's first R dims: x·cos + rot(x)·sin with rot = rotate_half (−x2, x1) and the table [f | f],
/// or for GPT-J rot = (−x1, x0, −x3, x2, …) and the table (f0, f0, f1, f1, …).
void rotate_ref(double* x, const float* c, const float* s, int64_t R, bool interleaved) {
    std::vector<double> out(R);
    for (int64_t j = 0; j < R; ++j) {
        const int64_t f = interleaved ? j / 2 : j % (R / 2);
        double rot;
        if (interleaved)
            rot = j % 2 == 0 ? -x[j + 1] : x[j - 1];
        else
            rot = j < R / 2 ? -x[j + R / 2] : x[j - R / 2];
        out[j] = x[j] * double(c[f]) + rot * double(s[f]);
    }
    std::copy(out.begin(), out.end(), x);
}

std::vector<double> rope_ref(std::vector<double> qkv, const Shape& s, const std::vector<float>& cos,
                             const std::vector<float>& sin) {
    const int64_t half = s.R / 2;
    for (int64_t i = 0; i < s.S; ++i)
        for (int64_t b = 0; b < s.B; ++b)
            for (int64_t g = 0; g < s.G; ++g)
                for (int64_t h = 0; h <= s.per_group(); ++h) {  // query heads, then the key head
                    double* x = qkv.data() + (i * s.B + b) * s.width() + (g * (s.per_group() + 2) + h) * s.D;
                    const int64_t row = (i + s.offset) * half;
                    rotate_ref(x, cos.data() + row, sin.data() + row, s.R, s.interleaved);
                }
    return qkv;
}

void run(const Shape& s, std::vector<float>& x, const std::vector<float>& cos, const std::vector<float>& sin,
         bool backward) {
    OpContext ctx;
    const auto c = view_f32(const_cast<float*>(cos.data()), {s.positions(), s.R / 2});
    const auto n = view_f32(const_cast<float*>(sin.data()), {s.positions(), s.R / 2});
    const auto v = view_f32(x.data(), {s.S, s.B, s.width()});
    if (backward)
        ops::rope_backward(ctx, v, c, n, s.params(), int(s.R), s.interleaved, s.offset);
    else
        ops::rope_forward(ctx, v, c, n, s.params(), int(s.R), s.interleaved, s.offset);
}

}  // namespace

}  // namespace test_kernels_rope
Q_DECLARE_METATYPE(test_kernels_rope::Shape)
namespace test_kernels_rope {

class TestRope : public QObject {
    Q_OBJECT
private slots:
    void matches_float64_and_finite_differences_data() {
        QTest::addColumn<Shape>("shape");
        QTest::newRow("mha_full_rotate_half") << Shape{5, 2, 2, 2, 8, 8};
        QTest::newRow("gqa_partial_rotate_half") << Shape{6, 2, 4, 2, 8, 4, false, 2};
        QTest::newRow("mqa_interleaved") << Shape{4, 3, 3, 1, 6, 6, true};
        QTest::newRow("gqa_partial_interleaved_offset") << Shape{5, 1, 4, 2, 10, 6, true, 7};
    }
    void matches_float64_and_finite_differences() {
        QFETCH(Shape, shape);
        const Shape& s = shape;
        std::vector<float> cos, sin;
        tables(s, cos, sin);
        const auto x = random_floats(s.size(), 1, -2.0f, 2.0f);
        auto got = x;
        run(s, got, cos, sin, false);
        const auto ref = rope_ref(to_double(x), s, cos, sin);
        // Two float products and a sum per element: a few ulp of the largest.
        MWB_VERIFY_ERROR(normwise_error(got, ref), 1e-6);
        // Value heads and dims past R are untouched, bit for bit.
        for (int64_t n = 0; n < s.S * s.B; ++n)
            for (int64_t g = 0; g < s.G; ++g)
                for (int64_t h = 0; h < s.per_group() + 2; ++h)
                    for (int64_t d = h <= s.per_group() ? s.R : 0; d < s.D; ++d) {
                        const int64_t at = n * s.width() + (g * (s.per_group() + 2) + h) * s.D + d;
                        QCOMPARE(got[at], x[at]);
                    }

        // Backward: the gradient of Σ rope(x)·dy with respect to x, by central differences in float64.
        const auto dy = random_floats(s.size(), 2);
        auto dx = dy;
        run(s, dx, cos, sin, true);
        const auto gd = to_double(dy);
        const auto fd = finite_difference(to_double(x), [&](const std::vector<double>& v) {
            const auto y = rope_ref(v, s, cos, sin);
            double l = 0;
            for (std::size_t i = 0; i < y.size(); ++i) l += y[i] * gd[i];
            return l;
        });
        MWB_VERIFY_ERROR(normwise_error(dx, fd), 1e-6);
    }

    void invalid_arguments_throw() {
        const Shape s{4, 1, 2, 1, 8, 8};
        std::vector<float> cos, sin, x(s.size());
        tables(s, cos, sin);
        OpContext ctx;
        const auto c = view_f32(cos.data(), {s.positions(), 4}), n = view_f32(sin.data(), {s.positions(), 4});
        const auto v = view_f32(x.data(), {4, 1, s.width()});
        ops::rope_forward(ctx, v, c, n, s.params(), 8, false, 0);                                         // right
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::rope_forward(ctx, v, c, n, s.params(), 7, false, 0));   // odd R
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::rope_forward(ctx, v, c, n, s.params(), 10, false, 0));  // R > D
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::rope_forward(ctx, v, c, n, s.params(), 6, false, 0));   // table width
        QVERIFY_THROWS_EXCEPTION(mwb::Error,
                                 ops::rope_forward(ctx, v, c, n, s.params(), 8, false, 4));  // past the table
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::rope_forward(ctx, view_f32(x.data(), {4, 1, s.width() - 1}), c, n,
                                                               s.params(), 8, false, 0));
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_rope, TestRope)
}  // namespace test_kernels_rope
#include "test_rope.moc"
