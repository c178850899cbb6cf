// Elementwise ops, 16-bit storage rounding and the deterministic sum of squares, against float64 and
// independent rounding references (GCC's _Float16 for fp16, a bf16 written from its definition).
#include "support/precision_ref.h"
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"
#include "support/threads.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"

#include <QtTest>

#include <bit>
#include <cmath>
#include <limits>

namespace test_kernels_elementwise {

using namespace mwb;
using mwb::test::bf16_ref;
using mwb::test::bits_of;
using mwb::test::float_of;
using mwb::test::fp16_ref;
using mwb::test::random_floats;

namespace {

TensorView view(std::vector<float>& v) {
    return view_f32(v.data(), {static_cast<int64_t>(v.size())});
}

/// Every rounding boundary of a 16-bit format whose values are the floats `value(h)` for h in [0, 0x7FFF]:
/// each value, the midpoint to the next one (a tie), one float ulp either side of that midpoint, both signs.
template <class Value>
std::vector<float> boundaries(uint32_t last, Value value) {
    std::vector<float> v;
    for (uint32_t h = 0; h < last; ++h) {
        const double a = value(h), b = value(h + 1);
        const float mid = static_cast<float>((a + b) / 2);  // 1 bit more than the format: exact in float
        for (float x : {static_cast<float>(a), mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)}) {
            v.push_back(x);
            v.push_back(-x);
        }
    }
    return v;
}

/// Hand-picked cases: zeros, float32 subnormals, fp16 subnormals and ties, the fp16 overflow threshold
/// (65504 is the largest half, 65520 the midpoint to the first value that would not fit), float extremes
/// and infinities, both signs.
std::vector<float> edge_cases() {
    const float fmax = std::numeric_limits<float>::max();
    std::vector<float> v = {0.0f,
                            float_of(0x00000001u),  // smallest float32 subnormal
                            float_of(0x007FFFFFu),  // largest float32 subnormal
                            float_of(0x00800000u),  // smallest float32 normal
                            0x1p-25f,               // half the smallest fp16 subnormal: ties to 0
                            0x1.8p-25f,             // rounds up to 2^-24
                            0x1p-24f,               // smallest fp16 subnormal
                            0x1.8p-24f,             // tie between 1 and 2 quanta: to 2 (even)
                            0x1.4p-23f,             // tie between 2 and 3 quanta: to 2 (even)
                            0x1.ff8p-15f,           // largest fp16 subnormal (1023 · 2^-24)
                            0x1.ffcp-15f,           // midpoint to 2^-14: to the normal (even)
                            0x1p-14f,               // smallest fp16 normal
                            1.0f,
                            1.0f + 0x1p-11f,
                            1.0f + 0x1.8p-10f,
                            1.0f + 0x1p-8f,
                            1.0f + 0x1.8p-8f,
                            65504.0f,
                            std::nextafter(65504.0f, INFINITY),
                            65512.0f,
                            std::nextafter(65520.0f, 0.0f),
                            65520.0f,
                            std::nextafter(65520.0f, INFINITY),
                            65536.0f,
                            1e5f,
                            3.3895314e38f,  // largest bf16
                            std::nextafter(fmax, 0.0f),
                            fmax,
                            INFINITY};
    const std::size_t n = v.size();
    for (std::size_t i = 0; i < n; ++i) v.push_back(-v[i]);
    return v;
}

/// NaNs, both signs: quiet and signalling, payloads in the high bits (kept by a 16-bit store) and only in
/// the low bits (dropped by it), and random payloads.
std::vector<float> nans() {
    std::vector<float> v;
    for (uint32_t b : {0x7FC00000u, 0x7F800001u, 0x7FA00000u, 0x7FC0ABCDu, 0x7FFFFFFFu, 0x7F801000u})
        v.push_back(float_of(b));
    std::mt19937 gen(12);
    for (int i = 0; i < 1000; ++i) v.push_back(float_of(0x7F800001u + static_cast<uint32_t>(gen() % 0x7FFFFFu)));
    const std::size_t n = v.size();
    for (std::size_t i = 0; i < n; ++i) v.push_back(-v[i]);
    return v;
}

/// Random bit patterns: every exponent, subnormals and infinities alike (NaNs have their own test).
std::vector<float> random_patterns(std::size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::vector<float> v;
    while (v.size() < n) {
        const float x = float_of(static_cast<uint32_t>(gen()));
        if (!std::isnan(x)) v.push_back(x);
    }
    return v;
}

/// Compares op-rounded values with a reference element by element; returns the first mismatch.
QString rounding_mismatch(const std::vector<float>& in, const std::vector<float>& got, float (*ref)(float)) {
    for (std::size_t i = 0; i < in.size(); ++i)
        if (bits_of(got[i]) != bits_of(ref(in[i])))
            return QStringLiteral("input 0x%1 (%2): got 0x%3, reference 0x%4")
                .arg(bits_of(in[i]), 8, 16, QLatin1Char('0'))
                .arg(double(in[i]), 0, 'g', 9)
                .arg(bits_of(got[i]), 8, 16, QLatin1Char('0'))
                .arg(bits_of(ref(in[i])), 8, 16, QLatin1Char('0'));
    return {};
}

}  // namespace

