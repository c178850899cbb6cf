// The CUDA normalisation and column-reduction kernels (kernels/cuda/norm_kernels.cuh) executed on CPU
// threads by cuda_emulation.h, launched as ops_elementwise.cu launches them. LayerNorm and RMSNorm
// forward and backward (dx alone and accumulated, dw, db over two row chunks), the column sums and the
// bias add, with activations in f32, bf16 and f16 and weights in f32 or the activations' dtype: the
// 16-bit kernels bit for bit against the same kernels on the f32 values, rounded after (an emulated
// 16-bit run: statistics and parameter gradients equal, each stored element rounded once), and the
// f32 kernels against the CPU ops (another summation order: to rounding). Parameter gradients into an
// f16 gradient arena (fp16 runs without accumulate_allreduce_grads_in_fp32): the f32 kernels' sums
// (the arena's values + this call's chunks) rounded once by the compiler's _Float16, bit for bit, and
// the CPU op on the same f16 arena within one fp16 step (its rows summed in another order). The
// backward with an f32 dout beside 16-bit x and dx (t > 1's f32 reduction buffer): the f32 kernels
// rounded, bit for bit, and the CPU op on the same inputs. No GPU.
#include "cuda_emulation.h"

#include "emulated_storage.h"
#include "norm_kernels.cuh"

#include "mwb/kernels/ops.h"
#include "support/precision_ref.h"
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"

#include <QScopeGuard>
#include <QtTest>

#include <cmath>
#include <type_traits>
#include <vector>

namespace test_kernels_norm_emulated {

namespace nk = mwb::cuda::norm;
namespace st = mwb::cuda::storage;
namespace emu = mwb::emulation;
using mwb::DType;
using mwb::test::decode16;
using mwb::test::encode16;
using mwb::test::normwise_error;
using mwb::test::random_floats;

namespace {

constexpr int kRowThreads = 32;  // one block per row (the device runs 256; any multiple of 32 is valid)
constexpr int64_t kCols = 200;   // a ragged tail in every row's block loops
constexpr int64_t kTwoChunks = 260, kOneChunk = 24;  // rows: two row chunks of the column reductions, or one

/// Values in storage S: the raw elements (16-bit bits or floats) and their f32 values.
template <class S>
struct Tensor {
    std::vector<typename S::type> raw;
    std::vector<float> f32;
};

template <class S>
Tensor<S> make(const std::vector<float>& values) {
    if constexpr (std::is_same_v<S, st::F32>) {
        return {values, values};
    } else {
        std::vector<uint16_t> bits = encode16(S::dtype, values);
        return {bits, decode16(S::dtype, bits)};
    }
}

template <class S>
std::vector<float> widen(const std::vector<typename S::type>& raw) {
    if constexpr (std::is_same_v<S, st::F32>)
        return raw;
    else
        return decode16(S::dtype, raw);
}

/// out of the f32 kernel rounded to S's storage, as raw elements.
template <class S>
std::vector<typename S::type> rounded_raw(const std::vector<float>& v) {
    if constexpr (std::is_same_v<S, st::F32>)
        return v;
    else
        return encode16(S::dtype, v);
}

/// Everything one norm computes, forward and backward.
struct NormResults {
    std::vector<float> out, mean, rstd, dx, dx_acc, dw, db;
};

/// LayerNorm (layer = true) or RMSNorm through the kernels, x/out/dx in S, dout in SD (S, or f32 beside
/// 16-bit x), w/b in W, as the launcher; the row kernels V columns per access (norm_kernels.cuh).
template <class S, class W, int V = 1, class SD = S>
NormResults run_norm(int64_t rows, bool layer, const Tensor<S>& x, const Tensor<SD>& dout, const Tensor<S>& dx0,
                     const Tensor<W>& w, const Tensor<W>& b) {
    const int64_t n = rows * kCols;
    std::vector<typename S::type> out(n), dx(n), dx_acc = dx0.raw;
    NormResults r;
    r.mean.assign(rows, -1.0f);
    r.rstd.assign(rows, -1.0f);
    if (layer)
        emu::launch(rows, 1, kRowThreads, [&] {
            nk::k_layernorm_fwd<S, W, V>(out.data(), r.mean.data(), r.rstd.data(), x.raw.data(), w.raw.data(),
                                      b.raw.data(), kCols, 1e-5f);
        });
    else
        emu::launch(rows, 1, kRowThreads, [&] {
            nk::k_rmsnorm_fwd<S, W, V>(out.data(), r.rstd.data(), x.raw.data(), w.raw.data(), kCols, 1e-6f);
        });
    const float* mean = layer ? r.mean.data() : nullptr;
    // Parameter gradients: partials over row chunks, then the chunks in order (grid of 128 threads).
    const int64_t chunks = (rows + nk::kRowChunk - 1) / nk::kRowChunk;
    std::vector<float> pw(chunks * kCols), pb(chunks * kCols);
    emu::launch(static_cast<unsigned>((kCols + 127) / 128), static_cast<unsigned>(chunks), 128, [&] {
        nk::k_norm_bwd_partials<S, SD>(pw.data(), layer ? pb.data() : nullptr, dout.raw.data(), x.raw.data(), mean,
                                       r.rstd.data(), rows, kCols);
    });
    r.dw.assign(kCols, 0.25f);  // accumulated into
    r.db.assign(kCols, -0.5f);
    emu::launch(2, 1, 64, [&] { nk::k_sum_partials(r.dw.data(), pw.data(), chunks, kCols); });
    if (layer) emu::launch(2, 1, 64, [&] { nk::k_sum_partials(r.db.data(), pb.data(), chunks, kCols); });
    emu::launch(rows, 1, kRowThreads, [&] {
        nk::k_norm_bwd_dx<S, W, V, SD>(dx.data(), dout.raw.data(), x.raw.data(), mean, r.rstd.data(), w.raw.data(),
                                       kCols, 0);
    });
    emu::launch(rows, 1, kRowThreads, [&] {
        nk::k_norm_bwd_dx<S, W, V, SD>(dx_acc.data(), dout.raw.data(), x.raw.data(), mean, r.rstd.data(),
                                       w.raw.data(), kCols, 1);
    });
    r.out = widen<S>(out);
    r.dx = widen<S>(dx);
    r.dx_acc = widen<S>(dx_acc);
    return r;
}

}  // namespace

class TestNormEmulated : public QObject {
    Q_OBJECT

