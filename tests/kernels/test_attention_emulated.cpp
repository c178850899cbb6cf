// The CUDA attention kernels (kernels/cuda/attention_kernels.cuh, and the tensor-core ones of
// attention_tc_kernels.cuh), executed on the CPU by cuda_emulation.h, against the CPU op: forward output
// and backward dqkv within the tolerances the GPU checks use (fp32 kernels 1e-5 and 5e-5 normwise; the
// bf16 tensor-core kernels, on bf16-valued inputs, 5e-3 where the GPU check allows 1e-2), with and
// without dropout (the same Philox masks), a tensor-parallel head offset, every instantiated head dim,
// sequence lengths around the blocks and tiles, and grouped-query attention (G = A/2, G = 1). The CPU
// reference always runs multi-head attention on K/V expanded per query head, its dk/dv summed per group
// (for G = A, the CPU op itself). Outputs start as sentinels, so an element the kernels never write fails. No GPU.
#include "cuda_emulation.h"

#include "attention_kernels.cuh"
#include "attention_tc_kernels.cuh"

#include "mwb/kernels/ops.h"
#include "mwb/kernels/precision.h"
#include "support/reference.h"

#include <QtTest>

#include <algorithm>
#include <random>

using namespace mwb;
namespace att = mwb::cuda::attention;

namespace {

/// max |got − want| / max |want|, as the GPU checks measure.
double normwise(const std::vector<float>& got, const std::vector<float>& want) {
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        diff = std::max(diff, static_cast<double>(std::abs(got[i] - want[i])));
        scale = std::max(scale, static_cast<double>(std::abs(want[i])));
    }
    return diff / scale;
}

struct Errors {
    double out = 0, dqkv = 0;
};

struct Case {
    int64_t S, B, A;
    int64_t G = 0;  // key/value groups; 0: G = A (multi-head)
    float dropout = 0.0f;
    int head_offset = 0, total_heads = 0;  // 0: total_heads = A
};

/// The CPU reference of a grouped qkv (S, B, G·(A/G + 2)·D): K/V expanded into a multi-head qkv
/// (S, B, A·3·D) with every query head's own copy of its group's k and v, the CPU op's multi-head
/// attention on it, and its dk/dv summed back over each group's heads — independent of any grouped code.
template <int D>
void cpu_reference(std::vector<float>& out, std::vector<float>& dqkv, const std::vector<float>& qkv,
                   const std::vector<float>& dout, int64_t S, AttentionParams p) {
    const int64_t B = p.batch, A = p.num_heads, G = p.groups(), per = A / G;
    const int64_t grouped_row = B * (A + 2 * G) * D, mha_row = B * A * 3 * D;
    const auto q_at = [&](int64_t b, int64_t h) { return (b * (A + 2 * G) + (h / per) * (per + 2) + h % per) * D; };
    const auto k_at = [&](int64_t b, int64_t grp) { return (b * (A + 2 * G) + grp * (per + 2) + per) * D; };
    // fn(grouped index, multi-head index) for every element of the multi-head qkv.
    const auto each = [&](const auto& fn) {
        for (int64_t s = 0; s < S; ++s)
            for (int64_t b = 0; b < B; ++b)
                for (int64_t h = 0; h < A; ++h)
                    for (int64_t part = 0; part < 3; ++part) {
                        const int64_t col = part == 0 ? q_at(b, h) : k_at(b, h / per) + (part - 1) * D;
                        const int64_t from = s * grouped_row + col;
                        const int64_t to = s * mha_row + (b * A + h) * 3 * D + part * D;
                        for (int64_t d = 0; d < D; ++d) fn(from + d, to + d);
                    }
    };
    std::vector<float> mha(static_cast<std::size_t>(S * mha_row));
    each([&](int64_t grouped, int64_t multi) { mha[multi] = qkv[grouped]; });
    p.num_query_groups = 0;
    OpContext cpu;
    std::vector<float> mha_d(mha.size());
    std::vector<float> probs(static_cast<std::size_t>(ops::attention_saved_elements(Device::CPU, p, S)));
    const int64_t ws_bytes = ops::attention_workspace_bytes(Device::CPU, p, S, ops::num_threads());
    std::vector<float> ws(static_cast<std::size_t>(ws_bytes / 4 + 1));
    const auto view = [](const std::vector<float>& v, std::initializer_list<int64_t> shape) {
        return make_view(const_cast<float*>(v.data()), DType::F32, shape);
    };
    const auto flat = [&](const std::vector<float>& v) { return view(v, {static_cast<int64_t>(v.size())}); };
    out.assign(static_cast<std::size_t>(S * B * A * D), 0.0f);
    ops::attention_forward(cpu, view(out, {S, B, A * D}), flat(probs), view(mha, {S, B, A * 3 * D}), flat(ws), p);
    ops::attention_backward(cpu, view(mha_d, {S, B, A * 3 * D}), view(dout, {S, B, A * D}),
                            view(mha, {S, B, A * 3 * D}), flat(probs), flat(ws), p);
    dqkv.assign(qkv.size(), 0.0f);
    each([&](int64_t grouped, int64_t multi) { dqkv[grouped] += mha_d[multi]; });
}