class TestElementwise : public QObject {
    Q_OBJECT
private slots:
    void fill_sets_every_element() {
        std::vector<float> x(1001, std::nanf(""));  // odd size: no element left to a vector tail
        OpContext ctx;
        ops::fill(ctx, view(x), -0.0f);
        MWB_VERIFY_BITWISE(x, std::vector<float>(1001, -0.0f));
        ops::fill(ctx, view(x), 2.5f);
        MWB_VERIFY_BITWISE(x, std::vector<float>(1001, 2.5f));
    }

    void copy_is_bit_exact() {
        auto src = random_patterns(1003, 1);
        for (float v : nans()) src.push_back(v);  // NaN payloads and signalling NaNs too: a copy moves bits
        std::vector<float> dst(src.size(), 0.0f);
        OpContext ctx;
        ops::copy(ctx, view(dst), view(src));
        MWB_VERIFY_BITWISE(dst, src);
    }

    void scale_matches_float64() {
        // A product of two floats is exact in float64, so rounding it to float is the correctly rounded
        // product: the op must match bit for bit.
        auto x = random_floats(1003, 2, -1e3f, 1e3f);
        std::vector<float> ref(x.size());
        const float alpha = -0.3f;
        for (std::size_t i = 0; i < x.size(); ++i) ref[i] = static_cast<float>(double(x[i]) * alpha);
        OpContext ctx;
        ops::scale(ctx, view(x), alpha);
        MWB_VERIFY_BITWISE(x, ref);
    }

    void add_matches_float64_and_may_alias() {
        // float64 has more than 2·24 + 2 bits, so rounding the float64 sum to float is the correctly rounded
        // float sum (double rounding is innocuous): bit-exact.
        auto a = random_floats(1003, 3, -1e3f, 1e3f), b = random_floats(1003, 4, -1.0f, 1.0f);
        std::vector<float> ref(a.size()), out(a.size(), std::nanf(""));
        for (std::size_t i = 0; i < a.size(); ++i) ref[i] = static_cast<float>(double(a[i]) + double(b[i]));
        OpContext ctx;
        ops::add(ctx, view(out), view(a), view(b));
        MWB_VERIFY_BITWISE(out, ref);
        auto a2 = a, b2 = b;
        ops::add(ctx, view(a2), view(a2), view(b));  // out aliases a
        MWB_VERIFY_BITWISE(a2, ref);
        ops::add(ctx, view(b2), view(a), view(b2));  // out aliases b
        MWB_VERIFY_BITWISE(b2, ref);
    }