    /// dout in SD: x's storage, or f32 beside 16-bit x (the f32 reduction buffer under t > 1).
    template <class S, class W, int V = 1, class SD = S>
    static void sixteen_bit_equals_f32_rounded(bool layer, int64_t rows = kOneChunk) {
        const int64_t n = rows * kCols;
        const Tensor<S> x = make<S>(random_floats(n, 1, -3, 5)), dx0 = make<S>(random_floats(n, 3, -1, 1));
        const Tensor<SD> dout = make<SD>(random_floats(n, 2, -1, 1));
        const Tensor<W> w = make<W>(random_floats(kCols, 4, 0.5f, 1.5f)), b = make<W>(random_floats(kCols, 5, -0.5f, 0.5f));
        const NormResults got = run_norm<S, W, V, SD>(rows, layer, x, dout, dx0, w, b);
        const auto f = [](const std::vector<float>& v) { return make<st::F32>(v); };
        // The f32 kernels with the same V: the same sums in the same order.
        const NormResults ref =
            run_norm<st::F32, st::F32, V>(rows, layer, f(x.f32), f(dout.f32), f(dx0.f32), f(w.f32), f(b.f32));
        // Statistics and parameter gradients are f32 in both: the same bits; stored tensors rounded once.
        MWB_VERIFY_BITWISE(got.mean, ref.mean);
        MWB_VERIFY_BITWISE(got.rstd, ref.rstd);
        MWB_VERIFY_BITWISE(got.dw, ref.dw);
        MWB_VERIFY_BITWISE(got.db, ref.db);
        MWB_VERIFY_BITWISE(got.out, widen<S>(rounded_raw<S>(ref.out)));
        MWB_VERIFY_BITWISE(got.dx, widen<S>(rounded_raw<S>(ref.dx)));
        MWB_VERIFY_BITWISE(got.dx_acc, widen<S>(rounded_raw<S>(ref.dx_acc)));
    }