template <int D>
Errors compare(const Case& c, bool tensor_cores = false) {
    const int64_t S = c.S, B = c.B, A = c.A, G = c.G > 0 ? c.G : c.A;
    AttentionParams p;
    p.num_heads = static_cast<int>(A);
    p.num_query_groups = static_cast<int>(c.G);
    p.head_offset = c.head_offset;
    p.total_heads = c.total_heads > 0 ? c.total_heads : static_cast<int>(A);
    p.batch = static_cast<int>(B);
    p.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    p.dropout_p = c.dropout;
    p.rng = RngStream{2024, 11};
    const int64_t qkv_n = S * B * (A + 2 * G) * D, out_n = S * B * A * D;
    std::vector<float> qkv = test::random_floats(static_cast<std::size_t>(qkv_n), 100, -2, 2);
    const std::vector<float> dout = test::random_floats(static_cast<std::size_t>(out_n), 101, -1, 1);
    if (tensor_cores)  // a bf16 run's activations: bf16 values in fp32 arrays
        for (float& x : qkv) x = round_to_bf16(x);
    std::vector<float> out, dqkv;
    cpu_reference<D>(out, dqkv, qkv, dout, S, p);

    // The CUDA kernels, as ops_attention.cu launches them: forward and dq per (sequence, query head),
    // dk/dv per (sequence, key/value group).
    const att::Geometry g = att::make_geometry(S, D, p);
    std::vector<float> gout(out.size(), -7.0f), gdqkv(dqkv.size(), -7.0f);
    std::vector<float> lse(static_cast<std::size_t>(B * A * S), -7.0f), delta(lse.size(), -7.0f);
    const auto heads_y = static_cast<unsigned>(B * A), groups_y = static_cast<unsigned>(B * G);
    if (tensor_cores) {
        const auto grid_x = static_cast<unsigned>((S + att::kTcRows - 1) / att::kTcRows);
        const int threads = att::kTcThreads;
        emulation::launch(grid_x, heads_y, threads,
                          [&] { att::k_attn_fwd_tc<D>(gout.data(), lse.data(), qkv.data(), g); },
                          att::TcForwardSmem<D>::bytes);
        emulation::launch(grid_x, heads_y, threads, [&] {
            att::k_attn_bwd_dq_tc<D>(gdqkv.data(), delta.data(), dout.data(), qkv.data(), lse.data(), g);
        }, att::TcBackwardSmem<D>::bytes);
        emulation::launch(grid_x, groups_y, threads, [&] {
            att::k_attn_bwd_dkv_tc<D>(gdqkv.data(), delta.data(), dout.data(), qkv.data(), lse.data(), g);
        }, att::TcBackwardSmem<D>::bytes);
        return {normwise(gout, out), normwise(gdqkv, dqkv)};
    }
    const auto grid_x = static_cast<unsigned>((S + att::kRows - 1) / att::kRows);
    emulation::launch(grid_x, heads_y, att::kRows, [&] { att::k_attn_fwd<D>(gout.data(), lse.data(), qkv.data(), g); });
    emulation::launch(grid_x, heads_y, att::kRows, [&] {
        att::k_attn_bwd_dq<D>(gdqkv.data(), delta.data(), dout.data(), qkv.data(), lse.data(), g);
    });
    emulation::launch(grid_x, groups_y, att::kRows, [&] {
        att::k_attn_bwd_dkv<D>(gdqkv.data(), delta.data(), dout.data(), qkv.data(), lse.data(), g);
    });
    return {normwise(gout, out), normwise(gdqkv, dqkv)};
}

