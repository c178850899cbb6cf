// Token embeddings over vocabulary shards and learned position embeddings with offsets, against
// float64 references; shards and sequence halves must reproduce the whole bit for bit.
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"
#include "support/threads.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"

#include <QtTest>

namespace test_kernels_embedding {

using namespace mwb;
using mwb::test::normwise_error;
using mwb::test::random_floats;

namespace {

constexpr int64_t kVocab = 14;  // whole vocabulary; shards are [0, 6) and [6, 14) (unequal on purpose)
constexpr int64_t kSplit = 6;

/// ids spanning the whole vocabulary with repeats, plus ids outside it on both sides.
std::vector<int32_t> make_ids(int64_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::vector<int32_t> ids(static_cast<std::size_t>(n));
    for (auto& id : ids) id = static_cast<int32_t>(gen() % (kVocab + 4)) - 2;  // [-2, kVocab + 2)
    return ids;
}

/// out[r] = table[ids[r] - start] inside [start, start + v), else zeros. Exact: a gather.
std::vector<float> gather_ref(const std::vector<int32_t>& ids, const std::vector<float>& table, int64_t v, int64_t h,
                              int64_t start) {
    std::vector<float> out(ids.size() * h, 0.0f);
    for (std::size_t r = 0; r < ids.size(); ++r) {
        const int64_t local = ids[r] - start;
        if (local >= 0 && local < v)
            for (int64_t c = 0; c < h; ++c) out[r * h + c] = table[local * h + c];
    }
    return out;
}

/// dtable0 + scatter-add of dout rows by id, in float64.
std::vector<double> scatter_ref(const std::vector<float>& dtable0, const std::vector<float>& dout,
                                const std::vector<int32_t>& ids, int64_t v, int64_t h, int64_t start) {
    std::vector<double> g(dtable0.begin(), dtable0.end());
    for (std::size_t r = 0; r < ids.size(); ++r) {
        const int64_t local = ids[r] - start;
        if (local >= 0 && local < v)
            for (int64_t c = 0; c < h; ++c) g[local * h + c] += dout[r * h + c];
    }
    return g;
}

}  // namespace

class TestEmbedding : public QObject {
    Q_OBJECT
private slots:
    void embedding_forward_gathers_shard_rows() {
        const int64_t n = 40, h = 70;  // h > 64: more than one column block
        const auto ids = make_ids(n, 1);
        auto table = random_floats(kVocab * h, 2);
        OpContext ctx;
        auto ids_copy = ids;
        for (int64_t start : {int64_t{0}, kSplit}) {
            const int64_t v = start == 0 ? kSplit : kVocab - kSplit;
            std::vector<float> out(n * h, std::nanf(""));  // rows outside the shard must be written (zeros)
            ops::embedding_forward(ctx, view_f32(out.data(), {n, h}), view_i32(ids_copy.data(), {n}),
                                   view_f32(table.data() + start * h, {v, h}), start);
            std::vector<float> shard(table.begin() + start * h, table.begin() + (start + v) * h);
            MWB_VERIFY_BITWISE(out, gather_ref(ids, shard, v, h, start));
        }
    }

    void embedding_shards_sum_to_the_whole() {
        // Vocab-parallel: each rank gathers its rows, zeros elsewhere, and the all-reduce sums them.
        const int64_t s = 5, b = 3, h = 9, n = s * b;
        auto ids = make_ids(n, 3);
        auto table = random_floats(kVocab * h, 4);
        std::vector<float> whole(n * h), part0(n * h), part1(n * h);
        OpContext ctx;
        ops::embedding_forward(ctx, view_f32(whole.data(), {s, b, h}), view_i32(ids.data(), {s, b}),
                               view_f32(table.data(), {kVocab, h}), 0);
        ops::embedding_forward(ctx, view_f32(part0.data(), {s, b, h}), view_i32(ids.data(), {s, b}),
                               view_f32(table.data(), {kSplit, h}), 0);
        ops::embedding_forward(ctx, view_f32(part1.data(), {s, b, h}), view_i32(ids.data(), {s, b}),
                               view_f32(table.data() + kSplit * h, {kVocab - kSplit, h}), kSplit);
        std::vector<float> sum(n * h);
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = part0[i] + part1[i];  // x + 0 is exact
        MWB_VERIFY_BITWISE(sum, whole);
    }