    template <class S, class SX, class W>
    static void fused_cases() {
        constexpr int kWide = st::kPerAccess<S>;
        for (bool layer : {true, false})
            for (bool with_bias : {false, true})
                for (float p : {0.0f, 0.2f})
                    for (int64_t offset : {int64_t(8), int64_t(6)}) {
                        fused_case<S, SX, W, 1>(layer, with_bias, p, offset, false);
                        fused_case<S, SX, W, kWide>(layer, with_bias, p, offset, false);
                        if (offset % 4 == 0) fused_case<S, SX, W, kWide>(layer, with_bias, p, offset, true);
                        if (QTest::currentTestFailed()) return;  // the first failing case, not all of them
                    }
    }

    template <class S, class SX, class W, int V>
    static void fused_case(bool layer, bool with_bias, float p, int64_t offset, bool wide_residual) {
        namespace ew = mwb::cuda::elementwise;
        const int64_t rows = kOneChunk, n = rows * kCols;
        const Tensor<S> res = make<S>(random_floats(n, 21, -3, 5));
        const Tensor<SX> x = make<SX>(random_floats(n, 22, -1, 1));
        const Tensor<W> bias = make<W>(random_floats(kCols, 23, -0.5f, 0.5f)),
                        w = make<W>(random_floats(kCols, 24, 0.5f, 1.5f)),
                        b = make<W>(random_floats(kCols, 25, -0.5f, 0.5f));
        const mwb::RngStream rng{77, 3};
        const ew::DropoutArgs a{rng, mwb::dropout_keep_threshold(p), 1.0f / (1.0f - p), offset, n, p > 0.0f};
        const auto* pbias = with_bias ? bias.raw.data() : nullptr;
        // The two kernels: k_dropout as run_dropout launches it, then the norm.
        std::vector<typename S::type> out1(n), norm1(n);
        std::vector<float> mean1(rows, -1.0f), rstd1(rows, -1.0f);
        const int64_t cols = with_bias ? kCols : 4;
        if (offset % 4 == 0)
            emu::launch(3, 1, 64, [&] {
                ew::k_dropout<true, S, W, SX>(out1.data(), res.raw.data(), x.raw.data(), pbias, cols, a);
            });
        else
            emu::launch(3, 1, 64, [&] {
                ew::k_dropout<false, S, W, SX>(out1.data(), res.raw.data(), x.raw.data(), pbias, cols, a);
            });
        if (layer)
            emu::launch(rows, 1, kRowThreads, [&] {
                nk::k_layernorm_fwd<S, W, V>(norm1.data(), mean1.data(), rstd1.data(), out1.data(), w.raw.data(),
                                             b.raw.data(), kCols, 1e-5f);
            });
        else
            emu::launch(rows, 1, kRowThreads, [&] {
                nk::k_rmsnorm_fwd<S, W, V>(norm1.data(), rstd1.data(), out1.data(), w.raw.data(), kCols, 1e-6f);
            });
        // Fused.
        std::vector<typename S::type> out2(n), norm2(n);
        std::vector<float> mean2(rows, -1.0f), rstd2(rows, -1.0f);
        emu::launch(rows, 1, kRowThreads, [&] {
            nk::k_residual_norm_fwd<S, SX, W, V>(out2.data(), norm2.data(), layer ? mean2.data() : nullptr,
                                                 rstd2.data(), res.raw.data(), x.raw.data(), pbias, w.raw.data(),
                                                 layer ? b.raw.data() : nullptr, kCols, layer ? 1e-5f : 1e-6f, a,
                                                 wide_residual ? 1 : 0);
        });
        const QByteArray what = QStringLiteral("S=%1 x=%2 w=%3 V=%4 %5 bias=%6 p=%7 offset=%8 wide_residual=%9")
                                    .arg(mwb::dtype_name(S::dtype), mwb::dtype_name(SX::dtype),
                                         mwb::dtype_name(W::dtype))
                                    .arg(V)
                                    .arg(layer ? "layernorm" : "rmsnorm")
                                    .arg(with_bias)
                                    .arg(p)
                                    .arg(offset)
                                    .arg(wide_residual)
                                    .toUtf8();
        QVERIFY2(out2 == out1, what.constData());
        QVERIFY2(norm2 == norm1, what.constData());
        MWB_VERIFY_BITWISE(rstd2, rstd1);
        MWB_VERIFY_BITWISE(mean2, mean1);
    }

