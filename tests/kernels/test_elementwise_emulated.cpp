// The CUDA elementwise map (kernels/cuda/elementwise_kernels.cuh) executed on CPU threads by
// cuda_emulation.h, launched as ops_elementwise.cu launches it: the 16-byte aligned bulk with 128-bit
// accesses (V = 4) and the tail one float at a time. Fill, scale and add bit for bit against their
// definitions (including in place and sizes that leave a tail); GELU forward against the float64 tanh
// formula and its backward against central differences of the float64 forward, and both against the
// CPU ops (another exp: to rounding). Grids small enough that the grid-stride loops wrap.
// 16-bit views (storage.cuh): the device accessor's conversions against precision.h's bits for every
// 16-bit pattern and a million float patterns; every map op and conversion on bf16 and f16 views, bulk
// (8 per access) and tail, aligned and misaligned, bit for bit against the same kernel on f32 values
// rounded after (an emulated 16-bit run) and against the CPU ops; dropout, dropout + add and bias +
// dropout + add on 16-bit views (f32 or 16-bit bias; group-wide and element-wise paths, offsets that
// start mid-group) likewise. No GPU.
#include "cuda_emulation.h"

#include "elementwise_kernels.cuh"
#include "emulated_storage.h"

#include "mwb/kernels/ops.h"
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"

#include <QtTest>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

