// Softmax cross-entropy over a vocabulary-parallel vocabulary: the loss from partials against float64
// log-softmax, shards combined by log-sum-exp against the whole, and the gradient against central finite
// differences (per shard a slice of the whole), with per-row loss scales.
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"
#include "support/threads.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"

#include <QtTest>

#include <cmath>

namespace test_kernels_cross_entropy {

using namespace mwb;
using mwb::test::finite_difference;
using mwb::test::max_rel_error;
using mwb::test::normwise_error;
using mwb::test::random_floats;
using mwb::test::to_double;

namespace {

constexpr int64_t kRows = 6, kVocab = 50, kSplit = 23;  // shards [0, 23) and [23, 50): unequal on purpose

/// Logits of a few scales (peaked and flat rows) and targets in both shards.
struct Problem {
    std::vector<float> logits;
    std::vector<int32_t> targets = {0, 22, 23, 49, 7, 30};
    Problem() {
        logits = random_floats(kRows * kVocab, 1, -3.0f, 3.0f);
        for (int64_t c = 0; c < kVocab; ++c) {
            logits[1 * kVocab + c] *= 10.0f;                                  // a peaked row
            logits[4 * kVocab + c] = logits[4 * kVocab + c] * 0.01f + 40.0f;  // flat, far from 0: needs the max
        }
    }
};

/// Per-row loss -log softmax(logits)[target] in float64.
std::vector<double> loss_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets) {
    std::vector<double> loss(targets.size());
    for (std::size_t r = 0; r < targets.size(); ++r) {
        const double* row = logits.data() + r * kVocab;
        double mx = row[0];
        for (int64_t c = 0; c < kVocab; ++c) mx = std::max(mx, row[c]);
        double s = 0;
        for (int64_t c = 0; c < kVocab; ++c) s += std::exp(row[c] - mx);
        loss[r] = mx + std::log(s) - row[targets[r]];
    }
    return loss;
}

struct Partials {
    std::vector<float> max, sumexp, target;
};

/// Partials of the logits' columns [v0, v1) (a shard starting at vocab index v0).
Partials partials(const Problem& p, int64_t v0, int64_t v1) {
    std::vector<float> shard;
    for (int64_t r = 0; r < kRows; ++r)
        shard.insert(shard.end(), p.logits.begin() + r * kVocab + v0, p.logits.begin() + r * kVocab + v1);
    Partials out{std::vector<float>(kRows, std::nanf("")), std::vector<float>(kRows, std::nanf("")),
                 std::vector<float>(kRows, std::nanf(""))};
    auto targets = p.targets;
    OpContext ctx;
    ops::cross_entropy_partials(ctx, view_f32(out.max.data(), {kRows}), view_f32(out.sumexp.data(), {kRows}),
                                view_f32(out.target.data(), {kRows}), view_f32(shard.data(), {kRows, v1 - v0}),
                                view_i32(targets.data(), {kRows}), v0);
    return out;
}

/// log-sum-exp of a row from its shards' partials, as the model combines them (in float64 here).
double combined_lse(const std::vector<Partials>& shards, int64_t r) {
    double mx = -INFINITY, s = 0;
    for (const auto& p : shards) mx = std::max(mx, double(p.max[r]));
    for (const auto& p : shards) s += double(p.sumexp[r]) * std::exp(double(p.max[r]) - mx);
    return mx + std::log(s);
}

}  // namespace

class TestCrossEntropy : public QObject {
    Q_OBJECT
private slots:
    void partials_give_the_float64_loss() {
        const Problem p;
        const Partials whole = partials(p, 0, kVocab);
        const auto ref = loss_ref(to_double(p.logits), p.targets);
        std::vector<float> loss(kRows);
        for (int64_t r = 0; r < kRows; ++r) {
            // The row max and target logit are picked, not computed: exact.
            float mx = p.logits[r * kVocab];
            for (int64_t c = 0; c < kVocab; ++c) mx = std::max(mx, p.logits[r * kVocab + c]);
            QCOMPARE(whole.max[r], mx);
            QCOMPARE(whole.target[r], p.logits[r * kVocab + p.targets[r]]);
            loss[r] = static_cast<float>(combined_lse({whole}, r) - whole.target[r]);
        }
        // Σ exp in float over 50 terms with exp_approx (a few ulp each): the loss, O(1) to O(10), within a
        // few 1e-7 relative. Measured ~1e-7.
        MWB_VERIFY_ERROR(max_rel_error(loss, ref), 1e-6);
    }