    template <class S, class W, int V>
    static void f32_dout_against_the_cpu_op(bool layer) {
        const int64_t rows = kTwoChunks, n = rows * kCols, chunks = (rows + nk::kRowChunk - 1) / nk::kRowChunk;
        const DType dt = S::dtype;
        const Tensor<S> x = make<S>(random_floats(n, 41, -3, 5)), dx0 = make<S>(random_floats(n, 43, -1, 1));
        const Tensor<st::F32> dout = make<st::F32>(random_floats(n, 42, -1, 1));
        const Tensor<W> w = make<W>(random_floats(kCols, 44, 0.5f, 1.5f)), b = make<W>(random_floats(kCols, 45, -0.5f, 0.5f));
        const NormResults got = run_norm<S, W, V, st::F32>(rows, layer, x, dout, dx0, w, b);
        const QByteArray what = QStringLiteral("x=%1 w=%2 V=%3 %4")
                                    .arg(mwb::dtype_name(dt), mwb::dtype_name(W::dtype))
                                    .arg(V)
                                    .arg(layer ? "layernorm" : "rmsnorm")
                                    .toUtf8();
        const auto name_the_case = qScopeGuard([&] {
            if (QTest::currentTestFailed()) qWarning("in %s", what.constData());
        });
        // The CPU op on the same bits, with the kernel's statistics.
        mwb::OpContext ctx;
        std::vector<float> mean = got.mean, rstd = got.rstd, dw(kCols, 0.25f), db(kCols, -0.5f);
        std::vector<typename S::type> xr = x.raw, dx(n), dx_acc = dx0.raw;
        std::vector<float> dr = dout.raw;
        std::vector<typename W::type> wr = w.raw;
        const auto m = [&](auto& t) { return mwb::make_view(t.data(), dt, {rows, kCols}); };
        const auto v32 = [](std::vector<float>& t) { return mwb::view_f32(t.data(), {int64_t(t.size())}); };
        const mwb::TensorView vw = mwb::make_view(wr.data(), W::dtype, {kCols}), vd = mwb::view_f32(dr.data(), {rows, kCols});
        std::vector<float> unused_dw(kCols), unused_db(kCols);
        if (layer) {
            mwb::ops::layernorm_backward(ctx, m(dx), v32(dw), v32(db), vd, m(xr), v32(mean), v32(rstd), vw, false);
            mwb::ops::layernorm_backward(ctx, m(dx_acc), v32(unused_dw), v32(unused_db), vd, m(xr), v32(mean),
                                         v32(rstd), vw, true);
            MWB_VERIFY_ERROR(normwise_error(got.db, mwb::test::to_double(db)), 1e-5);
        } else {
            mwb::ops::rmsnorm_backward(ctx, m(dx), v32(dw), vd, m(xr), v32(rstd), vw, false);
            mwb::ops::rmsnorm_backward(ctx, m(dx_acc), v32(unused_dw), vd, m(xr), v32(rstd), vw, true);
        }
        MWB_VERIFY_ERROR(normwise_error(got.dw, mwb::test::to_double(dw)), 1e-5);
        // dx: both round once, from fp32 sums in other orders; the two roundings differ only where the
        // value lies that close to a rounding boundary: at most one step, on a few elements (measured:
        // at most 13 of 52,000; a dout rounded to 16 bits before use moves 9,000 to 14,000).
        const auto rounded_alike = [&](const std::vector<float>& kernel, const std::vector<typename S::type>& cpu) {
            const std::vector<uint16_t> a = encode16(dt, kernel);  // exact: 16-bit values
            int64_t differ = 0;
            for (std::size_t i = 0; i < a.size(); ++i) differ += a[i] != cpu[i];
            QVERIFY2(mwb::test::max_ulp16(a, cpu) <= 1, what.constData());
            QVERIFY2(differ < n / 1000, qPrintable(QStringLiteral("%1 of %2 differ").arg(differ).arg(n)));
        };
        rounded_alike(got.dx, dx);
        rounded_alike(got.dx_acc, dx_acc);
        if constexpr (std::is_same_v<S, st::F16>) {
            // dw (and db) into an f16 gradient arena, as norm_param_grads launches k_sum_partials<F16>.
            std::vector<float> pw(chunks * kCols), pb(chunks * kCols);
            const float* mp = layer ? got.mean.data() : nullptr;
            emu::launch(static_cast<unsigned>((kCols + 127) / 128), static_cast<unsigned>(chunks), 128, [&] {
                nk::k_norm_bwd_partials<S, st::F32>(pw.data(), layer ? pb.data() : nullptr, dout.raw.data(),
                                                    x.raw.data(), mp, got.rstd.data(), rows, kCols);
            });
            const std::vector<uint16_t> dw0 = encode16(DType::F16, random_floats(kCols, 46, -40, 40)),
                                        db0 = encode16(DType::F16, random_floats(kCols, 47, -40, 40));
            std::vector<uint16_t> hdw = dw0, hdb = db0, cdw = dw0, cdb = db0, cdx(n);
            emu::launch(2, 1, 64, [&] { nk::k_sum_partials<st::F16>(hdw.data(), pw.data(), chunks, kCols); });
            if (layer) emu::launch(2, 1, 64, [&] { nk::k_sum_partials<st::F16>(hdb.data(), pb.data(), chunks, kCols); });
            const auto h16 = [](auto& t) { return mwb::make_view(t.data(), DType::F16, {int64_t(t.size())}); };
            if (layer)
                mwb::ops::layernorm_backward(ctx, m(cdx), h16(cdw), h16(cdb), vd, m(xr), v32(mean), v32(rstd), vw,
                                             false);
            else
                mwb::ops::rmsnorm_backward(ctx, m(cdx), h16(cdw), vd, m(xr), v32(rstd), vw, false);
            QVERIFY2(mwb::test::max_ulp16(hdw, cdw) <= 1, what.constData());
            if (layer) QVERIFY2(mwb::test::max_ulp16(hdb, cdb) <= 1, what.constData());
            QVERIFY2(hdw != dw0, what.constData());  // the sums reached the arena
        }
    }

private slots:
    void layernorm_16bit_is_the_f32_kernel_rounded() {
        sixteen_bit_equals_f32_rounded<st::BF16, st::F32>(true, kTwoChunks);
        sixteen_bit_equals_f32_rounded<st::BF16, st::BF16>(true);
        sixteen_bit_equals_f32_rounded<st::F16, st::F32>(true);
        sixteen_bit_equals_f32_rounded<st::F16, st::F16>(true);
        // The 16-byte row loops (8 16-bit values per access; kCols = 200 is a multiple of 8).
        sixteen_bit_equals_f32_rounded<st::BF16, st::F32, 8>(true, kTwoChunks);
        sixteen_bit_equals_f32_rounded<st::BF16, st::BF16, 8>(true);
        sixteen_bit_equals_f32_rounded<st::F16, st::F32, 8>(true);
        sixteen_bit_equals_f32_rounded<st::F16, st::F16, 8>(true);
    }