    void round_to_f16_matches_float16() {
        auto x = edge_cases();
        const auto fp16_value = [](uint32_t h) {  // positive half h as a double (0x7C00 is inf: stop before)
            const uint32_t e = h >> 10, m = h & 0x3FFu;
            return e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), int(e) - 25);
        };
        for (float v : boundaries(0x7BFF, fp16_value)) x.push_back(v);
        for (float v : random_patterns(200000, 5)) x.push_back(v);
        for (float v : random_floats(100000, 6, -70000.0f, 70000.0f)) x.push_back(v);
        auto got = x;
        OpContext ctx;
        ops::round_to(ctx, view(got), DType::F16);
        const QString diff = rounding_mismatch(x, got, fp16_ref);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
    }

    void round_to_bf16_matches_definition() {
        auto x = edge_cases();
        const auto bf16_value = [](uint32_t h) { return double(float_of(h << 16)); };
        for (float v : boundaries(0x7F7F, bf16_value)) x.push_back(v);  // 0x7F80 is inf
        for (float v : random_patterns(200000, 7)) x.push_back(v);
        auto got = x;
        OpContext ctx;
        ops::round_to(ctx, view(got), DType::BF16);
        const QString diff = rounding_mismatch(x, got, bf16_ref);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
    }

    void round_to_keeps_nan_a_storable_nan() {
        // A 16-bit store keeps only the top bits of a NaN: the emulated value must be a NaN that the format
        // can hold (low 16 bits zero for bf16, low 13 for fp16), quiet, with its sign and top payload.
        // The fp16 reference is the compiler's conversion, the bf16 one truncation plus the quiet bit.
        const auto x = nans();
        OpContext ctx;
        auto f16 = x, bf16 = x;
        ops::round_to(ctx, view(f16), DType::F16);
        ops::round_to(ctx, view(bf16), DType::BF16);
        const QString f16_diff = rounding_mismatch(x, f16, fp16_ref), bf16_diff = rounding_mismatch(x, bf16, bf16_ref);
        QVERIFY2(f16_diff.isEmpty() && bf16_diff.isEmpty(),
                 qPrintable(QStringLiteral("f16: %1; bf16: %2").arg(f16_diff, bf16_diff)));
    }

    void round_to_f32_is_identity_and_i32_is_refused() {
        auto x = random_patterns(1000, 8);
        for (float v : nans()) x.push_back(v);
        auto got = x;
        OpContext ctx;
        ops::round_to(ctx, view(got), DType::F32);
        MWB_VERIFY_BITWISE(got, x);
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::round_to(ctx, view(got), DType::I32));
    }

    void sum_squares_matches_float64() {
        // Several 16 Ki chunks and a ragged tail. The op sums in float64 (in another order than here), so
        // the only difference is float64 reassociation: ~n·2^-53 relative at worst, 1e-12 is loose.
        auto x = random_floats(3 * 16384 + 123, 9, -3.0f, 3.0f);
        double ref = 0;
        for (float v : x) ref += double(v) * double(v);
        OpContext ctx;
        MWB_VERIFY_ERROR(std::abs(ops::sum_squares(ctx, view(x)) - ref) / ref, 1e-12);
        std::vector<float> empty;
        QCOMPARE(ops::sum_squares(ctx, view_f32(empty.data(), {0})), 0.0);
    }

    void sum_squares_propagates_inf_and_nan() {
        auto x = random_floats(40000, 10);
        OpContext ctx;
        x[33333] = -INFINITY;
        QCOMPARE(ops::sum_squares(ctx, view(x)), std::numeric_limits<double>::infinity());
        x[5] = std::nanf("");
        QVERIFY(std::isnan(ops::sum_squares(ctx, view(x))));
    }

    void sum_squares_does_not_depend_on_threads() {
        auto x = random_floats(5 * 16384 + 77, 11, -100.0f, 100.0f);
        OpContext ctx;
        double one = 0, two = 0, three = 0;
        {
            mwb::test::ScopedThreads t(1);
            one = ops::sum_squares(ctx, view(x));
        }
        {
            mwb::test::ScopedThreads t(2);
            two = ops::sum_squares(ctx, view(x));
        }
        {
            mwb::test::ScopedThreads t(3);  // an uneven split of the chunks
            three = ops::sum_squares(ctx, view(x));
        }
        QCOMPARE(std::bit_cast<uint64_t>(two), std::bit_cast<uint64_t>(one));
        QCOMPARE(std::bit_cast<uint64_t>(three), std::bit_cast<uint64_t>(one));
    }

    void sum_squares_ranges_has_the_bits_of_the_per_range_sums() {
        // The gradient norm's one pass over an arena: ranges of several chunks, ragged tails, an empty
        // range and gaps between them (the arena's padding and the tensors not counted) must give exactly
        // the sum, in range order, of sum_squares over each range (the per-tensor loop it replaces), and
        // agree with float64 to reassociation.
        auto x = random_floats(6 * 16384 + 999, 12, -5.0f, 5.0f);
        const std::vector<IndexRange> ranges = {{0, 3}, {10, 2 * 16384 + 5}, {2 * 16384 + 40, 0},
                                                {2 * 16384 + 40, 16384}, {3 * 16384 + 100, 2 * 16384 + 777}};
        x[5] = 1e30f;  // in a gap: not counted
        OpContext ctx;
        double per_range = 0, ref = 0;
        for (const IndexRange& r : ranges) {
            per_range += ops::sum_squares(ctx, slice_1d(view(x), r.first, r.count));
            for (int64_t i = r.first; i < r.first + r.count; ++i) ref += double(x[i]) * double(x[i]);
        }
        for (int threads : {1, 2, 3}) {
            mwb::test::ScopedThreads t(threads);
            double out = -1;
            ops::sum_squares_ranges(ctx, make_view(&out, DType::F64, {1}), view(x), ranges);
            QCOMPARE(std::bit_cast<uint64_t>(out), std::bit_cast<uint64_t>(per_range));
            MWB_VERIFY_ERROR(std::abs(out - ref) / ref, 1e-12);
        }
        double none = -1;
        ops::sum_squares_ranges(ctx, make_view(&none, DType::F64, {1}), view(x), {});
        QCOMPARE(none, 0.0);
        x[3 * 16384 + 200] = std::nanf("");
        ops::sum_squares_ranges(ctx, make_view(&none, DType::F64, {1}), view(x), ranges);
        QVERIFY(std::isnan(none));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::sum_squares_ranges(ctx, make_view(&none, DType::F64, {1}), view(x),
                                                                      {{static_cast<int64_t>(x.size()) - 2, 3}}));
    }

    void gradient_scale_is_megatrons_clip_coefficient_over_the_loss_scale() {
        // Megatron-LM's clip_grad_norm_: clip_coeff = max_norm / (total_norm + 1e-6), applied when < 1;
        // the norm is of the unscaled gradients (Σ of the scaled ones' squares, root, over the loss scale).
        OpContext ctx;
        float scale[2] = {-1, -1};
        const auto run = [&](double sumsq, double loss_scale, double clip) {
            ops::gradient_scale(ctx, view_f32(scale, {2}), make_view(&sumsq, DType::F64, {1}), loss_scale, clip);
        };
        run(std::pow(4.0 * 1024.0, 2), 1024.0, 1.0);  // norm 4: clipped to 1
        QCOMPARE(scale[0], static_cast<float>(1.0 / (4.0 + 1e-6) / 1024.0));
        QCOMPARE(scale[1], 0.0f);
        run(std::pow(4.0 * 1024.0, 2), 1024.0, 10.0);  // below the clip
        QCOMPARE(scale[0], 1.0f / 1024.0f);
        run(std::pow(4.0 * 1024.0, 2), 1024.0, 0.0);  // clipping off
        QCOMPARE(scale[0], 1.0f / 1024.0f);
        QCOMPARE(scale[1], 0.0f);
        for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
            run(bad, 1024.0, 1.0);
            QCOMPARE(scale[1], 1.0f);  // found_inf: the step is skipped
        }
        double sumsq = 1;
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::gradient_scale(ctx, view_f32(scale, {2}),
                                                                  make_view(&sumsq, DType::F64, {1}), 0.0, 1.0));
    }

    void host_reads_count_every_op_that_returns_a_value() {
        // The counter a training step's host-read test relies on: ops that return a value count one
        // each, device-side reductions count none.
        auto x = random_floats(1000, 13);
        OpContext ctx;
        double out = 0;
        float scale[2];
        ops::sum_squares_ranges(ctx, make_view(&out, DType::F64, {1}), view(x), {{0, 1000}});
        ops::gradient_scale(ctx, view_f32(scale, {2}), make_view(&out, DType::F64, {1}), 1.0, 1.0);
        QCOMPARE(ctx.host_reads, int64_t{0});
        QCOMPARE(ops::read_f64(ctx, make_view(&out, DType::F64, {1})), std::vector<double>{out});
        QCOMPARE(ctx.host_reads, int64_t{1});
        const double pair[2] = {out, -2.5};  // a step's results come back together, in one read
        QCOMPARE(ops::read_f64(ctx, make_view(const_cast<double*>(pair), DType::F64, {2})),
                 (std::vector<double>{out, -2.5}));
        QCOMPARE(ctx.host_reads, int64_t{2});
        (void)ops::sum_squares(ctx, view(x));
        QCOMPARE(ctx.host_reads, int64_t{3});
        // The loss sum stays on the device: no read.
        double loss = 0;
        const float lse[2] = {3, 4}, tl[2] = {1, 1};
        ops::cross_entropy_loss_sum(ctx, make_view(&loss, DType::F64, {1}), view_f32(const_cast<float*>(lse), {2}),
                                    view_f32(const_cast<float*>(tl), {2}), 2.0, false);
        QCOMPARE(ctx.host_reads, int64_t{3});
        QCOMPARE(loss, 2.5);
    }

    void calls_count_each_op_that_ran() {
        // OpContext::calls, per op: what the model tests read to see which kernels a pass runs.
        auto x = random_floats(8, 14);
        std::vector<float> y(8);
        OpContext ctx;
        ops::fill(ctx, view(y), 1.0f);
        ops::fill(ctx, view(y), 2.0f);
        ops::copy(ctx, view(y), view(x));
        QCOMPARE(ctx.calls_of(OpId::fill), int64_t{2});
        QCOMPARE(ctx.calls_of(OpId::copy), int64_t{1});
        QCOMPARE(ctx.calls_of(OpId::scale), int64_t{0});
        // A call its checks refuse never ran: not counted.
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::copy(ctx, view(y), make_view(x.data(), DType::F32, {7})));
        QCOMPARE(ctx.calls_of(OpId::copy), int64_t{1});
    }

    void mismatched_shapes_throw() {
        std::vector<float> a(6), b(5), c(6);
        std::vector<int32_t> ids(6);
        OpContext ctx;
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::copy(ctx, view(a), view(b)));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::add(ctx, view(a), view(b), view(c)));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::add(ctx, view(b), view(a), view(c)));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::fill(ctx, view_i32(ids.data(), {6}), 1.0f));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::sum_squares(ctx, view_i32(ids.data(), {6})));
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_elementwise, TestElementwise)
}  // namespace test_kernels_elementwise
#include "test_elementwise.moc"
