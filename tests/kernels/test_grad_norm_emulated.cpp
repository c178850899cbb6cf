// The CUDA gradient-norm kernels (kernels/cuda/grad_norm_kernels.cuh), executed on the CPU by
// cuda_emulation.h: the Σ x² of ragged arena ranges (several chunks, a ragged tail, gaps, a range
// shorter than a warp) against float64, with the bits of the per-range sums added in range order (the
// per-tensor loop the training step ran before), NaN and Inf propagated; and the clip / skip scale
// with the bits of the CPU op. No GPU.
#include "cuda_emulation.h"

#include "grad_norm_kernels.cuh"

#include "mwb/kernels/ops.h"
#include "mwb/kernels/precision.h"
#include "support/reference.h"
#include "support/suite.h"

#include <QtTest>

#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace test_kernels_grad_norm_emulated {

namespace gn = mwb::cuda::grad_norm;
namespace emu = mwb::emulation;
using mwb::IndexRange;

namespace {

constexpr int kThreads = 64;

/// The two launches of ops_elementwise.cu's sum_squares_ranges, on emulated threads; T: float, or
/// uint16_t holding fp16 bits (the f16 gradient arena).
template <class T = float>
double emulated_sum(const std::vector<T>& x, const std::vector<IndexRange>& ranges) {
    using S = std::conditional_t<std::is_same_v<T, float>, mwb::cuda::storage::F32, mwb::cuda::storage::F16>;
    std::vector<gn::Range> table;
    int64_t chunks = 0;
    for (const IndexRange& r : ranges) {
        if (r.count == 0) continue;
        table.push_back({r.first, r.count, chunks});
        chunks += (r.count + gn::kChunk - 1) / gn::kChunk;
    }
    const int n = static_cast<int>(table.size());
    std::vector<double> partial(static_cast<std::size_t>(chunks + n), std::nan(""));
    double out = std::nan("");
    if (chunks > 0)
        emu::launch(static_cast<unsigned>(chunks), 1, kThreads,
                    [&] { gn::squares_partials<S>(x.data(), table.data(), n, partial.data()); });
    emu::launch(1, 1, kThreads,
                [&] { gn::squares_total(&out, partial.data() + chunks, partial.data(), table.data(), n, chunks); });
    return out;
}

}  // namespace

class TestGradNormEmulated : public QObject {
    Q_OBJECT
private slots:
    void ranges_sum_has_the_bits_of_the_per_range_sums() {
        auto x = mwb::test::random_floats(3 * gn::kChunk + 500, 1, -4.0f, 4.0f);
        // More ranges than the total kernel's threads (it loops), one of 5 elements (a warp's lanes
        // mostly idle), one spanning two chunks and a tail, an empty one, gaps.
        std::vector<IndexRange> ranges = {{0, 5}, {9, 2 * gn::kChunk + 17}, {2 * gn::kChunk + 40, 0}};
        for (int64_t first = 2 * gn::kChunk + 40; first + 97 < static_cast<int64_t>(x.size()); first += 131)
            ranges.push_back({first, 97});
        QVERIFY(ranges.size() > kThreads);
        x[6] = 1e30f;  // in a gap
        double per_range = 0, ref = 0;
        for (const IndexRange& r : ranges) {
            per_range += emulated_sum(x, {r});
            for (int64_t i = r.first; i < r.first + r.count; ++i) ref += double(x[i]) * double(x[i]);
        }
        const double all = emulated_sum(x, ranges);
        QCOMPARE(std::bit_cast<uint64_t>(all), std::bit_cast<uint64_t>(per_range));
        QVERIFY2(std::abs(all - ref) / ref < 1e-12, qPrintable(QString::number(std::abs(all - ref) / ref)));
        QCOMPARE(emulated_sum(x, {}), 0.0);
        x[2 * gn::kChunk + 41] = std::numeric_limits<float>::infinity();
        QCOMPARE(emulated_sum(x, ranges), std::numeric_limits<double>::infinity());
        x[100] = std::nanf("");
        QVERIFY(std::isnan(emulated_sum(x, ranges)));
    }

    /// An f16 arena (fp16 runs without accumulate_allreduce_grads_in_fp32): each element widened exactly
    /// and squared in float64: the CPU op's value and float64's to reassociation (a chunk's sum runs in
    /// another order than the CPU's), the bits of the f32 kernel on the widened values; an fp16 inf
    /// propagates.
    void f16_arena_matches_the_cpu_op() {
        const auto v = mwb::test::random_floats(gn::kChunk + 300, 2, -8.0f, 8.0f);
        std::vector<uint16_t> x(v.size());
        std::vector<float> widened(v.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
            x[i] = mwb::fp16_bits(v[i]);
            widened[i] = mwb::from_fp16_bits(x[i]);
        }
        const std::vector<IndexRange> ranges = {{3, gn::kChunk - 70}, {gn::kChunk - 40, 5}, {gn::kChunk, 290}};
        double cpu = 0, ref = 0;
        mwb::OpContext ctx;
        mwb::ops::sum_squares_ranges(ctx, mwb::make_view(&cpu, mwb::DType::F64, {1}),
                                     mwb::make_view(x.data(), mwb::DType::F16, {static_cast<int64_t>(x.size())}),
                                     ranges);
        for (const IndexRange& r : ranges)
            for (int64_t i = r.first; i < r.first + r.count; ++i) {
                const double e = mwb::from_fp16_bits(x[static_cast<std::size_t>(i)]);
                ref += e * e;
            }
        const double dev = emulated_sum(x, ranges);
        QCOMPARE(std::bit_cast<uint64_t>(dev), std::bit_cast<uint64_t>(emulated_sum(widened, ranges)));
        QVERIFY2(std::abs(dev - cpu) / cpu < 1e-12, qPrintable(QString::number(std::abs(dev - cpu) / cpu)));
        QVERIFY2(std::abs(dev - ref) / ref < 1e-12, qPrintable(QString::number(std::abs(dev - ref) / ref)));
        x[10] = 0x7C00;  // +inf
        QCOMPARE(emulated_sum(x, ranges), std::numeric_limits<double>::infinity());
    }

    void gradient_scale_has_the_bits_of_the_cpu_op() {
        mwb::OpContext cpu;
        for (double sumsq : {0.0, 1e-3, 2.5e7, 1.7e13, std::numeric_limits<double>::infinity(), std::nan("")})
            for (double loss_scale : {1.0, 1024.0, 65536.0})
                for (double clip : {0.0, 1.0, 1e6}) {
                    float dev[2] = {-1, -1}, host[2] = {-2, -2};
                    emu::launch(1, 1, 1, [&] { gn::gradient_scale(dev, &sumsq, loss_scale, clip); });
                    double s = sumsq;
                    mwb::ops::gradient_scale(cpu, mwb::view_f32(host, {2}), mwb::make_view(&s, mwb::DType::F64, {1}),
                                             loss_scale, clip);
                    QCOMPARE(std::bit_cast<uint32_t>(dev[0]), std::bit_cast<uint32_t>(host[0]));
                    QCOMPARE(std::bit_cast<uint32_t>(dev[1]), std::bit_cast<uint32_t>(host[1]));
                }
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_grad_norm_emulated, TestGradNormEmulated)
}  // namespace test_kernels_grad_norm_emulated
#include "test_grad_norm_emulated.moc"