    void shards_combine_to_the_whole() {
        const Problem p;
        const Partials whole = partials(p, 0, kVocab);
        const Partials a = partials(p, 0, kSplit), b = partials(p, kSplit, kVocab);
        std::vector<float> lse_whole(kRows), lse_shards(kRows);
        for (int64_t r = 0; r < kRows; ++r) {
            // The target lies in exactly one shard; the other reports 0, so the all-reduce sum is exact.
            const bool in_a = p.targets[r] < kSplit;
            QCOMPARE(in_a ? b.target[r] : a.target[r], 0.0f);
            QCOMPARE(a.target[r] + b.target[r], whole.target[r]);
            QCOMPARE(std::max(a.max[r], b.max[r]), whole.max[r]);
            lse_whole[r] = float(combined_lse({whole}, r));
            lse_shards[r] = float(combined_lse({a, b}, r));
        }
        // Two float sums over different groupings of the same 50 exps: a few ulp of lse apart.
        MWB_VERIFY_ERROR(max_rel_error(lse_shards, to_double(lse_whole)), 1e-6);
    }

    void shards_combine_through_the_ops() {
        // The vocabulary-parallel path of GptModel::head on two shards, with the all-reduces written
        // out (max, then sums): rescale + lse give the float64 log-sum-exp, and the loss sum the float64
        // sum of the rows' losses; with one shard, rescale is the identity (exp(0) = 1) and lse is
        // max + log(Σexp) bit for bit.
        const Problem p;
        Partials a = partials(p, 0, kSplit), b = partials(p, kSplit, kVocab);
        std::vector<float> gmax(kRows), lse(kRows), target(kRows);
        for (int64_t r = 0; r < kRows; ++r) gmax[r] = std::max(a.max[r], b.max[r]);
        OpContext ctx;
        const auto v = [](std::vector<float>& d) { return view_f32(d.data(), {kRows}); };
        ops::cross_entropy_rescale(ctx, v(a.sumexp), v(a.max), v(gmax));
        ops::cross_entropy_rescale(ctx, v(b.sumexp), v(b.max), v(gmax));
        for (int64_t r = 0; r < kRows; ++r) {
            a.sumexp[r] += b.sumexp[r];
            target[r] = a.target[r] + b.target[r];
        }
        ops::cross_entropy_lse(ctx, v(lse), v(gmax), v(a.sumexp));
        const auto ref = loss_ref(to_double(p.logits), p.targets);
        std::vector<double> lse_ref(kRows);
        double loss_ref_sum = 0;
        for (int64_t r = 0; r < kRows; ++r) {
            lse_ref[r] = ref[r] + p.logits[r * kVocab + p.targets[r]];
            loss_ref_sum += ref[r];
        }
        // As shards_combine_to_the_whole: a few ulp of lse (float sums of exp_approx values).
        MWB_VERIFY_ERROR(max_rel_error(lse, lse_ref), 1e-6);
        double loss = 0;
        ops::cross_entropy_loss_sum(ctx, make_view(&loss, DType::F64, {1}), v(lse), v(target), 1.0, false);
        MWB_VERIFY_ERROR(std::abs(loss - loss_ref_sum) / loss_ref_sum, 1e-6);
        double row_order = 0;
        for (int64_t r = 0; r < kRows; ++r) row_order += double(lse[r]) - double(target[r]);
        QCOMPARE(loss, row_order);  // float64, row order: the model's loss for any thread count
        // Accumulated as the pipeline does: (previous + Σ / divisor) in float64, the host's bits.
        const double before = 0.1;
        double acc = before;
        ops::cross_entropy_loss_sum(ctx, make_view(&acc, DType::F64, {1}), v(lse), v(target), 7.0, true);
        QCOMPARE(acc, before + row_order / 7.0);

        Partials whole = partials(p, 0, kVocab);
        const std::vector<float> sums = whole.sumexp;
        ops::cross_entropy_rescale(ctx, v(whole.sumexp), v(whole.max), v(whole.max));
        MWB_VERIFY_BITWISE(whole.sumexp, sums);
        ops::cross_entropy_lse(ctx, v(whole.max), v(whole.max), v(whole.sumexp));  // in place, as the model
        for (int64_t r = 0; r < kRows; ++r) QCOMPARE(whole.max[r], partials(p, 0, kVocab).max[r] + std::log(sums[r]));
    }