    void embedding_backward_scatters_into_the_shard_only() {
        const int64_t n = 60, h = 70;
        auto ids = make_ids(n, 5);
        auto dout = random_floats(n * h, 6);
        const auto dtable0 = random_floats(kVocab * h, 7);  // gradients accumulate onto what is there
        OpContext ctx;
        auto whole = dtable0;
        ops::embedding_backward(ctx, view_f32(whole.data(), {kVocab, h}), view_f32(dout.data(), {n, h}),
                                view_i32(ids.data(), {n}), 0);
        // Each element is a float sum of a handful of O(1) terms (ids repeat ~4 times), which may cancel: a few
        // ulp of the largest term, so normwise (relative to the largest element) 1e-6.
        MWB_VERIFY_ERROR(normwise_error(whole, scatter_ref(dtable0, dout, ids, kVocab, h, 0)), 1e-6);

        // Each shard's table gets exactly the whole table's rows: ids outside it add nothing, and rows are
        // summed in the same order, so the concatenation is bit-identical.
        auto shard0 = std::vector<float>(dtable0.begin(), dtable0.begin() + kSplit * h);
        auto shard1 = std::vector<float>(dtable0.begin() + kSplit * h, dtable0.end());
        ops::embedding_backward(ctx, view_f32(shard0.data(), {kSplit, h}), view_f32(dout.data(), {n, h}),
                                view_i32(ids.data(), {n}), 0);
        ops::embedding_backward(ctx, view_f32(shard1.data(), {kVocab - kSplit, h}), view_f32(dout.data(), {n, h}),
                                view_i32(ids.data(), {n}), kSplit);
        shard0.insert(shard0.end(), shard1.begin(), shard1.end());
        MWB_VERIFY_BITWISE(shard0, whole);
    }

    void embedding_backward_ignores_ids_outside_the_shard() {
        const int64_t n = 4, h = 3;
        std::vector<int32_t> ids = {-1, 2, 3, 100};  // shard [2, 4): only rows 1 and 2 of dout land
        auto dout = random_floats(n * h, 8);
        std::vector<float> dtable(2 * h, 0.0f);
        OpContext ctx;
        ops::embedding_backward(ctx, view_f32(dtable.data(), {2, h}), view_f32(dout.data(), {n, h}),
                                view_i32(ids.data(), {n}), 2);
        MWB_VERIFY_BITWISE(dtable, std::vector<float>(dout.begin() + h, dout.begin() + 3 * h));
    }

    void embedding_does_not_depend_on_threads() {
        const int64_t n = 97, h = 200;  // 4 column blocks for the backward's threads
        auto ids = make_ids(n, 9);
        auto table = random_floats(kVocab * h, 10), dout = random_floats(n * h, 11);
        const auto run = [&](int threads) {
            mwb::test::ScopedThreads t(threads);
            OpContext ctx;
            auto tab = table;
            std::vector<float> out(n * h), dtable(kVocab * h, 0.0f);
            ops::embedding_forward(ctx, view_f32(out.data(), {n, h}), view_i32(ids.data(), {n}),
                                   view_f32(tab.data(), {kVocab, h}), 0);
            ops::embedding_backward(ctx, view_f32(dtable.data(), {kVocab, h}), view_f32(dout.data(), {n, h}),
                                    view_i32(ids.data(), {n}), 0);
            out.insert(out.end(), dtable.begin(), dtable.end());
            return out;
        };
        const auto one = run(1), two = run(2);
        MWB_VERIFY_BITWISE(two, one);
    }

    void position_embedding_forward_adds_offset_rows() {
        const int64_t s = 7, b = 3, h = 5, p = 12, offset = 4;
        const auto wpe = random_floats(p * h, 12);
        const auto out0 = random_floats(s * b * h, 13);  // the token embeddings it adds to
        auto out = out0;
        OpContext ctx;
        auto w = wpe;
        ops::position_embedding_forward(ctx, view_f32(out.data(), {s, b, h}), view_f32(w.data(), {p, h}), offset);
        std::vector<float> ref(out0.size());
        for (int64_t i = 0; i < s; ++i)
            for (int64_t j = 0; j < b; ++j)
                for (int64_t c = 0; c < h; ++c) {
                    const int64_t k = (i * b + j) * h + c;  // one float add: rounding the float64 sum is exact
                    ref[k] = static_cast<float>(double(out0[k]) + wpe[(i + offset) * h + c]);
                }
        MWB_VERIFY_BITWISE(out, ref);
    }

