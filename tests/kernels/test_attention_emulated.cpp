// The CUDA attention kernels (kernels/cuda/attention_kernels.cuh, and the tensor-core ones of
// attention_tc_kernels.cuh), executed on the CPU by cuda_emulation.h, against the CPU op: forward output
// and backward dqkv within the tolerances the GPU checks use (fp32 kernels 1e-5 and 5e-5 normwise; the
// bf16 tensor-core kernels, on bf16-valued inputs, 5e-3 where the GPU check allows 1e-2; on 16-bit views
// plus half an ulp of the storage type for the outputs' one rounding), with and
// without dropout (the same Philox masks), a tensor-parallel head offset, every instantiated head dim,
// sequence lengths around the blocks and tiles, and grouped-query attention (G = A/2, G = 1), on fp32
// arrays and on bf16/f16 views (qkv, out and their gradients stored in 16 bits: both kernel families,
// the tensor cores with bf16 or f16 fragments). The CPU
// reference always runs multi-head attention on K/V expanded per query head, its dk/dv summed per group
// (for G = A, the CPU op itself). Outputs start as sentinels, so an element the kernels never write fails. No GPU.
#include "cuda_emulation.h"

#include "attention_kernels.cuh"
#include "attention_tc_kernels.cuh"
#include "../src/cudnn_sdpa_plan.h"

#include "mwb/kernels/ops.h"
#include "mwb/kernels/precision.h"
#include "support/reference.h"
#include "support/suite.h"

#include <QtTest>

#include <algorithm>
#include <random>

namespace test_kernels_attention_emulated {

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
    bool derived = false;  // the kernels derive their stream from an iteration in memory (RngStream)
};

/// The iteration a derived stream reads (a step block's entry), and the stream it names: splitmix64 over
/// (iteration, micro-batch 3), then the site key 19, written out here as the model's host code did.
double g_iteration = 5;
uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
uint64_t explicit_stream() {
    return splitmix(splitmix(splitmix(static_cast<uint64_t>(g_iteration)) ^ 3u) ^ splitmix(19u));
}

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
                            view(mha, {S, B, A * 3 * D}), view(out, {S, B, A * D}), flat(probs), flat(ws), p);
    dqkv.assign(qkv.size(), 0.0f);
    each([&](int64_t grouped, int64_t multi) { dqkv[grouped] += mha_d[multi]; });
}

/// Storage of the kernels' tensors: float (an fp32 run, or a bf16 run's fp32 arrays), bf16 or fp16.
template <class T>
struct Stored;
template <>
struct Stored<float> {
    static float encode(float x) { return x; }
    static float decode(float x) { return x; }
    static float round(float x) { return x; }
    static constexpr DType dtype = DType::F32;
};
template <>
struct Stored<__nv_bfloat16> {
    static __nv_bfloat16 encode(float x) { return __float2bfloat16(x); }
    static float decode(__nv_bfloat16 x) { return __bfloat162float(x); }
    static float round(float x) { return round_to_bf16(x); }
    static constexpr DType dtype = DType::BF16;
};
template <>
struct Stored<__half> {
    static __half encode(float x) { return __float2half(x); }
    static float decode(__half x) { return __half2float(x); }
    static float round(float x) { return round_to_fp16(x); }
    static constexpr DType dtype = DType::F16;
};

template <class T>
std::vector<T> encoded(const std::vector<float>& x) {
    std::vector<T> out;
    for (float v : x) out.push_back(Stored<T>::encode(v));
    return out;
}
template <class T>
std::vector<float> decoded(const std::vector<T>& x) {
    std::vector<float> out;
    for (const T& v : x) out.push_back(Stored<T>::decode(v));
    return out;
}