/// The worst bank conflict of one shared-memory access by a warp: the most distinct 4-byte words any
/// of the 32 banks must serve (1 = conflict-free; lanes reading one word share it).
int ways(const std::vector<int>& words) {
    int worst = 0;
    for (int bank = 0; bank < 32; ++bank) {
        std::vector<int> in_bank;
        for (int w : words)
            if (w % 32 == bank && std::find(in_bank.begin(), in_bank.end(), w) == in_bank.end()) in_bank.push_back(w);
        worst = std::max(worst, static_cast<int>(in_bank.size()));
    }
    return worst;
}

/// Lane (r, half)'s column at `step`: the kernels' (tc_column), or the layout before the fix (half a
/// row each, in order).
int column(bool fixed, int step, int r, int half, int width) {
    return fixed ? att::tc_column(step, r, half, width) : half * (width / 2) + step;
}

/// Element-wise pass over a row-paired tile (16 rows × width, stride ld elements of `bytes` bytes):
/// the worst step.
int elementwise_ways(bool fixed, int ld, int width, int bytes) {
    int worst = 0;
    for (int step = 0; step < width / 2; ++step) {
        std::vector<int> words;
        for (int lane = 0; lane < 32; ++lane)
            words.push_back((lane / 2 * ld + column(fixed, step, lane / 2, lane % 2, width)) * bytes / 4);
        worst = std::max(worst, ways(words));
    }
    return worst;
}

/// One 8×8 bf16 matrix of a fragment load (ldmatrix: 8 rows of 16 bytes) from rows of ld bf16.
int fragment_load_ways(int ld) {
    std::vector<int> words;
    for (int row = 0; row < 8; ++row)
        for (int w = 0; w < 4; ++w) words.push_back(row * ld / 2 + w);
    return ways(words);
}

/// One f32 accumulator store (lane l: row l/4, columns 2·(l%4) and +1) into rows of ld floats; 64
/// words over 32 banks need 2 at best.
int fragment_store_ways(int ld) {
    std::vector<int> words;
    for (int lane = 0; lane < 32; ++lane)
        for (int c = 0; c < 2; ++c) words.push_back(lane / 4 * ld + 2 * (lane % 4) + c);
    return ways(words);
}

}  // namespace

class TestAttentionEmulated : public QObject {
    Q_OBJECT

    static void check(const Errors& e, const char* what) {
        QVERIFY2(e.out <= 1e-5, qPrintable(QString("%1: forward error %2 > 1e-5").arg(what).arg(e.out)));
        QVERIFY2(e.dqkv <= 5e-5, qPrintable(QString("%1: backward error %2 > 5e-5").arg(what).arg(e.dqkv)));
    }
    static void check_bf16(const Errors& e, const char* what) {
        // Rounding P, dS and dO to bf16 for the products costs ~1e-3 to 2.5e-3 here; the GPU check
        // allows 1e-2 (bf16 runs), this one 5e-3, so that a wrong index cannot hide in the slack.
        QVERIFY2(e.out <= 5e-3, qPrintable(QString("%1: forward error %2 > 5e-3").arg(what).arg(e.out)));
        QVERIFY2(e.dqkv <= 5e-3, qPrintable(QString("%1: backward error %2 > 5e-3").arg(what).arg(e.dqkv)));
        qInfo("%s: forward %.2e, backward %.2e", what, e.out, e.dqkv);
    }

private slots:
    void every_head_dim_matches_the_cpu_op() {
        // S = 70: two 64-row blocks, the second mostly idle; three 32-key tiles, the last partial.
        check(compare<16>({70, 2, 2, 0, 0.0f, 0, 2}), "D 16");
        check(compare<32>({70, 1, 2, 0, 0.0f, 0, 2}), "D 32");
        check(compare<64>({70, 1, 2, 0, 0.0f, 0, 2}), "D 64");
        check(compare<80>({70, 1, 1, 0, 0.0f, 0, 1}), "D 80");
        check(compare<96>({70, 1, 1, 0, 0.0f, 0, 1}), "D 96");
        check(compare<128>({70, 1, 1, 0, 0.0f, 0, 1}), "D 128");
        check(compare<160>({70, 1, 1, 0, 0.0f, 0, 1}), "D 160");
    }