    void backward_matches_finite_differences() {
        const Problem p;
        // row_scale: 1/N (a mean over rows), 0 for a masked row, and an arbitrary weight.
        std::vector<float> scale = {1.0f / kRows, 1.0f / kRows, 0.0f, 2.5f, 1.0f / kRows, -0.5f};
        const auto ref = loss_ref(to_double(p.logits), p.targets);
        std::vector<float> lse(kRows);
        for (int64_t r = 0; r < kRows; ++r) lse[r] = float(ref[r] + p.logits[r * kVocab + p.targets[r]]);
        auto grad = p.logits;
        auto targets = p.targets;
        OpContext ctx;
        ops::cross_entropy_backward(ctx, view_f32(grad.data(), {kRows, kVocab}), view_i32(targets.data(), {kRows}),
                                    view_f32(lse.data(), {kRows}), view_f32(scale.data(), {kRows}), 0);
        const auto fd = finite_difference(to_double(p.logits), [&](const std::vector<double>& x) {
            const auto l = loss_ref(x, p.targets);
            double s = 0;
            for (int64_t r = 0; r < kRows; ++r) s += scale[r] * l[r];
            return s;
        });
        // softmax - onehot with exp_approx (a few ulp) and lse rounded to float: half an ulp of lse ≈ 44 in
        // the flat row is 2e-6 absolute, i.e. 2e-6 relative on its softmax values of ~1/50, far below the
        // gradient's largest element (~2.5). Finite differences are good to ~1e-9. Normwise, because the
        // elements span 1e-30 to 1. Measured 4e-8.
        MWB_VERIFY_ERROR(normwise_error(grad, fd), 1e-6);
        for (int64_t c = 0; c < kVocab; ++c) QCOMPARE(grad[2 * kVocab + c], 0.0f);  // masked row: no gradient
    }

    void backward_per_shard_is_a_slice_of_the_whole() {
        const Problem p;
        std::vector<float> scale(kRows, 0.25f), lse(kRows);
        const auto ref = loss_ref(to_double(p.logits), p.targets);
        for (int64_t r = 0; r < kRows; ++r) lse[r] = float(ref[r] + p.logits[r * kVocab + p.targets[r]]);
        auto whole = p.logits;
        auto targets = p.targets;
        OpContext ctx;
        ops::cross_entropy_backward(ctx, view_f32(whole.data(), {kRows, kVocab}), view_i32(targets.data(), {kRows}),
                                    view_f32(lse.data(), {kRows}), view_f32(scale.data(), {kRows}), 0);
        for (auto [v0, v1] : {std::pair{int64_t{0}, kSplit}, std::pair{kSplit, kVocab}}) {
            std::vector<float> shard, want;
            for (int64_t r = 0; r < kRows; ++r) {
                shard.insert(shard.end(), p.logits.begin() + r * kVocab + v0, p.logits.begin() + r * kVocab + v1);
                want.insert(want.end(), whole.begin() + r * kVocab + v0, whole.begin() + r * kVocab + v1);
            }
            ops::cross_entropy_backward(ctx, view_f32(shard.data(), {kRows, v1 - v0}),
                                        view_i32(targets.data(), {kRows}), view_f32(lse.data(), {kRows}),
                                        view_f32(scale.data(), {kRows}), v0);
            MWB_VERIFY_BITWISE(shard, want);
        }
    }

    void extreme_logits_stay_finite() {
        // Logits of ±1e4 (an fp16-scaled model gone wrong, or a huge temperature): the max subtraction keeps
        // exp in range; the loss is the logit gap and the gradient is a finite one-hot difference.
        std::vector<float> logits = {1e4f, -1e4f, 0.0f, 5e3f};
        std::vector<int32_t> target = {1};
        std::vector<float> mx(1), se(1), tl(1), scale = {1.0f};
        OpContext ctx;
        ops::cross_entropy_partials(ctx, view_f32(mx.data(), {1}), view_f32(se.data(), {1}), view_f32(tl.data(), {1}),
                                    view_f32(logits.data(), {1, 4}), view_i32(target.data(), {1}), 0);
        QCOMPARE(mx[0], 1e4f);
        QCOMPARE(se[0], 1.0f);  // e^0 + three values that underflow to 0
        std::vector<float> lse = {float(double(mx[0]) + std::log(double(se[0])))};
        ops::cross_entropy_backward(ctx, view_f32(logits.data(), {1, 4}), view_i32(target.data(), {1}),
                                    view_f32(lse.data(), {1}), view_f32(scale.data(), {1}), 0);
        const std::vector<float> want = {1.0f, -1.0f, 0.0f, 0.0f};
        MWB_VERIFY_BITWISE(logits, want);
    }