    void rmsnorm_16bit_is_the_f32_kernel_rounded() {
        sixteen_bit_equals_f32_rounded<st::BF16, st::F32>(false);
        sixteen_bit_equals_f32_rounded<st::BF16, st::BF16>(false);
        sixteen_bit_equals_f32_rounded<st::F16, st::F32>(false);
        sixteen_bit_equals_f32_rounded<st::F16, st::F16>(false);
        sixteen_bit_equals_f32_rounded<st::BF16, st::F32, 8>(false);
        sixteen_bit_equals_f32_rounded<st::BF16, st::BF16, 8>(false);
        sixteen_bit_equals_f32_rounded<st::F16, st::F32, 8>(false);
        sixteen_bit_equals_f32_rounded<st::F16, st::F16, 8>(false);
    }

    /// dout f32 beside 16-bit x (a 16-bit run's norm-input gradient under tensor parallelism: the f32
    /// reduction buffer): the kernels are the f32 kernels on the same values with the same V, stored
    /// tensors rounded after, bit for bit; the f32 dout in two 16-byte accesses per 8 columns (V = 8).
    void f32_dout_beside_16bit_x_is_the_f32_kernel_rounded() {
        for (bool layer : {true, false}) {
            sixteen_bit_equals_f32_rounded<st::BF16, st::F32, 1, st::F32>(layer, kTwoChunks);
            sixteen_bit_equals_f32_rounded<st::BF16, st::BF16, 1, st::F32>(layer);
            sixteen_bit_equals_f32_rounded<st::F16, st::F32, 1, st::F32>(layer);
            sixteen_bit_equals_f32_rounded<st::F16, st::F16, 1, st::F32>(layer);
            sixteen_bit_equals_f32_rounded<st::BF16, st::F32, 8, st::F32>(layer, kTwoChunks);
            sixteen_bit_equals_f32_rounded<st::BF16, st::BF16, 8, st::F32>(layer);
            sixteen_bit_equals_f32_rounded<st::F16, st::F32, 8, st::F32>(layer);
            sixteen_bit_equals_f32_rounded<st::F16, st::F16, 8, st::F32>(layer);
        }
    }

