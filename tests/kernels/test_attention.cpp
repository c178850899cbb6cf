// Causal self-attention core against a naive float64 implementation (scale, causal mask, softmax, dropout
// with masks drawn from the documented global index), gradients of q, k, v against central finite
// differences of it, tensor-parallel head shards against the whole layer, and thread-count invariance;
// grouped-query and multi-query attention (G < A key/value heads) against the same float64 reference
// reading each query head's group, and against multi-head attention on K/V heads repeated per query head.
#include "support/child_process.h"
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"
#include "support/threads.h"

#include "mwb/kernels/device.h"
#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"
#include "mwb/kernels/philox.h"

#include <QtTest>

#include <cmath>

namespace test_kernels_attention {

using namespace mwb;
using mwb::test::finite_difference;
using mwb::test::normwise_error;
using mwb::test::random_floats;
using mwb::test::to_double;

namespace {

// S = sequence, B = micro batch, A = heads held here, D = head dim (ops.h letters).
struct Shape {
    int64_t S, B, A, D;
    int head_offset = 0, total_heads = 0;  // total_heads 0: A
    float p = 0;
    int64_t G = 0;  // key/value groups; 0: A (multi-head)

    int64_t groups() const { return G ? G : A; }
    int64_t per_group() const { return A / groups(); }
    int64_t qkv_width() const { return (A + 2 * groups()) * D; }
    int64_t qkv_size() const { return S * B * qkv_width(); }
    int64_t out_size() const { return S * B * A * D; }
    int64_t probs_size() const { return B * A * S * S; }
    AttentionParams params() const {
        AttentionParams ap;
        ap.num_heads = int(A);
        ap.num_query_groups = int(G);
        ap.head_offset = head_offset;
        ap.total_heads = total_heads ? total_heads : int(A);
        ap.batch = int(B);
        ap.softmax_scale = float(1.0 / std::sqrt(double(D)));
        ap.dropout_p = p;
        ap.rng = RngStream{2024, 11};
        return ap;
    }
    // Element offsets in qkv (S, B, G·(A/G+2)·D) with per group [q_0 … q_(A/G-1) | k | v], out (S, B, A·D),
    // probs (B, A, S, S); k and v of query head h are those of its group h / (A/G).
    int64_t group(int64_t i, int64_t b, int64_t h) const {
        return (i * B + b) * qkv_width() + h / per_group() * (per_group() + 2) * D;
    }
    int64_t q(int64_t i, int64_t b, int64_t h) const { return group(i, b, h) + h % per_group() * D; }
    int64_t k(int64_t i, int64_t b, int64_t h) const { return group(i, b, h) + per_group() * D; }
    int64_t v(int64_t i, int64_t b, int64_t h) const { return k(i, b, h) + D; }
    int64_t o(int64_t i, int64_t b, int64_t h) const { return (i * B + b) * A * D + h * D; }
    int64_t pr(int64_t b, int64_t h, int64_t i, int64_t j) const { return ((b * A + h) * S + i) * S + j; }
};

/// Dropout multipliers of every probability (b, h, i, j): 1/(1-p) or 0 from mwb::dropout_keep at the
/// documented global index ((b·total_heads + head_offset + h)·S + i)·S + j; all 1 without dropout.
std::vector<double> dropout_multipliers(const Shape& s) {
    const AttentionParams ap = s.params();
    std::vector<double> m(static_cast<std::size_t>(s.probs_size()), 1.0);
    if (ap.dropout_p <= 0) return m;
    const uint32_t threshold = dropout_keep_threshold(ap.dropout_p);
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.A; ++h)
            for (int64_t i = 0; i < s.S; ++i)
                for (int64_t j = 0; j < s.S; ++j) {
                    const auto index =
                        static_cast<uint64_t>(((b * ap.total_heads + ap.head_offset + h) * s.S + i) * s.S + j);
                    m[s.pr(b, h, i, j)] =
                        dropout_keep(ap.rng, index, threshold) ? 1.0 / (1.0 - double(ap.dropout_p)) : 0.0;
                }
    return m;
}

struct Ref {
    std::vector<double> out, probs;
};

/// Naive float64 attention: scores = scale·q·kᵀ for j <= i, softmax over j, out = (probs ∘ mult)·v.
Ref attention_ref(const std::vector<double>& qkv, const Shape& s, const std::vector<double>& mult) {
    const double scale = s.params().softmax_scale;
    Ref r{std::vector<double>(s.out_size(), 0.0), std::vector<double>(s.probs_size(), 0.0)};
    std::vector<double> row(s.S);
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.A; ++h)
            for (int64_t i = 0; i < s.S; ++i) {
                double mx = -INFINITY;
                for (int64_t j = 0; j <= i; ++j) {
                    double dot = 0;
                    for (int64_t d = 0; d < s.D; ++d) dot += qkv[s.q(i, b, h) + d] * qkv[s.k(j, b, h) + d];
                    row[j] = scale * dot;
                    mx = std::max(mx, row[j]);
                }
                double sum = 0;
                for (int64_t j = 0; j <= i; ++j) sum += (row[j] = std::exp(row[j] - mx));
                for (int64_t j = 0; j <= i; ++j) {
                    const double prob = row[j] / sum;
                    r.probs[s.pr(b, h, i, j)] = prob;
                    const double w = prob * mult[s.pr(b, h, i, j)];
                    for (int64_t d = 0; d < s.D; ++d) r.out[s.o(i, b, h) + d] += w * qkv[s.v(j, b, h) + d];
                }
            }
    return r;
}