    void results_do_not_depend_on_threads() {
        const int64_t rows = 41, v = 300;
        auto logits = random_floats(rows * v, 3, -5.0f, 5.0f);
        std::vector<int32_t> targets(rows);
        for (int64_t r = 0; r < rows; ++r) targets[r] = int32_t((r * 37) % v);
        const auto run = [&](int threads) {
            mwb::test::ScopedThreads t(threads);
            std::vector<float> mx(rows), se(rows), tl(rows), scale(rows, 0.1f), g = logits;
            OpContext ctx;
            ops::cross_entropy_partials(ctx, view_f32(mx.data(), {rows}), view_f32(se.data(), {rows}),
                                        view_f32(tl.data(), {rows}), view_f32(g.data(), {rows, v}),
                                        view_i32(targets.data(), {rows}), 0);
            std::vector<float> lse(rows);
            for (int64_t r = 0; r < rows; ++r) lse[r] = mx[r] + std::log(se[r]);
            ops::cross_entropy_backward(ctx, view_f32(g.data(), {rows, v}), view_i32(targets.data(), {rows}),
                                        view_f32(lse.data(), {rows}), view_f32(scale.data(), {rows}), 0);
            for (const auto* part : {&mx, &se, &tl}) g.insert(g.end(), part->begin(), part->end());
            return g;
        };
        const auto one = run(1), two = run(2);
        MWB_VERIFY_BITWISE(two, one);
    }

    void fused_is_the_two_ops() {
        // The fused op (the CPU's path for an unsharded vocabulary) against partials + the model's
        // log-sum-exp + backward: the loss statistics bit for bit, the gradient to rounding (exp(x - max)/Σ
        // against exp(x - lse)); the same bits on 1 and 2 threads; loss and gradient against float64.
        const Problem p;
        std::vector<float> scale = {1.0f / kRows, 1.0f / kRows, 0.0f, 2.5f, 1.0f / kRows, -0.5f};
        auto targets = p.targets;
        OpContext ctx;
        std::vector<float> mx(kRows), se(kRows), tl_two(kRows), lse_two(kRows), two = p.logits;
        ops::cross_entropy_partials(ctx, view_f32(mx.data(), {kRows}), view_f32(se.data(), {kRows}),
                                    view_f32(tl_two.data(), {kRows}), view_f32(two.data(), {kRows, kVocab}),
                                    view_i32(targets.data(), {kRows}), 0);
        for (int64_t r = 0; r < kRows; ++r) lse_two[r] = mx[r] + std::log(se[r]);  // as GptModel::head
        ops::cross_entropy_backward(ctx, view_f32(two.data(), {kRows, kVocab}), view_i32(targets.data(), {kRows}),
                                    view_f32(lse_two.data(), {kRows}), view_f32(scale.data(), {kRows}), 0);
        std::vector<float> first;
        for (int threads : {1, 2}) {
            mwb::test::ScopedThreads t(threads);
            std::vector<float> lse(kRows, std::nanf("")), tl(kRows, std::nanf("")), fused = p.logits;
            ops::cross_entropy_fused(ctx, view_f32(lse.data(), {kRows}), view_f32(tl.data(), {kRows}),
                                     view_f32(fused.data(), {kRows, kVocab}), view_i32(targets.data(), {kRows}),
                                     view_f32(scale.data(), {kRows}));
            MWB_VERIFY_BITWISE(lse, lse_two);
            MWB_VERIFY_BITWISE(tl, tl_two);
            // Both are a few ulp of exp_approx from softmax·scale; the two-op path also carries lse's float
            // rounding (2e-6 relative in the flat row, see backward_matches_finite_differences). Measured ~1e-7.
            MWB_VERIFY_ERROR(normwise_error(fused, to_double(two)), 1e-6);
            // The softmax part alone, element by element against float64 (the target's -scale hides it
            // in the norm): a few ulp of exp_approx, the sum and the division, plus the float rounding of
            // logit - max, which is 60 in the peaked row: half an ulp of 60 is 1.9e-6 relative on its
            // exp. Measured 1.9e-6 there, <= 4e-7 in the other rows.
            const auto ref = loss_ref(to_double(p.logits), p.targets);
            std::vector<float> soft;
            std::vector<double> soft_ref;
            for (int64_t r = 0; r < kRows; ++r) {
                const double lse64 = ref[r] + p.logits[r * kVocab + p.targets[r]];
                for (int64_t c = 0; c < kVocab; ++c)
                    if (c != p.targets[r]) {
                        soft.push_back(fused[r * kVocab + c]);
                        soft_ref.push_back(scale[r] * std::exp(double(p.logits[r * kVocab + c]) - lse64));
                    }
            }
            MWB_VERIFY_ERROR(max_rel_error(soft, soft_ref, 1e-30), 3e-6);
            for (int64_t c = 0; c < kVocab; ++c) QCOMPARE(fused[2 * kVocab + c], 0.0f);  // masked row
            if (threads == 1) first = fused;
            else MWB_VERIFY_BITWISE(fused, first);
            if (threads == 1) {
                std::vector<float> loss(kRows);
                for (int64_t r = 0; r < kRows; ++r) loss[r] = lse[r] - tl[r];
                MWB_VERIFY_ERROR(max_rel_error(loss, loss_ref(to_double(p.logits), p.targets)), 1e-6);
                const auto fd = finite_difference(to_double(p.logits), [&](const std::vector<double>& x) {
                    const auto l = loss_ref(x, p.targets);
                    double s = 0;
                    for (int64_t r = 0; r < kRows; ++r) s += scale[r] * l[r];
                    return s;
                });
                MWB_VERIFY_ERROR(normwise_error(fused, fd), 1e-6);  // as backward_matches_finite_differences
            }
        }
    }