namespace test_kernels_elementwise_emulated {

namespace ew = mwb::cuda::elementwise;
namespace st = mwb::cuda::storage;
namespace emu = mwb::emulation;
using mwb::DType;
using mwb::test::decode16;
using mwb::test::encode16;
using mwb::test::max_ulp16;
using mwb::test::max_rel_error;
using mwb::test::random_floats;

namespace {

/// As the launcher: V = 4 over the multiple-of-4 bulk (the vectors are 16-byte aligned), V = 1 over
/// the tail; 3 blocks of 64 threads, so large n wraps the grid-stride loop.
template <class F>
void map(float* out, const float* a, const float* b, int64_t n, F f) {
    const int64_t bulk = n / 4 * 4;
    if (bulk > 0) emu::launch(3, 1, 64, [&] { ew::k_map<4, uint32_t>(out, a, b, bulk, f); });
    if (n > bulk)
        emu::launch(3, 1, 64, [&] {
            ew::k_map<1, int64_t>(out + bulk, a ? a + bulk : nullptr, b ? b + bulk : nullptr, n - bulk, f);
        });
}

/// As ops_elementwise.cu's map for storages SO, SA, SB: V = 8 over the bulk when a tensor is 16-bit
/// (4 when all are f32) if every pointer is 16-byte aligned, V = 1 over the tail (or everything).
template <class SO, class SA, class SB, class F>
void map_as(typename SO::type* out, const typename SA::type* a, const typename SB::type* b, int64_t n, F f) {
    constexpr int V = st::any_16bit<SO, SA, SB> ? 8 : 4;
    const int64_t bulk = st::aligned_to(16, out, a, b) ? n / V * V : 0;
    if (bulk > 0) emu::launch(3, 1, 64, [&] { ew::k_map<V, uint32_t, SO, SA, SB>(out, a, b, bulk, f); });
    if (n > bulk)
        emu::launch(3, 1, 64, [&] {
            ew::k_map<1, int64_t, SO, SA, SB>(out + bulk, a ? a + bulk : nullptr, b ? b + bulk : nullptr, n - bulk, f);
        });
}

/// f over f32 values (the emulated 16-bit run's kernel), its result rounded to dt.
template <class F>
std::vector<uint16_t> f32_then_rounded(DType dt, const std::vector<float>& a, const std::vector<float>& b, F f) {
    std::vector<float> out(a.size());
    map_as<st::F32, st::F32, st::F32>(out.data(), a.data(), b.empty() ? nullptr : b.data(),
                                      static_cast<int64_t>(a.size()), f);
    return encode16(dt, out);
}

/// A 16-bit buffer whose element 0 sits `offset` elements past a 16-byte boundary.
struct Buffer16 {
    std::vector<uint16_t> storage;
    int64_t offset;
    Buffer16(const std::vector<uint16_t>& values, int64_t off) : storage(values.size() + 8), offset(off) {
        std::copy(values.begin(), values.end(), data());
    }
    uint16_t* data() {
        auto* p = storage.data();
        while (reinterpret_cast<uintptr_t>(p) % 16 != 0) ++p;  // vectors of uint16_t are 2-aligned only
        return p + offset;
    }
    std::vector<uint16_t> values(std::size_t n) { return {data(), data() + n}; }
};

std::vector<float> random_bit_patterns(std::size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = std::bit_cast<float>(static_cast<uint32_t>(gen()));
    return v;
}

double gelu64(double v) {
    return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}

}  // namespace

class TestElementwiseEmulated : public QObject {
    Q_OBJECT
private slots:
    void fill_scale_add_are_exact() {
        for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1024}, int64_t{5003}}) {
            const std::vector<float> a = random_floats(n, 1), b = random_floats(n, 2);
            std::vector<float> out(n, -1.0f);
            map(out.data(), nullptr, nullptr, n, ew::Fill{2.5f});
            QCOMPARE(out, std::vector<float>(n, 2.5f));
            std::vector<float> x = a, want(n);
            map(x.data(), x.data(), nullptr, n, ew::Scale{-0.75f});  // in place, as ops::scale
            for (int64_t i = 0; i < n; ++i) want[i] = a[i] * -0.75f;
            MWB_VERIFY_BITWISE(x, want);
            std::vector<float> sum = a;
            map(sum.data(), sum.data(), b.data(), n, ew::Add{});  // out aliases a
            for (int64_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
            MWB_VERIFY_BITWISE(sum, want);
        }
    }

    void step_values_are_read_where_the_kernel_runs() {
        // fill_from: the loss gradient's row scale from the step block's GradScale (a float in a double)
        // over N rows, the bits of the host's grad_scale / float(N), and the CPU op's.
        const double loss_scale = 65536.0;
        const int64_t micro_batches = 3, rows = 4099;
        const float grad_scale = static_cast<float>(loss_scale / static_cast<double>(micro_batches));
        const double block_value = grad_scale;
        std::vector<float> out(rows, -1.0f), cpu(rows, -1.0f);
        map(out.data(), nullptr, nullptr, rows, ew::FillFrom{&block_value, static_cast<float>(rows)});
        const std::vector<float> want(rows, grad_scale / static_cast<float>(rows));
        MWB_VERIFY_BITWISE(out, want);
        mwb::OpContext ctx;
        double v = block_value;
        mwb::ops::fill_from(ctx, mwb::view_f32(cpu.data(), {rows}), mwb::make_view(&v, DType::F64, {1}),
                            static_cast<float>(rows));
        MWB_VERIFY_BITWISE(cpu, want);

        // Dropout with the stream derived in the kernel from an iteration in memory (a replayed CUDA
        // graph's): the mask of the stream the host names for (iteration, micro-batch, site) — written
        // out here as splitmix64 — and the next iteration's once the memory changes.
        const auto splitmix = [](uint64_t x) {
            x += 0x9E3779B97F4A7C15ull;
            x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
            x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
            return x ^ (x >> 31);
        };
        const int64_t n = 1027, micro_batch = 5;
        const uint64_t site = 8 * 3 + 2;
        const float p = 0.4f;
        const std::vector<float> x = random_floats(n, 41, -2, 2);
        double iteration = 0;
        const mwb::RngStream derived{77, 0, &iteration, micro_batch, site};
        std::vector<float> previous;
        for (double it : {1.0, 2.0, 40000.0}) {
            iteration = it;
            const mwb::RngStream named{
                77, splitmix(splitmix(splitmix(static_cast<uint64_t>(it)) ^ static_cast<uint64_t>(micro_batch)) ^
                             splitmix(site))};
            std::vector<float> got(n), want_masked(n), cpu_derived(n), cpu_named(n);
            const auto groups = ((n - 1) >> 2) + 1;
            const auto launch = [&](float* o, const mwb::RngStream& r) {
                const ew::DropoutArgs a{r, mwb::dropout_keep_threshold(p), 1.0f / (1.0f - p), 0, n, 1};
                emu::launch(blocks(groups), 1, 64,
                            [&] { ew::k_dropout<false, st::F32, st::F32>(o, nullptr, x.data(), nullptr, 4, a); });
            };
            launch(got.data(), derived);
            launch(want_masked.data(), named);
            MWB_VERIFY_BITWISE(got, want_masked);
            // The CPU op likewise (against itself on the named stream: its dropped elements keep the
            // sign of x, -0, where the kernel's 0 + x·0 gives +0).
            std::vector<float> xs = x;
            mwb::ops::dropout_forward(ctx, mwb::view_f32(cpu_derived.data(), {n}), mwb::view_f32(xs.data(), {n}), p,
                                      derived, 0);
            mwb::ops::dropout_forward(ctx, mwb::view_f32(cpu_named.data(), {n}), mwb::view_f32(xs.data(), {n}), p,
                                      named, 0);
            MWB_VERIFY_BITWISE(cpu_derived, cpu_named);
            for (int64_t i = 0; i < n; ++i)  // the same mask as the kernel's
                QVERIFY((cpu_named[i] == 0.0f) == (want_masked[i] == 0.0f) || x[i] == 0.0f);
            QVERIFY2(previous != got, "the next iteration must draw another mask");
            previous = got;
        }
    }

    void gelu_matches_float64_and_the_cpu_op() {
        const int64_t n = 2051;  // a tail of 3
        std::vector<float> x = random_floats(n, 3, -8, 8), dout = random_floats(n, 4, -1, 1);
        x[0] = 0.0f;
        x[1] = 30.0f;  // saturated: gelu(x) = x, gelu'(x) = 1
        x[2] = -30.0f;
        std::vector<float> y(n), dx(n);
        map(y.data(), x.data(), nullptr, n, ew::GeluForward{});
        map(dx.data(), dout.data(), x.data(), n, ew::GeluBackward{});
        std::vector<double> y64(n), dx64(n);
        for (int64_t i = 0; i < n; ++i) {
            const double v = x[i], h = 1e-5 * std::max(1.0, std::abs(v));
            y64[i] = gelu64(v);
            dx64[i] = dout[i] * (gelu64(v + h) - gelu64(v - h)) / (2 * h);
        }
        // expf and the float formula, relative to a floor of 1e-3 (gelu and gelu' pass through 0, where
        // the float rounding of the cubic's terms dominates): measured 5.5e-7 forward, 3.1e-6 backward
        // (central differences of the float64 forward are good to ~1e-9).
        MWB_VERIFY_ERROR(max_rel_error(y, y64), 2e-6);
        MWB_VERIFY_ERROR(max_rel_error(dx, dx64), 1e-5);
        std::vector<float> y_cpu(n), dx_cpu(n);
        mwb::OpContext ctx;
        const auto v = [n](std::vector<float>& t) { return mwb::view_f32(t.data(), {n}); };
        mwb::ops::gelu_forward(ctx, v(y_cpu), v(x));
        mwb::ops::gelu_backward(ctx, v(dx_cpu), v(dout), v(x));
        // The CPU's exp_approx against expf, same formula: measured 7.8e-7 and 2.3e-6.
        MWB_VERIFY_ERROR(max_rel_error(y, mwb::test::to_double(y_cpu)), 2e-6);
        MWB_VERIFY_ERROR(max_rel_error(dx, mwb::test::to_double(dx_cpu)), 1e-5);
    }

    void accessor_has_the_cpus_bits() {
        for (uint32_t h = 0; h <= 0xFFFFu; ++h) {
            const auto b = static_cast<uint16_t>(h);
            QCOMPARE(std::bit_cast<uint32_t>(st::from_bf16_bits(b)), std::bit_cast<uint32_t>(mwb::from_bf16_bits(b)));
            QCOMPARE(std::bit_cast<uint32_t>(st::from_fp16_bits(b)), std::bit_cast<uint32_t>(mwb::from_fp16_bits(b)));
        }
        std::vector<float> x = random_bit_patterns(1 << 20, 11);
        // Halfway cases, the overflow edges and subnormals of both formats, infinities, NaNs.
        for (float v : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 6.0e-8f, 2.98e-8f, 5.96e-8f, 6.1e-5f,
                        std::bit_cast<float>(0x3F808000u), std::bit_cast<float>(0x3F818000u), 3.4028235e38f,
                        INFINITY, -INFINITY, NAN, std::bit_cast<float>(0xFFC12345u), std::bit_cast<float>(0x00000001u)})
            x.push_back(v);
        int64_t differ = 0;
        for (float v : x) {
            differ += st::bf16_bits(v) != mwb::bf16_bits(v);
            differ += st::fp16_bits(v) != mwb::fp16_bits(v);
            differ += std::bit_cast<uint32_t>(st::round_to_bf16(v)) != std::bit_cast<uint32_t>(mwb::round_to_bf16(v));
            differ += std::bit_cast<uint32_t>(st::round_to_fp16(v)) != std::bit_cast<uint32_t>(mwb::round_to_fp16(v));
        }
        QCOMPARE(differ, int64_t{0});
    }

    void map_ops_on_16bit_views_data() {
        QTest::addColumn<int>("dtype");
        QTest::newRow("bf16") << static_cast<int>(DType::BF16);
        QTest::newRow("f16") << static_cast<int>(DType::F16);
    }
    void map_ops_on_16bit_views() {
        QFETCH(int, dtype);
        if (static_cast<DType>(dtype) == DType::BF16)
            map_cases<st::BF16>();
        else
            map_cases<st::F16>();
    }

    void conversions_and_round_to() {
        const int64_t n = 4099;  // a tail of 3 after the 8-wide bulk
        std::vector<float> x = random_bit_patterns(n, 12);
        for (int64_t i = 0; i < n; i += 3) x[i] = std::ldexp(static_cast<float>(i % 7) - 3.0f, static_cast<int>(i % 40) - 30);
        for (int64_t off : {int64_t{0}, int64_t{1}}) {
            for (DType dt : {DType::BF16, DType::F16}) {
                const auto to16 = [&](auto s16) {
                    using S = decltype(s16);
                    Buffer16 out(std::vector<uint16_t>(n), off);
                    map_as<S, st::F32, st::F32>(out.data(), x.data() + off, nullptr, n - off, ew::Copy{});
                    const std::vector<float> src(x.begin() + off, x.end());
                    QCOMPARE(out.values(n - off), encode16(dt, src));
                    // Back to f32: exact.
                    std::vector<float> back(n - off);
                    map_as<st::F32, S, S>(back.data(), out.data(), nullptr, n - off, ew::Copy{});
                    MWB_VERIFY_BITWISE(back, decode16(dt, out.values(n - off)));
                };
                if (dt == DType::BF16)
                    to16(st::BF16{});
                else
                    to16(st::F16{});
            }
            // bf16 -> f16 and back: the widened value rounded once.
            const std::vector<float> src(x.begin() + off, x.end());
            Buffer16 b(encode16(DType::BF16, src), off), h(std::vector<uint16_t>(n), off), b2(std::vector<uint16_t>(n), off);
            map_as<st::F16, st::BF16, st::BF16>(h.data(), b.data(), nullptr, n - off, ew::Copy{});
            QCOMPARE(h.values(n - off), encode16(DType::F16, decode16(DType::BF16, b.values(n - off))));
            map_as<st::BF16, st::F16, st::F16>(b2.data(), h.data(), nullptr, n - off, ew::Copy{});
            QCOMPARE(b2.values(n - off), encode16(DType::BF16, decode16(DType::F16, h.values(n - off))));
            // round_to on f32 tensors, in place: the CPU op's bits.
            for (DType dt : {DType::BF16, DType::F16}) {
                std::vector<float> got = src, want = src;
                if (dt == DType::BF16)
                    map_as<st::F32, st::F32, st::F32>(got.data(), got.data(), nullptr, n - off, ew::RoundBf16{});
                else
                    map_as<st::F32, st::F32, st::F32>(got.data(), got.data(), nullptr, n - off, ew::RoundFp16{});
                mwb::OpContext ctx;
                mwb::ops::round_to(ctx, mwb::view_f32(want.data(), {n - off}), dt);
                MWB_VERIFY_BITWISE(got, want);
            }
        }
    }

    void dropout_on_16bit_views_data() {
        QTest::addColumn<int>("dtype");
        QTest::newRow("bf16") << static_cast<int>(DType::BF16);
        QTest::newRow("f16") << static_cast<int>(DType::F16);
    }
    void dropout_on_16bit_views() {
        QFETCH(int, dtype);
        if (static_cast<DType>(dtype) == DType::BF16) {
            dropout_cases<st::BF16, st::F32>();
            dropout_cases<st::BF16, st::BF16>();
        } else {
            dropout_cases<st::F16, st::F32>();
            dropout_cases<st::F16, st::F16>();
        }
    }

    /// The storage mixes the model passes (since fusednorm): the f32 row-parallel sum x into a 16-bit
    /// residual (bias_dropout_add, bias 16-bit), and a 16-bit gradient into the f32 branch gradient
    /// (dropout_backward), against the CPU ops on the same views: one 16-bit step at most (the sum's
    /// rounding after another FMA contraction), and the f32 product exactly.
    void dropout_mixes_f32_and_16bit() {
        const int64_t rows = 5, cols = 48, n = rows * cols;
        const float p = 0.25f;
        const mwb::RngStream rng{4321, 9};
        for (DType dt : {DType::BF16, DType::F16}) {
            const std::vector<float> x = random_floats(n, 41, -2, 2);
            const std::vector<uint16_t> r16 = encode16(dt, random_floats(n, 42, -2, 2)),
                                        b16 = encode16(dt, random_floats(cols, 43, -1, 1)),
                                        d16 = encode16(dt, random_floats(n, 44, -1, 1));
            for (int64_t offset : {int64_t{8}, int64_t{3}}) {
                const ew::DropoutArgs args{rng, mwb::dropout_keep_threshold(p), 1.0f / (1.0f - p), offset, n, 1};
                const int64_t groups = ((offset + n - 1) >> 2) - (offset >> 2) + 1;
                Buffer16 pr(r16, 0), pb(b16, 0), pd(d16, 0), out(std::vector<uint16_t>(n), 0);
                std::vector<float> dx(n);
                const auto run = [&](auto s) {
                    using S = decltype(s);
                    if (offset % 4 == 0)
                        emu::launch(blocks(groups), 1, 64, [&] {
                            ew::k_dropout<true, S, S, st::F32>(out.data(), pr.data(), x.data(), pb.data(), cols, args);
                        });
                    else
                        emu::launch(blocks(groups), 1, 64, [&] {
                            ew::k_dropout<false, S, S, st::F32>(out.data(), pr.data(), x.data(), pb.data(), cols, args);
                        });
                    emu::launch(blocks(groups), 1, 64, [&] {
                        ew::k_dropout<false, st::F32, st::F32, S>(dx.data(), nullptr, pd.data(), nullptr, 4, args);
                    });
                };
                if (dt == DType::BF16)
                    run(st::BF16{});
                else
                    run(st::F16{});
                mwb::OpContext ctx;
                std::vector<uint16_t> rs = r16, bs = b16, ds = d16, cpu(n);
                std::vector<float> xs = x, cdx(n);
                const auto v16 = [&](std::vector<uint16_t>& t, int64_t r, int64_t c) {
                    return mwb::make_view(t.data(), dt, {r, c});
                };
                mwb::ops::bias_dropout_add_forward(ctx, v16(cpu, rows, cols), v16(rs, rows, cols),
                                                   mwb::view_f32(xs.data(), {rows, cols}), mwb::make_view(bs.data(), dt, {cols}),
                                                   p, rng, offset);
                mwb::ops::dropout_backward(ctx, mwb::view_f32(cdx.data(), {rows, cols}), v16(ds, rows, cols), p, rng,
                                           offset);
                QVERIFY2(max_ulp16(out.values(n), cpu) <= 1, "bias_dropout_add, f32 x into 16-bit out: more than one step");
                // Equal values (a dropped negative element is +0 here, 0 + x·0, and −0 on the CPU, x·0).
                QVERIFY2(dx == cdx, "dropout_backward, 16-bit dout into f32 dx: not the CPU op's values");
            }
        }
    }