struct Run {
    std::vector<float> out, probs, dqkv;
};

/// Forward and backward on the CPU ops; outputs start as NaN so that every element must be written.
Run run_attention(const Shape& s, std::vector<float>& qkv, std::vector<float>& dout) {
    const AttentionParams ap = s.params();
    Run r{std::vector<float>(s.out_size(), std::nanf("")), std::vector<float>(s.probs_size(), std::nanf("")),
          std::vector<float>(s.qkv_size(), std::nanf(""))};
    std::vector<float> ws(ops::attention_workspace_bytes(ap, s.S, ops::num_threads()) / sizeof(float) + 1);
    OpContext ctx;
    const TensorView qkv_v = view_f32(qkv.data(), {s.S, s.B, s.qkv_width()});
    const TensorView probs_v = view_f32(r.probs.data(), {s.B, s.A, s.S, s.S});
    const TensorView ws_v = view_f32(ws.data(), {int64_t(ws.size())});
    const TensorView out_v = view_f32(r.out.data(), {s.S, s.B, s.A * s.D});
    ops::attention_forward(ctx, out_v, probs_v, qkv_v, ws_v, ap);
    ops::attention_backward(ctx, view_f32(r.dqkv.data(), {s.S, s.B, s.qkv_width()}),
                            view_f32(dout.data(), {s.S, s.B, s.A * s.D}), qkv_v, out_v, probs_v, ws_v, ap);
    return r;
}

/// The q (which = 0, every query head), k or v part (1, 2: one head per group) of a qkv-shaped tensor.
template <class T>
std::vector<T> part(const std::vector<T>& qkv, const Shape& s, int which) {
    std::vector<T> v;
    for (int64_t i = 0; i < s.S; ++i)
        for (int64_t b = 0; b < s.B; ++b)
            for (int64_t h = 0; h < s.A; h += which == 0 ? 1 : s.per_group()) {
                const int64_t at = which == 0 ? s.q(i, b, h) : which == 1 ? s.k(i, b, h) : s.v(i, b, h);
                for (int64_t d = 0; d < s.D; ++d) v.push_back(qkv[at + d]);
            }
    return v;
}

