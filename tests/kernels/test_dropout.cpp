// Dropout: Philox4x32-10 against the published known answers, keep-fraction statistics, the 1/(1-p)
// scaling, the same mask in backward, masks that depend only on the global element index (so shards and
// thread counts agree with the whole), and p = 0 as the identity.
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"
#include "support/threads.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"
#include "mwb/kernels/philox.h"

#include <QtTest>

#include <cmath>

namespace test_kernels_dropout {

using namespace mwb;
using mwb::test::max_rel_error;
using mwb::test::random_floats;

namespace {

TensorView view(std::vector<float>& v) {
    return view_f32(v.data(), {static_cast<int64_t>(v.size())});
}

/// x·mask with mask = 1/(1-p) (rounded to float once) where kept, 0 where dropped (so -x drops to -0, as
/// x·0 does in PyTorch).
std::vector<float> dropout_ref(const std::vector<float>& x, float p, RngStream rng, int64_t offset) {
    const uint32_t threshold = dropout_keep_threshold(p);
    const float scale = 1.0f / (1.0f - p);
    std::vector<float> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
        out[i] = x[i] * (dropout_keep(rng, static_cast<uint64_t>(offset) + i, threshold) ? scale : 0.0f);
    return out;
}

}  // namespace

class TestDropout : public QObject {
    Q_OBJECT
private slots:
    void philox_matches_known_answers() {
        // Random123 1.14 tests/kat_vectors, "philox4x32 10": counter (4 words), key (2 words) -> output.
        struct Kat {
            uint32_t ctr[4], key[2], out[4];
        };
        const Kat kats[] = {
            {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
             {0x00000000, 0x00000000},
             {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
            {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
             {0xffffffff, 0xffffffff},
             {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
            {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
             {0xa4093822, 0x299f31d0},
             {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
        };
        for (const Kat& k : kats) {
            const Philox4 got = philox4x32_10(k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3], k.key[0], k.key[1]);
            for (int i = 0; i < 4; ++i) QCOMPARE(got.v[i], k.out[i]);
        }
    }

    void keep_fraction_matches_p_data() {
        QTest::addColumn<float>("p");
        QTest::newRow("p=0.1") << 0.1f;
        QTest::newRow("p=0.5") << 0.5f;
        QTest::newRow("p=0.9") << 0.9f;
    }
    void keep_fraction_matches_p() {
        QFETCH(float, p);
        // 2^20 elements: the kept count is Binomial(n, 1-p), sd = sqrt(n·p·(1-p)) ≤ 512. Checked within 5 sd
        // overall and for each of the four Philox output words (i mod 4) separately, so a word that is
        // never used or biased shows. Fixed seeds: the outcome is deterministic, 5 sd is not a flake margin
        // but room for an honest generator.
        const int64_t n = int64_t{1} << 20;
        std::vector<float> x(n, 1.0f), out(n);
        OpContext ctx;
        ops::dropout_forward(ctx, view(out), view(x), p, RngStream{1234, 5}, 0);
        int64_t kept = 0, kept_lane[4] = {};
        const float scale = 1.0f / (1.0f - p);
        for (int64_t i = 0; i < n; ++i) {
            QVERIFY(out[i] == 0.0f || out[i] == scale);
            if (out[i] != 0.0f) {
                ++kept;
                ++kept_lane[i & 3];
            }
        }
        const double q = 1.0 - double(p), sd = std::sqrt(double(n) * p * q), sd_lane = sd / 2;
        MWB_VERIFY_ERROR(std::abs(double(kept) - double(n) * q) / sd, 5.0);
        for (int lane = 0; lane < 4; ++lane)
            MWB_VERIFY_ERROR(std::abs(double(kept_lane[lane]) - double(n / 4) * q) / sd_lane, 5.0);
    }

    void streams_and_seeds_give_different_masks() {
        // Every 64-bit half of seed and stream feeds Philox: masks must differ when any of them changes
        // (two independent masks at p = 0.5 agree on ~half the elements).
        const int64_t n = 4096;
        std::vector<float> x(n, 1.0f);
        const RngStream streams[] = {{1, 0}, {2, 0}, {1 + (uint64_t{1} << 32), 0}, {1, 1}, {1, uint64_t{1} << 32}};
        std::vector<std::vector<float>> outs;
        OpContext ctx;
        for (const RngStream& s : streams) {
            std::vector<float> out(n);
            ops::dropout_forward(ctx, view(out), view(x), 0.5f, s, 0);
            outs.push_back(out);
        }
        for (std::size_t a = 0; a < outs.size(); ++a)
            for (std::size_t b = a + 1; b < outs.size(); ++b) {
                int64_t same = 0;
                for (int64_t i = 0; i < n; ++i) same += outs[a][i] == outs[b][i];
                // Binomial(4096, 0.5): sd 32; 5 sd either side of 2048.
                QVERIFY2(
                    std::abs(same - n / 2) < 160,
                    qPrintable(QStringLiteral("streams %1 and %2 agree on %3 of %4").arg(a).arg(b).arg(same).arg(n)));
            }
    }

    void forward_scales_kept_elements() {
        // out = x·mask·(1/(1-p)): bit-exact against the float scale, and within half an ulp of the exact
        // x/(1-p) in float64 for kept elements (the scale itself is rounded once).
        auto x = random_floats(10007, 1);
        std::vector<float> out(x.size(), std::nanf(""));
        const RngStream rng{42, 7};
        const float p = 0.3f;
        OpContext ctx;
        ops::dropout_forward(ctx, view(out), view(x), p, rng, 3);
        MWB_VERIFY_BITWISE(out, dropout_ref(x, p, rng, 3));
        std::vector<double> exact(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) exact[i] = out[i] == 0.0f ? 0.0 : double(x[i]) / (1.0 - double(p));
        MWB_VERIFY_ERROR(max_rel_error(out, exact, 1e-30), 2.5e-7);  // 1 ulp (2^-23 = 1.2e-7) and a margin
    }

    void backward_uses_the_forward_mask() {
        auto x = random_floats(5003, 2), dout = random_floats(5003, 3);
        const RngStream rng{9, 99};
        const float p = 0.2f;
        std::vector<float> out(x.size()), dx(x.size(), std::nanf(""));
        OpContext ctx;
        ops::dropout_forward(ctx, view(out), view(x), p, rng, 17);
        ops::dropout_backward(ctx, view(dx), view(dout), p, rng, 17);
        MWB_VERIFY_BITWISE(dx, dropout_ref(dout, p, rng, 17));
        for (std::size_t i = 0; i < x.size(); ++i) QCOMPARE(dx[i] == 0.0f, out[i] == 0.0f);
        // dx may alias dout.
        ops::dropout_backward(ctx, view(dout), view(dout), p, rng, 17);
        MWB_VERIFY_BITWISE(dout, dx);
    }

    void dropout_add_adds_the_residual() {
        auto x = random_floats(4099, 4), residual = random_floats(4099, 5, -3.0f, 3.0f);
        const RngStream rng{5, 6};
        const float p = 0.25f;
        std::vector<float> out(x.size(), std::nanf(""));
        OpContext ctx;
        ops::dropout_add_forward(ctx, view(out), view(residual), view(x), p, rng, 11);
        const auto dropped = dropout_ref(x, p, rng, 11);
        std::vector<double> ref(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) ref[i] = double(residual[i]) + dropped[i];
        // residual + x·scale, where the compiler may fuse the multiply into the add (GCC contracts to FMA by
        // default): half an ulp of x·scale (|x·scale| < 1.34) plus half an ulp of the sum, so measured
        // against |ref| + 1 below 2.5e-7. (Without FMA it is bit-exact; the bound tolerates both.)
        MWB_VERIFY_ERROR(max_rel_error(out, ref, 1.0), 2.5e-7);
        // out may alias the residual (the residual stream updated in place) or x.
        auto res = residual, xx = x;
        ops::dropout_add_forward(ctx, view(res), view(res), view(x), p, rng, 11);
        MWB_VERIFY_BITWISE(res, out);
        ops::dropout_add_forward(ctx, view(xx), view(residual), view(xx), p, rng, 11);
        MWB_VERIFY_BITWISE(xx, out);
    }

    void bias_dropout_add_adds_bias_then_drops_then_adds_the_residual() {
        // (rows, cols) with a per-column bias, at a global element offset: rows of a sequence shard.
        const int64_t rows = 37, cols = 1100;  // cols > the op's 1024-element pieces
        auto x = random_floats(rows * cols, 7), residual = random_floats(rows * cols, 8, -3.0f, 3.0f);
        auto bias = random_floats(cols, 9);
        const RngStream rng{12, 13};
        const float p = 0.3f;
        const int64_t offset = 5 * cols;
        std::vector<float> out(x.size(), std::nanf(""));
        OpContext ctx;
        ops::bias_dropout_add_forward(ctx, mwb::view_f32(out.data(), {rows, cols}), mwb::view_f32(residual.data(), {rows, cols}),
                                      mwb::view_f32(x.data(), {rows, cols}), mwb::view_f32(bias.data(), {cols}), p, rng,
                                      offset);
        std::vector<float> xb(x.size());
        for (int64_t i = 0; i < rows * cols; ++i) xb[i] = x[i] + bias[i % cols];  // float sum, as the op
        const auto dropped = dropout_ref(xb, p, rng, offset);
        std::vector<double> ref(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) ref[i] = double(residual[i]) + dropped[i];
        // As dropout_add: the multiply may be fused into the add.
        MWB_VERIFY_ERROR(max_rel_error(out, ref, 1.0), 5e-7);
        // p = 0: residual + x + bias.
        ops::bias_dropout_add_forward(ctx, mwb::view_f32(out.data(), {rows, cols}), mwb::view_f32(residual.data(), {rows, cols}),
                                      mwb::view_f32(x.data(), {rows, cols}), mwb::view_f32(bias.data(), {cols}), 0.0f, rng, 0);
        for (int64_t i = 0; i < rows * cols; ++i) ref[i] = double(residual[i]) + double(xb[i]);
        MWB_VERIFY_ERROR(max_rel_error(out, ref, 1.0), 2.5e-7);
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::bias_dropout_add_forward(ctx, mwb::view_f32(out.data(), {rows, cols}),
                                                                           mwb::view_f32(residual.data(), {rows, cols}),
                                                                           mwb::view_f32(x.data(), {rows, cols}),
                                                                           mwb::view_f32(bias.data(), {cols - 1}), p, rng, 0));
    }

    void shards_at_their_offset_match_the_whole_data() {
        QTest::addColumn<int64_t>("split");
        QTest::newRow("half") << int64_t{5001};  // n/2 of an odd n: not a multiple of 4 (mid-Philox-group)
        QTest::newRow("1") << int64_t{1};
        QTest::newRow("1023") << int64_t{1023};  // around the op's 1024-element chunks
        QTest::newRow("1025") << int64_t{1025};
        QTest::newRow("4096") << int64_t{4096};
    }
    void shards_at_their_offset_match_the_whole() {
        QFETCH(int64_t, split);
        // Sequence-parallel ranks drop their slice of a tensor at the slice's global offset; together they
        // must reproduce the unsharded tensor's dropout exactly (forward, backward, dropout_add).
        const int64_t n = 10003;
        auto x = random_floats(n, 6), r = random_floats(n, 7);
        const RngStream rng{77, 3};
        const float p = 0.4f;
        const int64_t base = 1000003;  // the whole tensor itself sits at an offset
        OpContext ctx;
        std::vector<float> whole(n), parts(n), whole_add(n), parts_add(n), whole_bwd(n), parts_bwd(n);
        ops::dropout_forward(ctx, view(whole), view(x), p, rng, base);
        ops::dropout_backward(ctx, view(whole_bwd), view(x), p, rng, base);
        ops::dropout_add_forward(ctx, view(whole_add), view(r), view(x), p, rng, base);
        for (auto [lo, hi] : {std::pair{int64_t{0}, split}, std::pair{split, n}}) {
            const auto sub = [&](std::vector<float>& v) { return view_f32(v.data() + lo, {hi - lo}); };
            ops::dropout_forward(ctx, sub(parts), sub(x), p, rng, base + lo);
            ops::dropout_backward(ctx, sub(parts_bwd), sub(x), p, rng, base + lo);
            ops::dropout_add_forward(ctx, sub(parts_add), sub(r), sub(x), p, rng, base + lo);
        }
        MWB_VERIFY_BITWISE(parts, whole);
        MWB_VERIFY_BITWISE(parts_bwd, whole);
        MWB_VERIFY_BITWISE(parts_add, whole_add);
    }

    void large_offsets_use_the_high_counter_word() {
        // Offsets past 2^34 elements put bits into the high word of the Philox counter.
        auto x = random_floats(777, 8);
        const RngStream rng{3, 4};
        const int64_t offset = (int64_t{1} << 36) + 5;
        std::vector<float> out(x.size());
        OpContext ctx;
        ops::dropout_forward(ctx, view(out), view(x), 0.5f, rng, offset);
        MWB_VERIFY_BITWISE(out, dropout_ref(x, 0.5f, rng, offset));
        std::vector<float> low(x.size());
        ops::dropout_forward(ctx, view(low), view(x), 0.5f, rng, 5);
        QVERIFY(low != out);
    }

    void results_do_not_depend_on_threads() {
        auto x = random_floats(50001, 9), r = random_floats(50001, 10);
        const auto run = [&](int threads) {
            mwb::test::ScopedThreads t(threads);
            OpContext ctx;
            std::vector<float> out(x.size()), add(x.size());
            ops::dropout_forward(ctx, view(out), view(x), 0.1f, RngStream{1, 2}, 3);
            ops::dropout_add_forward(ctx, view(add), view(r), view(x), 0.1f, RngStream{1, 2}, 3);
            out.insert(out.end(), add.begin(), add.end());
            return out;
        };
        const auto one = run(1), two = run(2), three = run(3);
        MWB_VERIFY_BITWISE(two, one);
        MWB_VERIFY_BITWISE(three, one);
    }

    void p_zero_is_the_identity() {
        auto x = random_floats(1001, 11), r = random_floats(1001, 12);
        std::vector<float> out(x.size(), std::nanf("")), add(x.size(), std::nanf(""));
        OpContext ctx;
        ops::dropout_forward(ctx, view(out), view(x), 0.0f, RngStream{1, 1}, 0);
        MWB_VERIFY_BITWISE(out, x);
        ops::dropout_backward(ctx, view(out), view(x), 0.0f, RngStream{1, 1}, 0);
        MWB_VERIFY_BITWISE(out, x);
        ops::dropout_add_forward(ctx, view(add), view(r), view(x), 0.0f, RngStream{1, 1}, 0);
        std::vector<float> sum(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) sum[i] = r[i] + x[i];
        MWB_VERIFY_BITWISE(add, sum);
    }

    void invalid_arguments_throw() {
        std::vector<float> a(8), b(7), c(8);
        OpContext ctx;
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::dropout_forward(ctx, view(a), view(b), 0.1f, {}, 0));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::dropout_backward(ctx, view(a), view(b), 0.1f, {}, 0));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::dropout_add_forward(ctx, view(a), view(b), view(c), 0.1f, {}, 0));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::dropout_add_forward(ctx, view(a), view(c), view(b), 0.1f, {}, 0));
        // p must lie in [0, 1): p = 1 would scale by 1/0.
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::dropout_forward(ctx, view(a), view(c), 1.0f, {}, 0));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::dropout_forward(ctx, view(a), view(c), -0.1f, {}, 0));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::dropout_backward(ctx, view(a), view(c), 1.5f, {}, 0));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::dropout_forward(ctx, view(a), view(c), std::nanf(""), {}, 0));
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_dropout, TestDropout)
}  // namespace test_kernels_dropout
#include "test_dropout.moc"
