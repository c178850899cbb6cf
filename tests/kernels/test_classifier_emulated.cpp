// The CUDA classifier kernels (kernels/cuda/classifier_kernels.cuh) executed on CPU threads by
// cuda_emulation.h: the fused loss + gradient, the vocabulary-parallel partials and backward against
// float64 softmax cross-entropy; the shards' combination (rescale, lse) bit for bit against the CPU
// ops (the same float formula); the loss sum against a float64 sum; the word embedding's backward bit
// for bit against the CPU op (both add each vocabulary row's contributions in row order), with ids
// outside the shard, repeated ids and more rows than one staging pass. Both the 128-bit (V = 4) and
// the scalar (V = 1) kernels run. On 16-bit views (bf16, f16): the embedding backward of a 16-bit
// dout is the CPU op on its values bit for bit; the embedding and position-embedding forward into a
// 16-bit out (f32 or 16-bit tables) store each value rounded once, and the position backward sums a
// 16-bit dout as the CPU op sums its values. Into an f16 gradient arena (fp16 runs without
// accumulate_allreduce_grads_in_fp32): the position backward (k_pos_bwd's f16 table) and the word
// embedding backward as its launcher runs it (slices of 64-row blocks widened into fp32, the fp32
// kernel, narrowed) bit for bit against the CPU op on the same f16 table (itself held to the fp32 sum
// rounded once by an independent encoder in test_kernels_f16_gradients), and against that fp32 sum
// rounded once by the compiler's _Float16 here. No GPU.
#include "cuda_emulation.h"

#include "classifier_kernels.cuh"
#include "emulated_storage.h"