/// Columns [c0, c1) of every row of a row-major tensor with `cols` columns.
std::vector<float> columns(const std::vector<float>& t, int64_t cols, int64_t c0, int64_t c1) {
    std::vector<float> v;
    for (std::size_t r = 0; r < t.size() / cols; ++r)
        v.insert(v.end(), t.begin() + r * cols + c0, t.begin() + r * cols + c1);
    return v;
}

}  // namespace

}  // namespace test_kernels_attention
Q_DECLARE_METATYPE(test_kernels_attention::Shape)
namespace test_kernels_attention {

class TestAttention : public QObject {
    Q_OBJECT
private slots:
    void matches_float64_and_finite_differences_data() {
        QTest::addColumn<Shape>("shape");
        QTest::newRow("S1_B2_A2_D3_dropout") << Shape{1, 2, 2, 3, 0, 0, 0.5f};  // one token: probs = mask
        QTest::newRow("S5_B2_A3_D3") << Shape{5, 2, 3, 3};
        QTest::newRow("S5_B2_A3_D3_dropout") << Shape{5, 2, 3, 3, 0, 0, 0.3f};
        // S not a multiple of the 64-row tiles, and past one tile: the lower triangle spans tiles.
        // (B and A are kept small here: the finite differences cost O(S²·B²·A²·D²).)
        QTest::newRow("S70_B2_A1_D4") << Shape{70, 2, 1, 4};
        QTest::newRow("S70_B1_A2_D4_dropout") << Shape{70, 1, 2, 4, 0, 0, 0.2f};
        QTest::newRow("S130_B1_A1_D3_dropout") << Shape{130, 1, 1, 3, 0, 0, 0.1f};
        // A tensor-parallel shard: heads 1..2 of 4, so masks come from global heads 1 and 2.
        QTest::newRow("S9_B2_A2_D4_heads1of4_dropout") << Shape{9, 2, 2, 4, 1, 4, 0.5f};
        // Grouped-query (2 groups of 2 query heads) and multi-query (1 group of 3) attention.
        QTest::newRow("S7_B2_A4_D3_G2") << Shape{7, 2, 4, 3, 0, 0, 0, 2};
        QTest::newRow("S7_B2_A4_D3_G2_dropout") << Shape{7, 2, 4, 3, 0, 0, 0.3f, 2};
        QTest::newRow("S70_B1_A3_D4_G1_dropout") << Shape{70, 1, 3, 4, 0, 0, 0.2f, 1};
        QTest::newRow("S9_B1_A2_D4_G1_heads2of4") << Shape{9, 1, 2, 4, 2, 4, 0.5f, 1};
    }
    void matches_float64_and_finite_differences() {
        QFETCH(Shape, shape);
        const Shape& s = shape;
        auto qkv = random_floats(s.qkv_size(), 1, -1.5f, 1.5f);  // scores up to ~±4: softmax far from uniform
        auto dout = random_floats(s.out_size(), 2);
        const Run got = run_attention(s, qkv, dout);

        const auto mult = dropout_multipliers(s);
        const auto xd = to_double(qkv), gd = to_double(dout);
        const Ref ref = attention_ref(xd, s, mult);
        // Forward: float GEMMs over D (scores) and S (out), a float softmax with exp_approx (a few ulp):
        // ~1e-7 of the largest element, 1e-6 normwise. Probabilities lie in [0, 1]: compared normwise too
        // (their largest is O(1)), the masked upper triangle must be exactly 0.
        MWB_VERIFY_ERROR(normwise_error(got.out, ref.out), 1e-6);
        MWB_VERIFY_ERROR(normwise_error(got.probs, ref.probs), 1e-6);

        // Backward against central differences of Σ out·dout in float64 (good to ~1e-9). Each of q, k, v is
        // compared normwise on its own: dq and dk pass through the softmax Jacobian (P∘(dP - rowdot)), which
        // cancels, so single elements near zero carry the rounding of larger terms.
        const auto fd = finite_difference(xd, [&](const std::vector<double>& x) {
            const auto out = attention_ref(x, s, mult).out;
            double l = 0;
            for (std::size_t i = 0; i < out.size(); ++i) l += out[i] * gd[i];
            return l;
        });
        MWB_VERIFY_ERROR(normwise_error(part(got.dqkv, s, 0), part(fd, s, 0)), 2e-6);
        MWB_VERIFY_ERROR(normwise_error(part(got.dqkv, s, 1), part(fd, s, 1)), 2e-6);
        MWB_VERIFY_ERROR(normwise_error(part(got.dqkv, s, 2), part(fd, s, 2)), 2e-6);
    }

    void masked_probabilities_are_exactly_zero() {
        const Shape s{70, 1, 2, 4, 0, 0, 0.1f};
        auto qkv = random_floats(s.qkv_size(), 3), dout = random_floats(s.out_size(), 4);
        const Run got = run_attention(s, qkv, dout);
        for (int64_t h = 0; h < s.A; ++h)
            for (int64_t i = 0; i < s.S; ++i)
                for (int64_t j = i + 1; j < s.S; ++j) QCOMPARE(got.probs[s.pr(0, h, i, j)], 0.0f);
    }