    void position_embedding_sequence_halves_match_the_whole() {
        // Sequence-parallel ranks hold S/2 positions each and pass their first position as the offset.
        const int64_t s = 8, b = 2, h = 6, p = 8, half = s / 2 * b * h;
        auto wpe = random_floats(p * h, 14);
        const auto out0 = random_floats(s * b * h, 15);
        auto whole = out0, first = std::vector<float>(out0.begin(), out0.begin() + half),
             second = std::vector<float>(out0.begin() + half, out0.end());
        OpContext ctx;
        ops::position_embedding_forward(ctx, view_f32(whole.data(), {s, b, h}), view_f32(wpe.data(), {p, h}), 0);
        ops::position_embedding_forward(ctx, view_f32(first.data(), {s / 2, b, h}), view_f32(wpe.data(), {p, h}), 0);
        ops::position_embedding_forward(ctx, view_f32(second.data(), {s / 2, b, h}), view_f32(wpe.data(), {p, h}),
                                        s / 2);
        first.insert(first.end(), second.begin(), second.end());
        MWB_VERIFY_BITWISE(first, whole);
    }

    void position_embedding_backward_sums_the_batch() {
        const int64_t s = 6, b = 4, h = 70, p = 10, offset = 3;
        const auto dout = random_floats(s * b * h, 16);
        const auto dwpe0 = random_floats(p * h, 17);
        auto dwpe = dwpe0;
        OpContext ctx;
        auto d = dout;
        ops::position_embedding_backward(ctx, view_f32(dwpe.data(), {p, h}), view_f32(d.data(), {s, b, h}), offset);
        std::vector<double> ref(dwpe0.begin(), dwpe0.end());
        for (int64_t i = 0; i < s; ++i)
            for (int64_t j = 0; j < b; ++j)
                for (int64_t c = 0; c < h; ++c) ref[(i + offset) * h + c] += dout[(i * b + j) * h + c];
        // 5-term float sums that may cancel: a few ulp of the largest term, normwise 1e-6. Rows outside
        // [offset, offset + S) stay exactly as they were.
        MWB_VERIFY_ERROR(normwise_error(dwpe, ref), 1e-6);
        for (int64_t k = 0; k < offset * h; ++k) QCOMPARE(dwpe[k], dwpe0[k]);
        for (int64_t k = (offset + s) * h; k < p * h; ++k) QCOMPARE(dwpe[k], dwpe0[k]);
    }

    void mismatched_shapes_throw() {
        std::vector<float> table(20), out(40), wpe(20);
        std::vector<int32_t> ids(8);
        OpContext ctx;
        // table (5, 4): out must be (8, 4) for 8 ids.
        QVERIFY_THROWS_EXCEPTION(mwb::Error,
                                 ops::embedding_forward(ctx, view_f32(out.data(), {8, 5}), view_i32(ids.data(), {8}),
                                                        view_f32(table.data(), {5, 4}), 0));
        QVERIFY_THROWS_EXCEPTION(mwb::Error,
                                 ops::embedding_forward(ctx, view_f32(out.data(), {7, 4}), view_i32(ids.data(), {8}),
                                                        view_f32(table.data(), {5, 4}), 0));
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error, ops::embedding_backward(ctx, view_f32(table.data(), {4, 5}), view_f32(out.data(), {8, 4}),
                                                view_i32(ids.data(), {8}), 0));
        // ids must be i32
        QVERIFY_THROWS_EXCEPTION(mwb::Error,
                                 ops::embedding_forward(ctx, view_f32(out.data(), {8, 4}), view_f32(out.data(), {8}),
                                                        view_f32(table.data(), {5, 4}), 0));
        // wpe (5, 4) holds 5 positions: S = 2 at offset 4 runs past it; negative offsets are refused.
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::position_embedding_forward(ctx, view_f32(out.data(), {2, 2, 4}),
                                                                             view_f32(wpe.data(), {5, 4}), 4));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::position_embedding_forward(ctx, view_f32(out.data(), {2, 2, 4}),
                                                                             view_f32(wpe.data(), {5, 4}), -1));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::position_embedding_backward(ctx, view_f32(wpe.data(), {5, 4}),
                                                                              view_f32(out.data(), {2, 2, 4}), 4));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, ops::position_embedding_backward(ctx, view_f32(wpe.data(), {4, 5}),
                                                                              view_f32(out.data(), {2, 2, 4}), 0));
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_embedding, TestEmbedding)
}  // namespace test_kernels_embedding
#include "test_embedding.moc"