    /// The same mix against the CPU op on the same inputs (16-bit x and dx, f32 dout, the kernel's
    /// statistics): dw and db in f32 to 1e-5 normwise (as the f32 kernels: rows and columns summed in
    /// another order); dx, rounded once by both, within one step of its format and equal but for a few
    /// elements; with an f16 x, dw and db into an f16 arena too, within one fp16 step.
    void f32_dout_beside_16bit_x_matches_the_cpu_op() {
        for (bool layer : {true, false})
            for (const auto& run : {f32_dout_against_the_cpu_op<st::BF16, st::F32, 1>,
                                    f32_dout_against_the_cpu_op<st::BF16, st::F32, 8>,
                                    f32_dout_against_the_cpu_op<st::BF16, st::BF16, 8>,
                                    f32_dout_against_the_cpu_op<st::F16, st::F32, 1>,
                                    f32_dout_against_the_cpu_op<st::F16, st::F32, 8>,
                                    f32_dout_against_the_cpu_op<st::F16, st::F16, 8>}) {
                run(layer);
                if (QTest::currentTestFailed()) return;  // the first failing case, named by it
            }
    }

    /// The f32 kernels against the CPU ops (float sums in another order: to rounding), one element per
    /// access and in 16-byte row loops (4 floats per access; 8, as beside a 16-bit tensor): the wide
    /// loops' own summation order is held to the same tolerance, not to the scalar kernel's bits.
    void f32_kernels_match_the_cpu_ops_data() {
        QTest::addColumn<int>("width");
        QTest::newRow("scalar") << 1;
        QTest::newRow("16-byte") << 4;
        QTest::newRow("32-byte") << 8;
    }
    void f32_kernels_match_the_cpu_ops() {
        QFETCH(int, width);
        const int64_t rows = kTwoChunks, n = rows * kCols;
        std::vector<float> x = random_floats(n, 1, -3, 5), dout = random_floats(n, 2, -1, 1),
                           dx0 = random_floats(n, 3, -1, 1), w = random_floats(kCols, 4, 0.5f, 1.5f),
                           b = random_floats(kCols, 5, -0.5f, 0.5f);
        for (bool layer : {true, false}) {
            const auto f = [](const std::vector<float>& v) { return make<st::F32>(v); };
            const NormResults got =
                width == 1   ? run_norm<st::F32, st::F32, 1>(rows, layer, f(x), f(dout), f(dx0), f(w), f(b))
                : width == 4 ? run_norm<st::F32, st::F32, 4>(rows, layer, f(x), f(dout), f(dx0), f(w), f(b))
                             : run_norm<st::F32, st::F32, 8>(rows, layer, f(x), f(dout), f(dx0), f(w), f(b));
            mwb::OpContext ctx;
            const auto m = [&](std::vector<float>& t) { return mwb::view_f32(t.data(), {rows, kCols}); };
            const auto v = [](std::vector<float>& t) { return mwb::view_f32(t.data(), {int64_t(t.size())}); };
            std::vector<float> out(n), mean(rows), rstd(rows), dx(n), dw(kCols, 0.25f), db(kCols, -0.5f);
            if (layer) {
                mwb::ops::layernorm_forward(ctx, m(out), v(mean), v(rstd), m(x), v(w), v(b), 1e-5f);
                mwb::ops::layernorm_backward(ctx, m(dx), v(dw), v(db), m(dout), m(x), v(mean), v(rstd), v(w), false);
                MWB_VERIFY_ERROR(normwise_error(got.mean, mwb::test::to_double(mean)), 1e-5);
                MWB_VERIFY_ERROR(normwise_error(got.db, mwb::test::to_double(db)), 1e-5);
            } else {
                mwb::ops::rmsnorm_forward(ctx, m(out), v(rstd), m(x), v(w), 1e-6f);
                mwb::ops::rmsnorm_backward(ctx, m(dx), v(dw), m(dout), m(x), v(rstd), v(w), false);
            }
            // Sums of 200 and 260 terms in other orders (normwise, as mwb-gpu-check's norms check).
            MWB_VERIFY_ERROR(normwise_error(got.rstd, mwb::test::to_double(rstd)), 1e-5);
            MWB_VERIFY_ERROR(normwise_error(got.out, mwb::test::to_double(out)), 1e-5);
            MWB_VERIFY_ERROR(normwise_error(got.dx, mwb::test::to_double(dx)), 1e-5);
            MWB_VERIFY_ERROR(normwise_error(got.dw, mwb::test::to_double(dw)), 1e-5);
        }
    }