    void tensor_parallel_shards_match_the_whole_layer() {
        // 4 heads split over 2 ranks: each rank holds heads [2r, 2r + 2) with head_offset 2r. Its output,
        // probabilities and gradients must be exactly the whole layer's for those heads (dropout masks
        // included), so a TP run reproduces a TP=1 run.
        const Shape whole{70, 2, 4, 4, 0, 4, 0.3f};
        auto qkv = random_floats(whole.qkv_size(), 5), dout = random_floats(whole.out_size(), 6);
        const Run all = run_attention(whole, qkv, dout);
        for (int rank = 0; rank < 2; ++rank) {
            const Shape s{70, 2, 2, 4, 2 * rank, 4, 0.3f};
            auto qkv_r = columns(qkv, 4 * 3 * 4, rank * 2 * 3 * 4, (rank + 1) * 2 * 3 * 4);
            auto dout_r = columns(dout, 4 * 4, rank * 2 * 4, (rank + 1) * 2 * 4);
            const Run got = run_attention(s, qkv_r, dout_r);
            MWB_VERIFY_BITWISE(got.out, columns(all.out, 4 * 4, rank * 2 * 4, (rank + 1) * 2 * 4));
            MWB_VERIFY_BITWISE(got.dqkv, columns(all.dqkv, 4 * 3 * 4, rank * 2 * 3 * 4, (rank + 1) * 2 * 3 * 4));
            std::vector<float> probs;  // whole probs (B, 4, S, S): heads 2r, 2r + 1 of each b
            for (int64_t b = 0; b < 2; ++b)
                probs.insert(probs.end(), all.probs.begin() + whole.pr(b, 2 * rank, 0, 0),
                             all.probs.begin() + whole.pr(b, 2 * rank + 2, 0, 0));
            MWB_VERIFY_BITWISE(got.probs, probs);
        }
    }

    void results_do_not_depend_on_threads() {
        // 3 row tiles, 6 (b, h) pairs: uneven for 4 threads, and 1 vs 2 vs 3 vs 4 must agree bit for bit.
        // Grouped-query too: 3 (b, group) pairs in backward; and multi-query attention at micro-batch 1,
        // whose single (b, group) pair runs its tiles in parallel from 2 threads on.
        for (const Shape& s : {Shape{130, 2, 3, 8, 0, 0, 0.1f}, Shape{130, 3, 4, 8, 0, 0, 0.1f, 1},
                               Shape{200, 1, 3, 8, 0, 0, 0.1f, 1}}) {
            auto qkv = random_floats(s.qkv_size(), 7), dout = random_floats(s.out_size(), 8);
            const auto run = [&](int threads) {
                mwb::test::ScopedThreads t(threads);
                Run r = run_attention(s, qkv, dout);
                r.out.insert(r.out.end(), r.probs.begin(), r.probs.end());
                r.out.insert(r.out.end(), r.dqkv.begin(), r.dqkv.end());
                return r.out;
            };
            const auto one = run(1);
            for (int threads : {2, 3, 4}) {
                const auto other = run(threads);
                MWB_VERIFY_BITWISE(other, one);
            }
        }
    }