#include "mwb/kernels/ops.h"
#include "support/precision_ref.h"
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace test_kernels_classifier_emulated {

namespace cl = mwb::cuda::classifier;
namespace st = mwb::cuda::storage;
using mwb::DType;
using mwb::test::decode16;
using mwb::test::encode16;
namespace emu = mwb::emulation;
using mwb::test::max_rel_error;
using mwb::test::normwise_error;
using mwb::test::random_floats;

namespace {

constexpr int kThreads = 64;  // two warps: the block tree and the warp butterflies both run

struct Problem {
    int64_t rows, v;
    std::vector<float> logits;
    std::vector<int32_t> targets;
    std::vector<float> scale;
    Problem(int64_t r, int64_t vocab, uint32_t seed) : rows(r), v(vocab) {
        logits = random_floats(static_cast<std::size_t>(rows * v), seed, -4.0f, 4.0f);
        for (int64_t c = 0; c < v; ++c) {
            logits[static_cast<std::size_t>(v + c)] *= 8.0f;  // peaked
            logits[static_cast<std::size_t>(2 * v + c)] =
                logits[static_cast<std::size_t>(2 * v + c)] * 0.01f + 50;  // flat, far from 0
        }
        for (int64_t n = 0; n < rows; ++n) {
            targets.push_back(static_cast<int32_t>((n * 97 + 5) % v));
            scale.push_back(n == 3 ? 0.0f : 0.5f + 0.1f * static_cast<float>(n));
        }
    }
    /// float64 log-sum-exp of row n over columns [c0, c1).
    double lse(int64_t n, int64_t c0, int64_t c1) const {
        double mx = -INFINITY, s = 0;
        for (int64_t c = c0; c < c1; ++c) mx = std::max(mx, double(logits[n * v + c]));
        for (int64_t c = c0; c < c1; ++c) s += std::exp(double(logits[n * v + c]) - mx);
        return mx + std::log(s);
    }
    /// float64 (softmax − onehot)·scale over the whole row.
    std::vector<double> gradient() const {
        std::vector<double> g(logits.size());
        for (int64_t n = 0; n < rows; ++n) {
            const double l = lse(n, 0, v);
            for (int64_t c = 0; c < v; ++c)
                g[n * v + c] = scale[n] * (std::exp(double(logits[n * v + c]) - l) - (c == targets[n] ? 1.0 : 0.0));
        }
        return g;
    }
};

}  // namespace

class TestClassifierEmulated : public QObject {
    Q_OBJECT

    template <int V>
    static void fused_case(int64_t rows, int64_t v) {
        const Problem p(rows, v, 7);
        std::vector<float> lse(rows, -1), tl(rows, -1), g = p.logits;
        emu::launch(static_cast<unsigned>(rows), 1, kThreads,
                    [&] { cl::k_ce_fused<V>(lse.data(), tl.data(), g.data(), p.targets.data(), p.scale.data(), v); });
        std::vector<double> lse_ref(rows);
        for (int64_t n = 0; n < rows; ++n) {
            lse_ref[n] = p.lse(n, 0, v);
            QCOMPARE(tl[n], p.logits[n * v + p.targets[n]]);  // picked, not computed
        }
        // Online Σexp in float over a few hundred expf terms: a few ulp of lse. Measured ~1e-7.
        MWB_VERIFY_ERROR(max_rel_error(lse, lse_ref), 1e-6);
        // exp(x − m)/s with the float rounding of x − m (up to ~60 in the peaked row: 2e-6 relative on
        // its exps, as the CPU op). Normwise: elements span 1e-30 to 1. Measured ~1e-7.
        MWB_VERIFY_ERROR(normwise_error(g, p.gradient()), 1e-6);
        for (int64_t c = 0; c < v; ++c) QCOMPARE(g[3 * v + c], 0.0f);  // scale 0: no gradient
        // The CPU op (a different exp, same formula) agrees to the same rounding.
        std::vector<float> clse(rows), ctl(rows), cg = p.logits;
        auto targets = p.targets;
        auto scale = p.scale;
        mwb::OpContext ctx;
        mwb::ops::cross_entropy_fused(ctx, mwb::view_f32(clse.data(), {rows}), mwb::view_f32(ctl.data(), {rows}),
                                      mwb::view_f32(cg.data(), {rows, v}), mwb::view_i32(targets.data(), {rows}),
                                      mwb::view_f32(scale.data(), {rows}));
        MWB_VERIFY_ERROR(max_rel_error(lse, mwb::test::to_double(clse)), 1e-6);
        MWB_VERIFY_ERROR(normwise_error(g, mwb::test::to_double(cg)), 1e-6);
    }

    template <int V>
    static void shard_case(int64_t rows, int64_t v_total, int64_t v0, int64_t v1) {
        // Partials and backward over the shard [v0, v1) of a row of v_total words.
        const Problem p(rows, v_total, 11);
        const int64_t v = v1 - v0;
        std::vector<float> shard;
        for (int64_t n = 0; n < rows; ++n)
            shard.insert(shard.end(), p.logits.begin() + n * v_total + v0, p.logits.begin() + n * v_total + v1);
        std::vector<float> mx(rows), se(rows), tl(rows);
        emu::launch(static_cast<unsigned>(rows), 1, kThreads, [&] {
            cl::k_ce_partials<V>(mx.data(), se.data(), tl.data(), shard.data(), p.targets.data(), v, v0);
        });
        std::vector<double> lse_ref(rows), lse_whole(rows);
        std::vector<float> lse_got(rows);
        for (int64_t n = 0; n < rows; ++n) {
            QCOMPARE(mx[n], *std::max_element(shard.begin() + n * v, shard.begin() + (n + 1) * v));
            const int64_t local = p.targets[n] - v0;
            QCOMPARE(tl[n], local >= 0 && local < v ? shard[n * v + local] : 0.0f);
            lse_ref[n] = p.lse(n, v0, v1);
            lse_got[n] = static_cast<float>(double(mx[n]) + std::log(double(se[n])));
            lse_whole[n] = p.lse(n, 0, v_total);
        }
        MWB_VERIFY_ERROR(max_rel_error(lse_got, lse_ref), 1e-6);
        // Backward with the whole row's lse: this shard's columns of the whole gradient.
        std::vector<float> lse_f(rows);
        for (int64_t n = 0; n < rows; ++n) lse_f[n] = static_cast<float>(lse_whole[n]);
        emu::launch(static_cast<unsigned>(rows), 1, kThreads,
                    [&] { cl::k_ce_backward<V>(shard.data(), p.targets.data(), lse_f.data(), p.scale.data(), v, v0); });
        const std::vector<double> whole = p.gradient();
        std::vector<double> want;
        for (int64_t n = 0; n < rows; ++n)
            want.insert(want.end(), whole.begin() + n * v_total + v0, whole.begin() + n * v_total + v1);
        // exp(x − lse) with lse rounded to float (half an ulp of ~50: 2e-6 relative in the flat row).
        MWB_VERIFY_ERROR(normwise_error(shard, want), 3e-6);
    }

    template <int V>
    static void embedding_case(int64_t rows, int64_t vocab, int64_t h, int64_t vocab_start) {
        const std::vector<float> dout = random_floats(static_cast<std::size_t>(rows * h), 21, -1, 1);
        std::vector<int32_t> ids(rows);
        for (int64_t r = 0; r < rows; ++r)  // repeats (token 3 every 5th row) and ids outside the shard
            ids[r] =
                r % 5 == 0 ? static_cast<int32_t>(vocab_start + 3) : static_cast<int32_t>((r * 131) % (vocab + 40));
        std::vector<float> want = random_floats(static_cast<std::size_t>(vocab * h), 22, -1, 1), got = want;
        mwb::OpContext ctx;
        auto d = dout;
        mwb::ops::embedding_backward(ctx, mwb::view_f32(want.data(), {vocab, h}), mwb::view_f32(d.data(), {rows, h}),
                                     mwb::view_i32(ids.data(), {rows}), vocab_start);
        const unsigned gx = static_cast<unsigned>((h + kThreads * V - 1) / (kThreads * V));
        const unsigned gy =
            static_cast<unsigned>((vocab + cl::kEmbeddingRowsPerBlock - 1) / cl::kEmbeddingRowsPerBlock);
        emu::launch(gx, gy, kThreads,
                    [&] { cl::k_embedding_bwd<V>(got.data(), dout.data(), ids.data(), rows, h, vocab, vocab_start); });
        MWB_VERIFY_BITWISE(got, want);
    }

    /// The embedding backward of a 16-bit dout (storage S): the CPU op on dout's values, bit for bit.
    template <int V, class S>
    static void embedding_case_16bit(int64_t rows, int64_t vocab, int64_t h, int64_t vocab_start) {
        const std::vector<uint16_t> d16 = encode16(S::dtype, random_floats(static_cast<std::size_t>(rows * h), 23, -1, 1));
        std::vector<float> dout = decode16(S::dtype, d16);
        std::vector<int32_t> ids(rows);
        for (int64_t r = 0; r < rows; ++r) ids[r] = static_cast<int32_t>((r * 37) % (vocab + 20));
        std::vector<float> want = random_floats(static_cast<std::size_t>(vocab * h), 24, -1, 1), got = want;
        mwb::OpContext ctx;
        mwb::ops::embedding_backward(ctx, mwb::view_f32(want.data(), {vocab, h}), mwb::view_f32(dout.data(), {rows, h}),
                                     mwb::view_i32(ids.data(), {rows}), vocab_start);
        const unsigned gx = static_cast<unsigned>((h + kThreads * V - 1) / (kThreads * V));
        const unsigned gy =
            static_cast<unsigned>((vocab + cl::kEmbeddingRowsPerBlock - 1) / cl::kEmbeddingRowsPerBlock);
        emu::launch(gx, gy, kThreads,
                    [&] { cl::k_embedding_bwd<V, S>(got.data(), d16.data(), ids.data(), rows, h, vocab, vocab_start); });
        MWB_VERIFY_BITWISE(got, want);
    }

    /// Embedding and position embedding forward into a 16-bit out (SO) from tables in ST, and the
    /// position backward of a 16-bit dout, against the CPU ops on the same values.
    template <class SO, class ST>
    static void embedding_forward_16bit() {
        constexpr DType dt = SO::dtype;
        const int64_t S_len = 6, B = 3, h = 20, vocab = 30, vocab_start = 10, rows = S_len * B, P = 9, offset = 2;
        std::vector<float> table = random_floats(static_cast<std::size_t>(vocab * h), 25, -2, 2);
        std::vector<float> wpe = random_floats(static_cast<std::size_t>(P * h), 26, -2, 2);
        std::vector<typename ST::type> table_s(table.size()), wpe_s(wpe.size());
        if constexpr (std::is_same_v<ST, st::F32>) {
            table_s = table;
            wpe_s = wpe;
        } else {
            table_s = encode16(dt, table);
            wpe_s = encode16(dt, wpe);
            table = decode16(dt, table_s);
            wpe = decode16(dt, wpe_s);
        }
        std::vector<int32_t> ids(rows);
        for (int64_t r = 0; r < rows; ++r) ids[r] = static_cast<int32_t>((r * 7) % (vocab + 15));  // some outside
        std::vector<uint16_t> out(rows * h, 0x7E00);
        emu::launch(2, 1, kThreads, [&] {
            cl::k_embedding_fwd<SO, ST>(out.data(), ids.data(), table_s.data(), rows, h, vocab, vocab_start);
        });
        emu::launch(2, 1, kThreads, [&] { cl::k_pos_fwd<SO, ST>(out.data(), wpe_s.data(), S_len, B, h, offset); });
        // The CPU ops on f32 values: each element of out is one sum, rounded once by the 16-bit store.
        std::vector<float> want(rows * h);
        mwb::OpContext ctx;
        mwb::ops::embedding_forward(ctx, mwb::view_f32(want.data(), {rows, h}), mwb::view_i32(ids.data(), {rows}),
                                    mwb::view_f32(table.data(), {vocab, h}), vocab_start);
        // ... where the first store rounded the table row already (a 16-bit out holds it rounded).
        want = mwb::test::rounded16(dt, want);
        mwb::ops::position_embedding_forward(ctx, mwb::view_f32(want.data(), {S_len, B, h}),
                                             mwb::view_f32(wpe.data(), {P, h}), offset);
        QCOMPARE(out, encode16(dt, want));
        // Backward: dwpe (f32) += Σ_b dout.
        const std::vector<uint16_t> d16 = encode16(dt, random_floats(static_cast<std::size_t>(rows * h), 27, -1, 1));
        std::vector<float> dout = decode16(dt, d16), dwpe = random_floats(static_cast<std::size_t>(P * h), 28, -1, 1);
        std::vector<float> dwpe_cpu = dwpe;
        emu::launch(2, 1, kThreads, [&] { cl::k_pos_bwd<SO>(dwpe.data(), d16.data(), S_len, B, h, offset); });
        mwb::ops::position_embedding_backward(ctx, mwb::view_f32(dwpe_cpu.data(), {P, h}),
                                              mwb::view_f32(dout.data(), {S_len, B, h}), offset);
        MWB_VERIFY_BITWISE(dwpe, dwpe_cpu);
    }

    /// x's values rounded once to fp16 by the compiler (_Float16), and how many needed it.
    static std::vector<float> rounded_once(std::vector<float> x, int& rounded) {
        for (float& v : x) {
            rounded += mwb::test::fp16_ref(v) != v;
            v = mwb::test::fp16_ref(v);
        }
        return x;
    }

    /// Word and position embedding backward into f16 tables from a dout in storage S; the launcher widens
    /// the word table embedding_slice_rows(h, max_elements) vocabulary rows at a time (max_elements:
    /// kEmbeddingWidenElements there, smaller here so that small tables take several slices).
    template <int V, class S>
    static void f16_gradient_case(int64_t rows, int64_t vocab, int64_t h, int64_t vocab_start, int64_t max_elements) {
        const int64_t slice_rows = cl::embedding_slice_rows(h, max_elements);
        const std::vector<float> dvals = random_floats(static_cast<std::size_t>(rows * h), 41, -1, 1);
        std::vector<typename S::type> d(dvals.size());
        if constexpr (std::is_same_v<S, st::F32>)
            d = dvals;
        else
            d = encode16(S::dtype, dvals);
        std::vector<int32_t> ids(rows);
        for (int64_t r = 0; r < rows; ++r)  // repeats (each row of the table summed over several) and outsiders
            ids[r] = r % 3 == 0 ? static_cast<int32_t>(vocab_start + 5) : static_cast<int32_t>((r * 29) % (vocab + 30));
        const std::vector<uint16_t> table0 = encode16(DType::F16, random_floats(static_cast<std::size_t>(vocab * h), 42, -8, 8));
        // The launcher's sequence: slices widened, the fp32 kernel with the slice's vocab_start, narrowed.
        std::vector<uint16_t> got = table0;
        for (int64_t v0 = 0; v0 < vocab; v0 += slice_rows) {
            const int64_t n = std::min(slice_rows, vocab - v0);
            std::vector<uint16_t> part(got.begin() + v0 * h, got.begin() + (v0 + n) * h);
            std::vector<float> wide = decode16(DType::F16, part);
            const unsigned gx = static_cast<unsigned>((h + kThreads * V - 1) / (kThreads * V));
            const unsigned gy = static_cast<unsigned>((n + cl::kEmbeddingRowsPerBlock - 1) / cl::kEmbeddingRowsPerBlock);
            emu::launch(gx, gy, kThreads, [&] {
                cl::k_embedding_bwd<V, S>(wide.data(), d.data(), ids.data(), rows, h, n, vocab_start + v0);
            });
            part = encode16(DType::F16, wide);
            std::copy(part.begin(), part.end(), got.begin() + v0 * h);
        }
        mwb::OpContext ctx;
        std::vector<uint16_t> cpu = table0;
        const auto dview = [&](std::initializer_list<int64_t> shape) { return mwb::make_view(d.data(), S::dtype, shape); };
        mwb::ops::embedding_backward(ctx, mwb::make_view(cpu.data(), DType::F16, {vocab, h}), dview({rows, h}),
                                     mwb::view_i32(ids.data(), {rows}), vocab_start);
        QCOMPARE(got, cpu);
        // The fp32 sum (table + every matching row, in row order) rounded once.
        std::vector<float> sum = decode16(DType::F16, table0);
        const std::vector<float> dv = std::is_same_v<S, st::F32> ? dvals : decode16(S::dtype, encode16(S::dtype, dvals));
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t local = ids[r] - vocab_start;
            if (local < 0 || local >= vocab) continue;
            for (int64_t c = 0; c < h; ++c) sum[local * h + c] += dv[r * h + c];
        }
        int rounded = 0;
        MWB_VERIFY_BITWISE(decode16(DType::F16, got), rounded_once(sum, rounded));
        QVERIFY(rounded > 0);
        // Position embedding: dwpe (P, h) f16 += Σ_b dout[s, b] over (S_len, B) = rows.
        const int64_t B = 4, S_len = rows / B, P = S_len + 3, offset = 2;
        const std::vector<uint16_t> wpe0 = encode16(DType::F16, random_floats(static_cast<std::size_t>(P * h), 43, -8, 8));
        std::vector<uint16_t> dwpe = wpe0, dwpe_cpu = wpe0;
        emu::launch(2, 1, kThreads, [&] { cl::k_pos_bwd<S, st::F16>(dwpe.data(), d.data(), S_len, B, h, offset); });
        mwb::ops::position_embedding_backward(ctx, mwb::make_view(dwpe_cpu.data(), DType::F16, {P, h}),
                                              dview({S_len, B, h}), offset);
        QCOMPARE(dwpe, dwpe_cpu);
        std::vector<float> psum = decode16(DType::F16, wpe0);
        for (int64_t s_ = 0; s_ < S_len; ++s_)
            for (int64_t c = 0; c < h; ++c)
                for (int64_t b_ = 0; b_ < B; ++b_) psum[(s_ + offset) * h + c] += dv[(s_ * B + b_) * h + c];
        rounded = 0;
        MWB_VERIFY_BITWISE(decode16(DType::F16, dwpe), rounded_once(psum, rounded));
        QVERIFY(rounded > 0);
    }

private slots:
    void gradients_into_an_f16_arena() {
        // Slices: whole 64-row blocks within the bound, at least one block.
        QCOMPARE(cl::embedding_slice_rows(2048, cl::kEmbeddingWidenElements), int64_t{8192});  // 64 MiB
        QCOMPARE(cl::embedding_slice_rows(40, 128 * 40 + 39), int64_t{128});
        QCOMPARE(cl::embedding_slice_rows(40, 127 * 40), int64_t{64});
        QCOMPARE(cl::embedding_slice_rows(int64_t{1} << 20, cl::kEmbeddingWidenElements), int64_t{64});
        f16_gradient_case<4, st::F16>(1200, 300, 40, 10, 128 * 40);  // three slices, the last partial; two staging passes
        f16_gradient_case<1, st::F16>(64, 150, 37, 0, 64 * 37);
        f16_gradient_case<4, st::F32>(48, 100, 8, 30, cl::kEmbeddingWidenElements);  // one slice
    }

    void embeddings_on_16bit_views() {
        embedding_case_16bit<4, st::BF16>(1500, 150, 40, 0);
        embedding_case_16bit<1, st::F16>(300, 100, 37, 50);
        embedding_case_16bit<4, st::F16>(70, 200, 8 * 64 + 4, 20);
        embedding_forward_16bit<st::BF16, st::F32>();
        embedding_forward_16bit<st::BF16, st::BF16>();
        embedding_forward_16bit<st::F16, st::F32>();
        embedding_forward_16bit<st::F16, st::F16>();
    }

    void fused_matches_float64() {
        fused_case<4>(6, 256);
        fused_case<1>(6, 257);
        fused_case<1>(5, 40);  // fewer columns than threads: idle lanes merge empty states
    }

    void shard_partials_and_backward_match_float64() {
        shard_case<4>(6, 300, 100, 200);
        shard_case<1>(6, 301, 0, 151);
        shard_case<1>(6, 301, 151, 301);
    }

    void combination_is_the_cpu_ops() {
        const int64_t n = 300;
        std::vector<float> mx = random_floats(n, 31, -5, 20), gmax = mx, se = random_floats(n, 32, 1, 500);
        for (int64_t i = 0; i < n; ++i) gmax[i] += static_cast<float>(i % 7);  // the global max is >= the shard's
        std::vector<float> se_gpu = se, lse_gpu(n), se_cpu = se, lse_cpu(n);
        emu::launch(2, 1, kThreads, [&] { cl::k_ce_rescale<int64_t>(se_gpu.data(), mx.data(), gmax.data(), n); });
        emu::launch(2, 1, kThreads, [&] { cl::k_ce_lse<uint32_t>(lse_gpu.data(), gmax.data(), se_gpu.data(), n); });
        mwb::OpContext ctx;
        const auto v = [n](std::vector<float>& x) { return mwb::view_f32(x.data(), {n}); };
        mwb::ops::cross_entropy_rescale(ctx, v(se_cpu), v(mx), v(gmax));
        mwb::ops::cross_entropy_lse(ctx, v(lse_cpu), v(gmax), v(se_cpu));
        MWB_VERIFY_BITWISE(se_gpu, se_cpu);
        MWB_VERIFY_BITWISE(lse_gpu, lse_cpu);
    }

    void loss_sum_matches_float64() {
        for (int64_t n : {int64_t{1}, int64_t{63}, int64_t{1000}}) {
            std::vector<float> lse = random_floats(n, 41, 5, 12), tl = random_floats(n, 42, -3, 3);
            double got = -1, want = 0;
            emu::launch(1, 1, kThreads, [&] { cl::k_ce_loss_sum<double>(&got, lse.data(), tl.data(), n, 1.0, false); });
            for (int64_t i = 0; i < n; ++i) want += double(lse[i]) - double(tl[i]);
            // float64 sums of ~1e3 terms of ~10 in another order: ~1e-16 relative each step.
            MWB_VERIFY_ERROR(std::abs(got - want) / std::abs(want), 1e-13);
            // The pipeline's accumulation: previous + sum / divisor in float64, as the host adds.
            const double sum = got, before = 0.375;
            double acc = before;
            emu::launch(1, 1, kThreads, [&] { cl::k_ce_loss_sum<double>(&acc, lse.data(), tl.data(), n, 3.0, true); });
            QCOMPARE(acc, before + sum / 3.0);
        }
    }

    void embedding_backward_is_the_cpu_op_bit_for_bit() {
        embedding_case<4>(1500, 150, 40, 0);         // two staging passes, three vocabulary blocks
        embedding_case<1>(300, 100, 37, 50);         // a shard [50, 150): ids below and above it are skipped
        embedding_case<4>(70, 200, 8 * 64 + 4, 20);  // columns beyond one block's reach
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_classifier_emulated, TestClassifierEmulated)
}  // namespace test_kernels_classifier_emulated
#include "test_classifier_emulated.moc"