    /// gamma (and beta) gradients of a norm over f16 activations added into an f16 arena by
    /// k_sum_partials<F16>, as norm_param_grads launches it.
    void parameter_gradients_into_an_f16_arena() {
        const int64_t rows = kTwoChunks, n = rows * kCols, chunks = (rows + nk::kRowChunk - 1) / nk::kRowChunk;
        using S = st::F16;
        const Tensor<S> x = make<S>(random_floats(n, 31, -3, 5)), dout = make<S>(random_floats(n, 32, -1, 1));
        std::vector<float> w = random_floats(kCols, 33, 0.5f, 1.5f), b = random_floats(kCols, 34, -0.5f, 0.5f);
        for (bool layer : {true, false}) {
            // Statistics from the forward kernel (what the backward reads).
            std::vector<typename S::type> out(n);
            std::vector<float> mean(rows), rstd(rows);
            if (layer)
                emu::launch(rows, 1, kRowThreads, [&] {
                    nk::k_layernorm_fwd<S, st::F32>(out.data(), mean.data(), rstd.data(), x.raw.data(), w.data(),
                                                    b.data(), kCols, 1e-5f);
                });
            else
                emu::launch(rows, 1, kRowThreads, [&] {
                    nk::k_rmsnorm_fwd<S, st::F32>(out.data(), rstd.data(), x.raw.data(), w.data(), kCols, 1e-6f);
                });
            const float* m = layer ? mean.data() : nullptr;
            std::vector<float> pw(chunks * kCols), pb(chunks * kCols);
            emu::launch(static_cast<unsigned>((kCols + 127) / 128), static_cast<unsigned>(chunks), 128, [&] {
                nk::k_norm_bwd_partials<S>(pw.data(), layer ? pb.data() : nullptr, dout.raw.data(), x.raw.data(), m,
                                           rstd.data(), rows, kCols);
            });
            // The arena's earlier values (an earlier micro-batch), of a size the sums' ulps matter against.
            const std::vector<uint16_t> dw0 = encode16(DType::F16, random_floats(kCols, 35, -40, 40)),
                                        db0 = encode16(DType::F16, random_floats(kCols, 36, -40, 40));
            std::vector<uint16_t> dw = dw0, db = db0;
            emu::launch(2, 1, 64, [&] { nk::k_sum_partials<st::F16>(dw.data(), pw.data(), chunks, kCols); });
            if (layer) emu::launch(2, 1, 64, [&] { nk::k_sum_partials<st::F16>(db.data(), pb.data(), chunks, kCols); });
            // Reference 1: the f32 kernel from the arena's values, rounded once by _Float16.
            int rounded = 0;  // elements whose fp32 sum needed its rounding (else none and once look alike)
            const auto once = [&](const std::vector<uint16_t>& start, std::vector<float>& partial) {
                std::vector<float> acc = decode16(DType::F16, start);
                emu::launch(2, 1, 64, [&] { nk::k_sum_partials(acc.data(), partial.data(), chunks, kCols); });
                for (float& v : acc) {
                    rounded += mwb::test::fp16_ref(v) != v;
                    v = mwb::test::fp16_ref(v);
                }
                return acc;
            };
            MWB_VERIFY_BITWISE(decode16(DType::F16, dw), once(dw0, pw));
            if (layer) MWB_VERIFY_BITWISE(decode16(DType::F16, db), once(db0, pb));
            QVERIFY(rounded > kCols / 2);
            // Reference 2: the CPU op on the same f16 arena (rows in another order: within one step).
            mwb::OpContext ctx;
            std::vector<uint16_t> cdw = dw0, cdb = db0, dx(n);
            std::vector<typename S::type> xr = x.raw, dr = dout.raw;
            const auto h16 = [](auto& v, std::initializer_list<int64_t> shape) {
                return mwb::make_view(v.data(), DType::F16, shape);
            };
            const auto v32 = [](std::vector<float>& t) { return mwb::view_f32(t.data(), {int64_t(t.size())}); };
            if (layer)
                mwb::ops::layernorm_backward(ctx, h16(dx, {rows, kCols}), h16(cdw, {kCols}), h16(cdb, {kCols}),
                                             h16(dr, {rows, kCols}), h16(xr, {rows, kCols}), v32(mean), v32(rstd),
                                             v32(w), false);
            else
                mwb::ops::rmsnorm_backward(ctx, h16(dx, {rows, kCols}), h16(cdw, {kCols}), h16(dr, {rows, kCols}),
                                           h16(xr, {rows, kCols}), v32(rstd), v32(w), false);
            QVERIFY(mwb::test::max_ulp16(dw, cdw) <= 1);
            if (layer) QVERIFY(mwb::test::max_ulp16(db, cdb) <= 1);
        }
    }