    void grouped_query_equals_multi_head_on_repeated_kv() {
        // GQA is MHA whose K/V heads are the group's, repeated per query head (how the published
        // reference code computes it). Built that way, MHA must give the same out and probs, bit for bit
        // (the same GEMMs on the same values), and dq; dk and dv of a group are the sum over its query
        // heads of MHA's (summed in head order: float addition of the same terms, compared to 1e-6).
        const Shape gqa{70, 2, 6, 4, 0, 0, 0.3f, 2}, mha{70, 2, 6, 4, 0, 0, 0.3f, 0};
        auto qkv = random_floats(gqa.qkv_size(), 21), dout = random_floats(gqa.out_size(), 22);
        std::vector<float> rep(mha.qkv_size());
        for (int64_t i = 0; i < gqa.S; ++i)
            for (int64_t b = 0; b < gqa.B; ++b)
                for (int64_t h = 0; h < gqa.A; ++h)
                    for (int64_t d = 0; d < gqa.D; ++d) {
                        rep[mha.q(i, b, h) + d] = qkv[gqa.q(i, b, h) + d];
                        rep[mha.k(i, b, h) + d] = qkv[gqa.k(i, b, h) + d];
                        rep[mha.v(i, b, h) + d] = qkv[gqa.v(i, b, h) + d];
                    }
        const Run g = run_attention(gqa, qkv, dout), m = run_attention(mha, rep, dout);
        MWB_VERIFY_BITWISE(g.out, m.out);
        MWB_VERIFY_BITWISE(g.probs, m.probs);
        MWB_VERIFY_BITWISE(part(g.dqkv, gqa, 0), part(m.dqkv, mha, 0));
        std::vector<double> dk(part(g.dqkv, gqa, 1).size(), 0.0), dv(dk.size(), 0.0);
        for (int64_t i = 0; i < gqa.S; ++i)
            for (int64_t b = 0; b < gqa.B; ++b)
                for (int64_t h = 0; h < gqa.A; ++h)
                    for (int64_t d = 0; d < gqa.D; ++d) {
                        const int64_t at = ((i * gqa.B + b) * gqa.groups() + h / gqa.per_group()) * gqa.D + d;
                        dk[at] += m.dqkv[mha.k(i, b, h) + d];
                        dv[at] += m.dqkv[mha.v(i, b, h) + d];
                    }
        MWB_VERIFY_ERROR(normwise_error(part(g.dqkv, gqa, 1), dk), 1e-6);
        MWB_VERIFY_ERROR(normwise_error(part(g.dqkv, gqa, 2), dv), 1e-6);
    }

    void grouped_query_shards_match_the_whole_layer() {
        // 4 groups of 2 query heads over 2 tensor-parallel ranks: rank r holds groups [2r, 2r + 2), i.e.
        // query heads [4r, 4r + 4) (head_offset 4r) and a contiguous block of qkv columns.
        const Shape whole{33, 2, 8, 4, 0, 8, 0.3f, 4};
        auto qkv = random_floats(whole.qkv_size(), 23), dout = random_floats(whole.out_size(), 24);
        const Run all = run_attention(whole, qkv, dout);
        const int64_t w = whole.qkv_width(), half = w / 2;
        for (int rank = 0; rank < 2; ++rank) {
            const Shape s{33, 2, 4, 4, 4 * rank, 8, 0.3f, 2};
            auto qkv_r = columns(qkv, w, rank * half, (rank + 1) * half);
            auto dout_r = columns(dout, 8 * 4, rank * 4 * 4, (rank + 1) * 4 * 4);
            const Run got = run_attention(s, qkv_r, dout_r);
            MWB_VERIFY_BITWISE(got.out, columns(all.out, 8 * 4, rank * 4 * 4, (rank + 1) * 4 * 4));
            MWB_VERIFY_BITWISE(got.dqkv, columns(all.dqkv, w, rank * half, (rank + 1) * half));
        }
    }