private:
    template <class S>
    static void map_cases() {
        constexpr DType dt = S::dtype;
        for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{1029}, int64_t{5003}}) {
            for (int64_t off : {int64_t{0}, int64_t{3}}) {
                const std::vector<uint16_t> a16 = encode16(dt, random_floats(n, 21, -8, 8));
                const std::vector<uint16_t> b16 = encode16(dt, random_floats(n, 22, -8, 8));
                const std::vector<float> a = decode16(dt, a16), b = decode16(dt, b16);
                Buffer16 pa(a16, off), pb(b16, off), out(std::vector<uint16_t>(n, 0x7E00), off);
                map_as<S, S, S>(out.data(), nullptr, nullptr, n, ew::Fill{2.5f});
                QCOMPARE(out.values(n), std::vector<uint16_t>(n, dt == DType::BF16 ? 0x4020 : 0x4100));
                Buffer16 x(a16, off);
                map_as<S, S, S>(x.data(), x.data(), nullptr, n, ew::Scale{-0.75f});  // in place, as ops::scale
                QCOMPARE(x.values(n), f32_then_rounded(dt, a, {}, ew::Scale{-0.75f}));
                map_as<S, S, S>(out.data(), pa.data(), pb.data(), n, ew::Add{});
                QCOMPARE(out.values(n), f32_then_rounded(dt, a, b, ew::Add{}));
                // The CPU's add and scale on the same values, rounded as its 16-bit store would: the same bits.
                std::vector<float> cpu(n);
                mwb::OpContext ctx;
                mwb::ops::add(ctx, mwb::view_f32(cpu.data(), {n}), mwb::view_f32(const_cast<float*>(a.data()), {n}),
                              mwb::view_f32(const_cast<float*>(b.data()), {n}));
                QCOMPARE(out.values(n), encode16(dt, cpu));
                map_as<S, S, S>(out.data(), pa.data(), nullptr, n, ew::GeluForward{});
                const std::vector<uint16_t> y16 = out.values(n);
                QCOMPARE(y16, f32_then_rounded(dt, a, {}, ew::GeluForward{}));
                map_as<S, S, S>(out.data(), pb.data(), pa.data(), n, ew::GeluBackward{});  // dout = b, x = a
                const std::vector<uint16_t> dx16 = out.values(n);
                QCOMPARE(dx16, f32_then_rounded(dt, b, a, ew::GeluBackward{}));
                // Mixed: f32 out of a 16-bit x (and dx of 16-bit dout, x): the f32 kernel's values themselves.
                std::vector<float> y32(n), want(n);
                map_as<st::F32, S, S>(y32.data(), pa.data(), nullptr, n, ew::GeluForward{});
                map_as<st::F32, st::F32, st::F32>(want.data(), a.data(), nullptr, n, ew::GeluForward{});
                MWB_VERIFY_BITWISE(y32, want);
                // Against the CPU ops on the same 16-bit views (exp_approx against expf: at most one step of
                // the 16-bit format apart).
                if (off == 0) {
                    std::vector<uint16_t> xs = a16, ds = b16, cy(n), cdx(n);
                    const auto v16 = [&](std::vector<uint16_t>& t) { return mwb::make_view(t.data(), dt, {n}); };
                    mwb::ops::gelu_forward(ctx, v16(cy), v16(xs));
                    mwb::ops::gelu_backward(ctx, v16(cdx), v16(ds), v16(xs));
                    QVERIFY2(max_ulp16(y16, cy) <= 1, "gelu_forward: more than one 16-bit step from the CPU op");
                    QVERIFY2(max_ulp16(dx16, cdx) <= 1, "gelu_backward: more than one 16-bit step from the CPU op");
                }
            }
        }
    }

    /// The launcher's choice (ops_elementwise.cu's run_dropout) and the kernel on 16-bit views against
    /// the f32 kernel on their values, rounded after, and against the CPU ops.
    template <class S, class W>
    static void dropout_cases() {
        constexpr DType dt = S::dtype;
        const float p = 0.3f;
        const mwb::RngStream rng{1234, 77};
        for (int64_t offset : {int64_t{8}, int64_t{3}}) {
            for (bool with_bias : {false, true}) {
                for (bool with_base : {false, true}) {
                    if (with_bias && !with_base) continue;  // bias + dropout + add only
                    const int64_t rows = 7, cols = with_bias ? 12 : 13, n = rows * cols;
                    const std::vector<uint16_t> x16 = encode16(dt, random_floats(n, 31, -4, 4));
                    const std::vector<uint16_t> r16 = encode16(dt, random_floats(n, 32, -4, 4));
                    std::vector<float> bias32 = random_floats(cols, 33, -1, 1);
                    if (!std::is_same_v<W, st::F32>) bias32 = mwb::test::rounded16(dt, bias32);
                    const std::vector<float> x = decode16(dt, x16), r = decode16(dt, r16);
                    std::vector<typename W::type> bias(cols);
                    for (int64_t c = 0; c < cols; ++c) {
                        if constexpr (std::is_same_v<W, st::F32>)
                            bias[c] = bias32[c];
                        else
                            bias[c] = encode16(dt, {bias32[c]})[0];
                    }
                    const ew::DropoutArgs args{rng, mwb::dropout_keep_threshold(p), 1.0f / (1.0f - p), offset, n, 1};
                    const int64_t groups = ((offset + n - 1) >> 2) - (offset >> 2) + 1;
                    Buffer16 px(x16, 0), pr(r16, 0), out(std::vector<uint16_t>(n), 0);
                    const bool wide = offset % 4 == 0 && cols % 4 == 0;  // the buffers are aligned
                    const auto* base = with_base ? pr.data() : nullptr;
                    const auto* b = with_bias ? bias.data() : nullptr;
                    const int64_t bias_cols = with_bias ? cols : 4;
                    if (wide)
                        emu::launch(blocks(groups), 1, 64, [&] { ew::k_dropout<true, S, W>(out.data(), base, px.data(), b, bias_cols, args); });
                    else
                        emu::launch(blocks(groups), 1, 64, [&] { ew::k_dropout<false, S, W>(out.data(), base, px.data(), b, bias_cols, args); });
                    std::vector<float> want(n);
                    emu::launch(blocks(groups), 1, 64, [&] {
                        ew::k_dropout<false, st::F32, st::F32>(want.data(), with_base ? r.data() : nullptr, x.data(),
                                                               with_bias ? bias32.data() : nullptr, bias_cols, args);
                    });
                    const std::vector<uint16_t> got = out.values(n);
                    QCOMPARE(got, encode16(dt, want));
                    // The CPU op on the same values, rounded after: its masks (Philox, the same draws) and sums.
                    std::vector<float> cpu(n);
                    std::vector<float> xs = x, rs = r;
                    mwb::OpContext ctx;
                    const auto v = [&](std::vector<float>& t) { return mwb::view_f32(t.data(), {rows, cols}); };
                    if (with_bias)
                        mwb::ops::bias_dropout_add_forward(ctx, v(cpu), v(rs), v(xs), mwb::view_f32(bias32.data(), {cols}),
                                                           p, rng, offset);
                    else if (with_base)
                        mwb::ops::dropout_add_forward(ctx, v(cpu), v(rs), v(xs), p, rng, offset);
                    else
                        mwb::ops::dropout_forward(ctx, v(cpu), v(xs), p, rng, offset);
                    QVERIFY2(max_ulp16(got, encode16(dt, cpu)) <= 1, "dropout: more than one 16-bit step from the CPU op");
                }
            }
        }
    }

    static unsigned blocks(int64_t groups) { return static_cast<unsigned>(std::min<int64_t>(3, (groups + 63) / 64)); }
};

MWB_TEST_SUITE_APPLESS(test_kernels_elementwise_emulated, TestElementwiseEmulated)
}  // namespace test_kernels_elementwise_emulated
#include "test_elementwise_emulated.moc"