    /// k_residual_norm_fwd (bias_dropout_add_norm_forward) against the two kernels it fuses, launched as
    /// the unfused ops launch them (k_dropout, then k_layernorm_fwd / k_rmsnorm_fwd with the same V):
    /// out, norm_out, mean and rstd bit for bit, for f32/bf16/f16 storage, x f32 or of out's storage,
    /// weights f32 or 16-bit, both norms, with and without bias, p = 0 and p > 0, the residual pass
    /// one element or 16 bytes at a time.
    void fused_residual_norm_is_the_two_kernels() {
        fused_cases<st::F32, st::F32, st::F32>();
        fused_cases<st::BF16, st::F32, st::F32>();
        fused_cases<st::BF16, st::BF16, st::BF16>();
        fused_cases<st::BF16, st::F32, st::BF16>();
        fused_cases<st::F16, st::F32, st::F32>();
        fused_cases<st::F16, st::F16, st::F16>();
        fused_cases<st::F16, st::F32, st::F16>();
    }

    void column_sums_and_bias_add_on_16bit() {
        const int64_t rows = kTwoChunks, n = rows * kCols;
        const std::vector<float> values = random_floats(n, 9, -2, 2), bias = random_floats(kCols, 10, -1, 1);
        const auto sums = [&](auto s) {
            using S = decltype(s);
            const Tensor<S> x = make<S>(values);
            const int64_t chunks = (rows + nk::kRowChunk - 1) / nk::kRowChunk;
            std::vector<float> partial(chunks * kCols), out(kCols, 1.0f);
            emu::launch(static_cast<unsigned>((kCols + 127) / 128), static_cast<unsigned>(chunks), 128,
                        [&] { nk::k_column_partials<S>(x.raw.data(), rows, kCols, partial.data()); });
            emu::launch(2, 1, 64, [&] { nk::k_sum_partials(out.data(), partial.data(), chunks, kCols); });
            return std::pair{out, x.f32};
        };
        for (DType dt : {DType::BF16, DType::F16}) {
            const auto [got, widened] = dt == DType::BF16 ? sums(st::BF16{}) : sums(st::F16{});
            std::vector<float> want(kCols, 1.0f);
            {
                const int64_t chunks = (rows + nk::kRowChunk - 1) / nk::kRowChunk;
                std::vector<float> partial(chunks * kCols);
                emu::launch(2, static_cast<unsigned>(chunks), 128,
                            [&] { nk::k_column_partials<st::F32>(widened.data(), rows, kCols, partial.data()); });
                emu::launch(2, 1, 64, [&] { nk::k_sum_partials(want.data(), partial.data(), chunks, kCols); });
            }
            MWB_VERIFY_BITWISE(got, want);
            // A 16-bit y = f32 GEMM result + bias, rounded once.
            std::vector<float> acc = values, sum(n);
            std::vector<uint16_t> y(n);
            const auto add = [&](auto s) {
                using S = decltype(s);
                emu::launch(3, 1, 64, [&] {
                    nk::k_add_bias_rows<S, st::F32, st::F32>(y.data(), acc.data(), bias.data(), rows, kCols);
                });
            };
            if (dt == DType::BF16)
                add(st::BF16{});
            else
                add(st::F16{});
            for (int64_t i = 0; i < n; ++i) sum[i] = acc[i] + bias[i % kCols];
            QCOMPARE(y, encode16(dt, sum));
        }
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_norm_emulated, TestNormEmulated)
}  // namespace test_kernels_norm_emulated
#include "test_norm_emulated.moc"