    void dropout_draws_the_cpu_masks() {
        // Heads 2..3 of 6 (a tensor-parallel rank's share): mask indices use the global head.
        check(compare<16>({65, 2, 2, 0, 0.25f, 2, 6}), "D 16, dropout 0.25, heads 2-3 of 6");
        check(compare<64>({96, 2, 2, 0, 0.1f, 0, 2}), "D 64, dropout 0.1");
        check(compare<128>({40, 1, 2, 0, 0.1f, 1, 4}), "D 128, dropout 0.1, heads 1-2 of 4");
    }

    void tensor_core_kernels_match_the_cpu_op_in_bf16() {
        // S = 130: three 64-row blocks and 64-key tiles, the last one partial.
        check_bf16(compare<64>({130, 1, 2, 0, 0.0f, 0, 2}, true), "tensor cores, D 64");
        check_bf16(compare<16>({70, 2, 2, 0, 0.25f, 2, 6}, true), "tensor cores, D 16, dropout 0.25, heads 2-3 of 6");
        check_bf16(compare<128>({65, 1, 1, 0, 0.1f, 0, 1}, true), "tensor cores, D 128, dropout 0.1");
        check_bf16(compare<80>({33, 1, 1, 0, 0.0f, 0, 1}, true), "tensor cores, D 80");
        check_bf16(compare<96>({1, 1, 1, 0, 0.0f, 0, 1}, true), "tensor cores, D 96, S 1");
        check_bf16(compare<160>({64, 1, 1, 0, 0.0f, 0, 1}, true), "tensor cores, D 160");
    }

    void grouped_query_attention_matches_the_expanded_cpu_op() {
        // G = A/2 (two query heads per group) and G = 1 (multi-query), against the CPU op on K/V
        // expanded per query head with dk/dv summed per group; dropout masks on the global query head.
        check(compare<32>({70, 2, 4, 2}), "GQA A 4 G 2, D 32");
        check(compare<16>({65, 1, 4, 1, 0.2f, 2, 8}), "MQA A 4 G 1, D 16, dropout 0.2, heads 2-5 of 8");
        check(compare<64>({33, 1, 3, 1}), "MQA A 3 G 1, D 64");
        check_bf16(compare<64>({100, 1, 4, 2}, true), "tensor cores, GQA A 4 G 2, D 64");
        check_bf16(compare<16>({70, 2, 4, 1, 0.25f, 4, 8}, true), "tensor cores, MQA A 4 G 1, D 16, dropout 0.25");
    }