/// The kernels on `c`, with qkv, out, dout and dqkv stored as T and, with tensor cores, fragments of
/// E (bf16 or __half), against the CPU reference on the same values (16-bit T: inputs 16-bit values,
/// each output rounded once to T, as the CPU op does on 16-bit views). E without T = E's type: a bf16
/// run's fp32 arrays holding bf16 values.
template <int D, class T = float, class E = void>
Errors compare(const Case& c) {
    constexpr bool tensor_cores = !std::is_void_v<E>;
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
    AttentionParams cpu_p = p;  // the reference always gets the stream id itself
    if (c.derived) {
        cpu_p.rng = RngStream{2024, explicit_stream()};
        p.rng = RngStream{2024, 0, &g_iteration, 3, 19};
    }
    const int64_t qkv_n = S * B * (A + 2 * G) * D, out_n = S * B * A * D;
    std::vector<float> qkv = test::random_floats(static_cast<std::size_t>(qkv_n), 100, -2, 2);
    std::vector<float> dout = test::random_floats(static_cast<std::size_t>(out_n), 101, -1, 1);
    // The inputs hold values of the 16-bit type: a 16-bit run's activations and gradients.
    if constexpr (!std::is_same_v<T, float>)
        for (auto* v : {&qkv, &dout})
            for (float& x : *v) x = Stored<T>::round(x);
    else if constexpr (tensor_cores)  // a bf16 run's activations: bf16 values in fp32 arrays
        for (float& x : qkv) x = Stored<E>::round(x);
    std::vector<float> out, dqkv;  // fp32: the kernels' own rounding to T is part of their error
    cpu_reference<D>(out, dqkv, qkv, dout, S, cpu_p);

    // The CUDA kernels, as ops_attention.cu launches them: forward and dq per (sequence, query head),
    // dk/dv per (sequence, key/value group).
    const att::Geometry g = att::make_geometry(S, D, p);
    const std::vector<T> sqkv = encoded<T>(qkv), sdout = encoded<T>(dout);
    std::vector<T> gout = encoded<T>(std::vector<float>(out.size(), -7.0f));
    std::vector<T> gdqkv = encoded<T>(std::vector<float>(dqkv.size(), -7.0f));
    std::vector<float> lse(static_cast<std::size_t>(B * A * S), -7.0f), delta(lse.size(), -7.0f);
    const auto heads_y = static_cast<unsigned>(B * A), groups_y = static_cast<unsigned>(B * G);
    if constexpr (tensor_cores) {
        const auto grid_x = static_cast<unsigned>((S + att::kTcRows - 1) / att::kTcRows);
        const int threads = att::kTcThreads;
        emulation::launch(grid_x, heads_y, threads,
                          [&] { att::k_attn_fwd_tc<D, T, E>(gout.data(), lse.data(), sqkv.data(), g); },
                          att::TcForwardSmem<D>::bytes);
        emulation::launch(grid_x, heads_y, threads, [&] {
            att::k_attn_bwd_dq_tc<D, T, E>(gdqkv.data(), delta.data(), sdout.data(), sqkv.data(), lse.data(), g);
        }, att::TcBackwardSmem<D>::bytes);
        emulation::launch(grid_x, groups_y, threads, [&] {
            att::k_attn_bwd_dkv_tc<D, T, E>(gdqkv.data(), delta.data(), sdout.data(), sqkv.data(), lse.data(), g);
        }, att::TcBackwardSmem<D>::bytes);
    } else {
        const auto grid_x = static_cast<unsigned>((S + att::kRows - 1) / att::kRows);
        emulation::launch(grid_x, heads_y, att::kRows,
                          [&] { att::k_attn_fwd<D, T>(gout.data(), lse.data(), sqkv.data(), g); });
        emulation::launch(grid_x, heads_y, att::kRows, [&] {
            att::k_attn_bwd_dq<D, T>(gdqkv.data(), delta.data(), sdout.data(), sqkv.data(), lse.data(), g);
        });
        emulation::launch(grid_x, groups_y, att::kRows, [&] {
            att::k_attn_bwd_dkv<D, T>(gdqkv.data(), delta.data(), sdout.data(), sqkv.data(), lse.data(), g);
        });
    }
    return {normwise(decoded(gout), out), normwise(decoded(gdqkv), dqkv)};
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

    /// Half an ulp of the largest value in T: what rounding each output to T once may add (bf16 2^-8,
    /// f16 2^-11; nothing for fp32 arrays).
    template <class T>
    static double half_ulp() {
        if constexpr (std::is_same_v<T, __nv_bfloat16>) return std::ldexp(1.0, -8);
        else if constexpr (std::is_same_v<T, __half>) return std::ldexp(1.0, -11);
        else return 0.0;
    }
    /// CUDA-core kernels: fp32 1e-5 (forward) and 5e-5 (backward), plus T's output rounding.
    template <class T = float>
    static void check(const Errors& e, const char* what) {
        const double fwd = 1e-5 + half_ulp<T>(), bwd = 5e-5 + half_ulp<T>();
        QVERIFY2(e.out <= fwd, qPrintable(QString("%1: forward error %2 > %3").arg(what).arg(e.out).arg(fwd)));
        QVERIFY2(e.dqkv <= bwd, qPrintable(QString("%1: backward error %2 > %3").arg(what).arg(e.dqkv).arg(bwd)));
        if (!std::is_same_v<T, float>) qInfo("%s: forward %.2e, backward %.2e", what, e.out, e.dqkv);
    }
    /// Tensor-core kernels: rounding P, dS and dO to bf16 (or f16) for the products costs ~1e-3 to
    /// 2.5e-3 here; the GPU check allows 1e-2 (16-bit runs), this one 5e-3 plus T's output rounding,
    /// so that a wrong index cannot hide in the slack.
    template <class T = float>
    static void check_bf16(const Errors& e, const char* what) {
        const double tol = 5e-3 + half_ulp<T>();
        QVERIFY2(e.out <= tol, qPrintable(QString("%1: forward error %2 > %3").arg(what).arg(e.out).arg(tol)));
        QVERIFY2(e.dqkv <= tol, qPrintable(QString("%1: backward error %2 > %3").arg(what).arg(e.dqkv).arg(tol)));
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
        // A step's stream derived on the device from the iteration in memory (a CUDA graph's replay):
        // the masks of the stream the host would have named, for two iterations.
        for (double it : {5.0, 6.0}) {
            g_iteration = it;
            check(compare<16>({65, 2, 2, 0, 0.25f, 2, 6, true}), "D 16, dropout 0.25, derived stream");
            check_bf16(compare<64, float, __nv_bfloat16>({33, 1, 2, 0, 0.2f, 0, 2, true}), "TC D 64, derived stream");
        }
    }

    void tensor_core_kernels_match_the_cpu_op_in_bf16() {
        // S = 130: three 64-row blocks and 64-key tiles, the last one partial.
        check_bf16(compare<64, float, __nv_bfloat16>({130, 1, 2, 0, 0.0f, 0, 2}), "tensor cores, D 64");
        check_bf16(compare<16, float, __nv_bfloat16>({70, 2, 2, 0, 0.25f, 2, 6}), "tensor cores, D 16, dropout 0.25, heads 2-3 of 6");
        check_bf16(compare<128, float, __nv_bfloat16>({65, 1, 1, 0, 0.1f, 0, 1}), "tensor cores, D 128, dropout 0.1");
        check_bf16(compare<80, float, __nv_bfloat16>({33, 1, 1, 0, 0.0f, 0, 1}), "tensor cores, D 80");
        check_bf16(compare<96, float, __nv_bfloat16>({1, 1, 1, 0, 0.0f, 0, 1}), "tensor cores, D 96, S 1");
        check_bf16(compare<160, float, __nv_bfloat16>({64, 1, 1, 0, 0.0f, 0, 1}), "tensor cores, D 160");
    }

    void cuda_core_kernels_on_16bit_views() {
        // bf16 and f16 qkv/out/dout/dqkv: the fp32 kernels' arithmetic on the 16-bit values, each
        // output rounded once (the fp32 tolerance plus that rounding). Small shapes: the fp32 cases
        // above cover the tiling.
        check<__nv_bfloat16>(compare<64, __nv_bfloat16>({70, 1, 2, 0, 0.0f, 0, 2}), "bf16 views, D 64");
        check<__nv_bfloat16>(compare<16, __nv_bfloat16>({65, 2, 2, 0, 0.25f, 2, 6}),
                             "bf16 views, D 16, dropout 0.25, heads 2-3 of 6");
        check<__half>(compare<64, __half>({40, 1, 1, 0, 0.1f, 0, 1}), "f16 views, D 64, dropout 0.1");
        check<__half>(compare<16, __half>({65, 1, 4, 1, 0.2f, 2, 8}), "f16 views, MQA A 4 G 1, D 16, dropout 0.2");
    }

    void tensor_core_kernels_on_16bit_views() {
        // 16-bit tiles loaded directly (128-bit copies of 8 values) into bf16 or f16 fragments.
        check_bf16<__nv_bfloat16>(compare<64, __nv_bfloat16, __nv_bfloat16>({70, 1, 1, 0, 0.0f, 0, 1}),
                                  "bf16 views, tensor cores, D 64");
        check_bf16<__nv_bfloat16>(compare<16, __nv_bfloat16, __nv_bfloat16>({65, 1, 4, 1, 0.25f, 4, 8}),
                                  "bf16 views, tensor cores, MQA A 4 G 1, D 16, dropout 0.25");
        check_bf16<__nv_bfloat16>(compare<128, __nv_bfloat16, __nv_bfloat16>({33, 1, 2, 1, 0.1f, 0, 2}),
                                  "bf16 views, tensor cores, MQA A 2 G 1, D 128, dropout 0.1");
        check_bf16<__half>(compare<64, __half, __half>({65, 1, 4, 2}), "f16 views, tensor cores, GQA A 4 G 2, D 64");
        check_bf16<__half>(compare<80, __half, __half>({33, 1, 1, 0, 0.1f, 0, 1}), "f16 views, tensor cores, D 80, dropout 0.1");
    }

    void grouped_query_attention_matches_the_expanded_cpu_op() {
        // G = A/2 (two query heads per group) and G = 1 (multi-query), against the CPU op on K/V
        // expanded per query head with dk/dv summed per group; dropout masks on the global query head.
        check(compare<32>({70, 2, 4, 2}), "GQA A 4 G 2, D 32");
        check(compare<16>({65, 1, 4, 1, 0.2f, 2, 8}), "MQA A 4 G 1, D 16, dropout 0.2, heads 2-5 of 8");
        check(compare<64>({33, 1, 3, 1}), "MQA A 3 G 1, D 64");
        check_bf16(compare<64, float, __nv_bfloat16>({100, 1, 4, 2}), "tensor cores, GQA A 4 G 2, D 64");
        check_bf16(compare<16, float, __nv_bfloat16>({70, 2, 4, 1, 0.25f, 4, 8}), "tensor cores, MQA A 4 G 1, D 16, dropout 0.25");
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
        // The launcher's choice holds both passes: a device with 128 KiB per block fits D 160's backward
        // (127.5 KiB) but not its forward (130 KiB), so D 160 runs on the fp32 kernels there.
        QVERIFY(att::tc_fits<160>(limit) && att::tc_fits<128>(128 * 1024) && !att::tc_fits<160>(128 * 1024));
        QVERIFY(!att::tc_fits<128>(99 * 1024) && att::tc_fits<96>(99 * 1024));  // sm_86/sm_89: 99 KiB
        qInfo("shared memory per block at D 64 / 128 / 160: forward %d / %d / %d, backward %d / %d / %d bytes",
              att::TcForwardSmem<64>::bytes, att::TcForwardSmem<128>::bytes, att::TcForwardSmem<160>::bytes,
              att::TcBackwardSmem<64>::bytes, att::TcBackwardSmem<128>::bytes, att::TcBackwardSmem<160>::bytes);
    }

    void cudnn_views_address_the_kernels_layout() {
        // cuDNN binds the packed grouped qkv in place (cudnn_sdpa_plan.h: B·G sequences of A/G query
        // heads sharing one key/value head): every element of the plan's Q, K, V and O views is the
        // element the own kernels read for that head (q_column, k_column, v_column, out_column), and
        // Q, K and V together cover each qkv row exactly once.
        for (const auto& [A, G] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{4, 1}, std::pair{6, 3}}) {
            AttentionParams p;
            p.num_heads = A;
            p.num_query_groups = G;
            p.batch = 2;
            const int64_t S = 3, D = 8, W = (A + 2 * G) * D, n = A / G;
            const att::Geometry g = att::make_geometry(S, D, p);
            const cudnn_sdpa::Shape shape{p.batch, A, G, S, D, 1.0f, 0.0f, cudnn_sdpa::Type::BF16};
            const auto qs = cudnn_sdpa::qkv_strides(shape), os = cudnn_sdpa::out_strides(shape);
            const auto qd = cudnn_sdpa::qkv_dims(shape, false), kd = cudnn_sdpa::qkv_dims(shape, true);
            QCOMPARE(qd[0], p.batch * G);
            QCOMPARE(qd[1], n);
            QCOMPARE(kd[1], int64_t{1});
            std::vector<int> hits(static_cast<std::size_t>(S * p.batch * W), 0);
            const auto at = [](const std::array<int64_t, 4>& st, int64_t i0, int64_t i1, int64_t s, int64_t d) {
                return i0 * st[0] + i1 * st[1] + s * st[2] + d * st[3];
            };
            for (int64_t bg = 0; bg < qd[0]; ++bg)
                for (int64_t s = 0; s < S; ++s)
                    for (int64_t d = 0; d < D; ++d) {
                        const int64_t b = bg / G, grp = bg % G;
                        for (int64_t j = 0; j < n; ++j) {
                            const int64_t h = grp * n + j, q = at(qs, bg, j, s, d);
                            QCOMPARE(q, s * g.ld_qkv + att::q_column(g, b, h) + d);
                            QCOMPARE(at(os, bg, j, s, d), s * g.ld_out + att::out_column(g, b, h) + d);
                            ++hits[static_cast<std::size_t>(q)];
                        }
                        const int64_t k = cudnn_sdpa::k_offset(shape) + at(qs, bg, 0, s, d);
                        const int64_t v = cudnn_sdpa::v_offset(shape) + at(qs, bg, 0, s, d);
                        QCOMPARE(k, s * g.ld_qkv + att::k_column(g, b, grp) + d);
                        QCOMPARE(v, s * g.ld_qkv + att::v_column(g, b, grp) + d);
                        ++hits[static_cast<std::size_t>(k)];
                        ++hits[static_cast<std::size_t>(v)];
                    }
            QVERIFY(std::all_of(hits.begin(), hits.end(), [](int c) { return c == 1; }));
        }
    }

    void block_and_tile_edges() {
        for (int64_t S : {1, 31, 32, 33, 63, 64, 65, 129})
            check(compare<32>({S, 1, 1, 0, 0.1f, 0, 1}), qPrintable(QString("D 32, S %1").arg(S)));
    }
};

MWB_TEST_SUITE_GUILESS(test_kernels_attention_emulated, TestAttentionEmulated)
}  // namespace test_kernels_attention_emulated
#include "test_attention_emulated.moc"