    void fused_refuses_bad_input() {
        std::vector<float> logits(12), a(3), bad(4);
        std::vector<int32_t> targets = {0, 3, 1}, outside = {0, 4, 1}, negative = {0, -1, 1};
        OpContext ctx;
        const auto v = [](std::vector<float>& d, int64_t n) { return view_f32(d.data(), {n}); };
        const TensorView l = view_f32(logits.data(), {3, 4}), t = view_i32(targets.data(), {3});
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::cross_entropy_fused(ctx, v(bad, 4), v(a, 3), l, t, v(a, 3)));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::cross_entropy_fused(ctx, v(a, 3), v(bad, 4), l, t, v(a, 3)));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::cross_entropy_fused(ctx, v(a, 3), v(a, 3), l, t, v(bad, 4)));
        // A target outside the vocabulary is an error, not a silently missing one-hot.
        for (auto* bad_t : {&outside, &negative})
            QVERIFY_THROWS_EXCEPTION(
                mwb::Error, ops::cross_entropy_fused(ctx, v(a, 3), v(a, 3), l, view_i32(bad_t->data(), {3}), v(a, 3)));
    }

    void mismatched_shapes_throw() {
        std::vector<float> logits(12), a(3), bad(4);
        std::vector<int32_t> targets(3), bad_t(4);
        OpContext ctx;
        const auto v = [](std::vector<float>& d, int64_t n) { return view_f32(d.data(), {n}); };
        const TensorView l = view_f32(logits.data(), {3, 4}), t = view_i32(targets.data(), {3});
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::cross_entropy_partials(ctx, v(bad, 4), v(a, 3), v(a, 3), l, t, 0));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::cross_entropy_partials(ctx, v(a, 3), v(bad, 4), v(a, 3), l, t, 0));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::cross_entropy_partials(ctx, v(a, 3), v(a, 3), v(bad, 4), l, t, 0));
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error, ops::cross_entropy_partials(ctx, v(a, 3), v(a, 3), v(a, 3), l, view_i32(bad_t.data(), {4}), 0));
        QVERIFY_THROWS_EXCEPTION(mwb::Error,
                                 ops::cross_entropy_backward(ctx, l, view_i32(bad_t.data(), {4}), v(a, 3), v(a, 3), 0));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::cross_entropy_backward(ctx, l, t, v(bad, 4), v(a, 3), 0));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::cross_entropy_backward(ctx, l, t, v(a, 3), v(bad, 4), 0));
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_cross_entropy, TestCrossEntropy)
}  // namespace test_kernels_cross_entropy
#include "test_cross_entropy.moc"