    void tensor_core_shared_memory_is_conflict_free_and_fits() {
        // The padded layout and the interleaved, row-skewed columns against the layout before: the
        // bank arithmetic docs/gpu.md states, counted from the kernels' own strides and column map.
        struct Pattern {
            const char* what;
            int before, after, best;
        };
        const Pattern patterns[] = {
            {"f32 scores, element-wise", elementwise_ways(false, att::kTcTile, att::kTcTile, 4),
             elementwise_ways(true, att::kTcLdScores, att::kTcTile, 4), 1},
            {"bf16 probabilities, element-wise", elementwise_ways(false, att::kTcTile, att::kTcTile, 2),
             elementwise_ways(true, att::kTcLdProbs, att::kTcTile, 2), 1},
            {"f32 accumulator D 64, element-wise", elementwise_ways(false, 64, 64, 4),
             elementwise_ways(true, att::kTcLdAcc<64>, 64, 4), 1},
            {"f32 accumulator D 128, element-wise", elementwise_ways(false, 128, 128, 4),
             elementwise_ways(true, att::kTcLdAcc<128>, 128, 4), 1},
            {"bf16 rows D 64, fragment load", fragment_load_ways(64), fragment_load_ways(att::kTcLdRows<64>), 1},
            {"bf16 rows D 128, fragment load", fragment_load_ways(128), fragment_load_ways(att::kTcLdRows<128>), 1},
            {"bf16 probabilities, fragment load", fragment_load_ways(att::kTcTile), fragment_load_ways(att::kTcLdProbs), 1},
            {"f32 scores, fragment store", fragment_store_ways(att::kTcTile), fragment_store_ways(att::kTcLdScores), 2},
            {"f32 accumulator D 128, fragment store", fragment_store_ways(128), fragment_store_ways(att::kTcLdAcc<128>), 2},
        };
        for (const Pattern& p : patterns) {
            qInfo("%s: %d-way before, %d-way now", p.what, p.before, p.after);
            QVERIFY2(p.after == p.best, p.what);
            QVERIFY2(p.before > p.after, p.what);  // the old layout did conflict: the count sees it
        }
        // Every head dim's blocks fit an A100's 163 KiB of opt-in shared memory per block.
        const int limit = 163 * 1024;
        QVERIFY(att::TcForwardSmem<160>::bytes <= limit && att::TcBackwardSmem<160>::bytes <= limit);
        qInfo("shared memory per block at D 64 / 128 / 160: forward %d / %d / %d, backward %d / %d / %d bytes",
              att::TcForwardSmem<64>::bytes, att::TcForwardSmem<128>::bytes, att::TcForwardSmem<160>::bytes,
              att::TcBackwardSmem<64>::bytes, att::TcBackwardSmem<128>::bytes, att::TcBackwardSmem<160>::bytes);
    }

    void cudnn_staging_maps_every_column_to_the_kernels_layout() {
        // ops_attention_cudnn.cu regroups each qkv row as [all q | all k | all v] for cuDNN: every
        // staged column is the column the own kernels read for that head (q_column, k_column,
        // v_column), and the map is one-to-one (a permutation of the row).
        for (const auto& [A, G] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{4, 1}, std::pair{6, 3}}) {
            AttentionParams p;
            p.num_heads = A;
            p.num_query_groups = G;
            p.batch = 2;
            const int64_t D = 8, W = (A + 2 * G) * D;
            const att::Geometry g = att::make_geometry(5, D, p);
            std::vector<int> hits(static_cast<std::size_t>(W), 0);
            for (int64_t c = 0; c < W; ++c) ++hits[static_cast<std::size_t>(att::staged_to_our_column(c, A, G, D))];
            QVERIFY(std::all_of(hits.begin(), hits.end(), [](int n) { return n == 1; }));
            for (int64_t b = 0; b < 2; ++b) {
                for (int64_t h = 0; h < A; ++h)
                    QCOMPARE(b * W + att::staged_to_our_column(h * D + 3, A, G, D), att::q_column(g, b, h) + 3);
                for (int64_t k = 0; k < G; ++k) {
                    QCOMPARE(b * W + att::staged_to_our_column((A + k) * D, A, G, D), att::k_column(g, b, k));
                    QCOMPARE(b * W + att::staged_to_our_column((A + G + k) * D + 7, A, G, D), att::v_column(g, b, k) + 7);
                }
            }
        }
    }

    void block_and_tile_edges() {
        for (int64_t S : {1, 31, 32, 33, 63, 64, 65, 129})
            check(compare<32>({S, 1, 1, 0, 0.1f, 0, 1}), qPrintable(QString("D 32, S %1").arg(S)));
    }
};

QTEST_GUILESS_MAIN(TestAttentionEmulated)
#include "test_attention_emulated.moc"