    void invalid_shapes_throw() {
        const Shape s{8, 2, 2, 4};
        const AttentionParams ap = s.params();
        std::vector<float> qkv(s.qkv_size()), out(s.out_size()), probs(s.probs_size()), big(4 * s.qkv_size());
        std::vector<float> ws(ops::attention_workspace_bytes(ap, s.S, ops::num_threads()) / sizeof(float));
        OpContext ctx;
        const auto fwd = [&](TensorView o, TensorView p, TensorView x, const AttentionParams& a) {
            ops::attention_forward(ctx, o, p, x, view_f32(ws.data(), {int64_t(ws.size())}), a);
        };
        const TensorView qkv_v = view_f32(qkv.data(), {8, 2, 24}), out_v = view_f32(out.data(), {8, 2, 8});
        const TensorView probs_v = view_f32(probs.data(), {2, 2, 8, 8});
        fwd(out_v, probs_v, qkv_v, ap);  // the shapes above are right
        // qkv's last dimension must split into A·3·D, its second be B.
        QVERIFY_THROWS_EXCEPTION(mwb::Error, fwd(out_v, probs_v, view_f32(qkv.data(), {8, 2, 23}), ap));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, fwd(out_v, probs_v, view_f32(qkv.data(), {16, 1, 24}), ap));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, fwd(view_f32(out.data(), {8, 2, 7}), probs_v, qkv_v, ap));
        QVERIFY_THROWS_EXCEPTION(mwb::Error, fwd(out_v, view_f32(probs.data(), {2, 2, 8, 7}), qkv_v, ap));
        AttentionParams bad = ap;
        bad.head_offset = 1;  // heads [1, 3) of 2
        QVERIFY_THROWS_EXCEPTION(mwb::Error, fwd(out_v, probs_v, qkv_v, bad));
        bad = ap;
        bad.dropout_p = 1.0f;
        QVERIFY_THROWS_EXCEPTION(mwb::Error, fwd(out_v, probs_v, qkv_v, bad));
        bad = ap;
        bad.num_query_groups = 3;  // 2 heads do not split into 3 groups
        QVERIFY_THROWS_EXCEPTION(mwb::Error, fwd(out_v, probs_v, qkv_v, bad));
        QVERIFY_THROWS_EXCEPTION(mwb::Error,
                                 ops::attention_backward(ctx, view_f32(big.data(), {8, 2, 25}), out_v, qkv_v, out_v,
                                                         probs_v, view_f32(ws.data(), {int64_t(ws.size())}), ap));
    }

    void cuda_checks_take_16bit_views_of_one_dtype() {
        // CUDA's kernels are templated on the storage dtype: bf16/f16 views pass the dispatcher's
        // checks, a mix of dtypes is refused by name (before any backend runs: no GPU needed).
        const Shape s{8, 1, 1, 4};
        AttentionParams ap = s.params();
        uint16_t qkv[96] = {}, out[32] = {};
        float out32[32] = {}, lse[8] = {}, ws[8] = {};
        OpContext ctx{Device::CUDA, nullptr};
        const auto on_gpu = [](void* d, DType t, std::initializer_list<int64_t> shape) {
            return make_view(d, t, shape, Device::CUDA);
        };
        const TensorView probs_v = on_gpu(lse, DType::F32, {8}), ws_v = on_gpu(ws, DType::F32, {8});
        try {
            ops::attention_forward(ctx, on_gpu(out32, DType::F32, {8, 1, 4}), probs_v,
                                   on_gpu(qkv, DType::BF16, {8, 1, 12}), ws_v, ap);
            QFAIL("no error");
        } catch (const mwb::Error& e) {
            QVERIFY2(QString(e.what()).contains("attention_forward: out must be of qkv's dtype bf16"), e.what());
        }
        if (probe_devices().cuda_devices > 0) return;  // the views are host memory: never launch on them
        for (const DType t : {DType::BF16, DType::F16}) {
            try {  // valid 16-bit views: only the missing device (or build) can stop the call now
                ops::attention_forward(ctx, on_gpu(out, t, {8, 1, 4}), probs_v, on_gpu(qkv, t, {8, 1, 12}), ws_v, ap);
            } catch (const mwb::Error& e) {
                QVERIFY2(!QString(e.what()).contains("must be"), e.what());
            }
        }
    }

    void too_small_workspace_throws() {
        // The workspace check runs inside the ops' OpenMP region; an exception escaping that region ends in
        // std::terminate, so this check runs in a child process and a crash there fails it here.
        if (!mwb::test::in_child()) {
            const auto r = mwb::test::run_test_function_in_child("too_small_workspace_throws");
            QVERIFY2(r.exited && r.code == 0, r.describe().c_str());
            return;
        }
        const Shape s{8, 1, 1, 4};
        const AttentionParams ap = s.params();
        std::vector<float> qkv(s.qkv_size(), 0.5f), out(s.out_size()), probs(s.probs_size()), ws(4);
        OpContext ctx;
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error,
            ops::attention_forward(ctx, view_f32(out.data(), {8, 1, 4}), view_f32(probs.data(), {1, 1, 8, 8}),
                                   view_f32(qkv.data(), {8, 1, 12}), view_f32(ws.data(), {4}), ap));
        QVERIFY_THROWS_EXCEPTION(
            mwb::Error, ops::attention_backward(ctx, view_f32(qkv.data(), {8, 1, 12}), view_f32(out.data(), {8, 1, 4}),
                                                view_f32(qkv.data(), {8, 1, 12}), view_f32(out.data(), {8, 1, 4}),
                                                view_f32(probs.data(), {1, 1, 8, 8}), view_f32(ws.data(), {4}), ap));
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_attention, TestAttention)
}  // namespace test_kernels_attention
#include "test_attention.moc"
