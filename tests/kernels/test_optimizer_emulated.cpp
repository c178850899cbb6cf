// CUDA's AdamW kernel (kernels/cuda/optimizer_kernels.cuh) executed on CPU threads by cuda_emulation.h,
// launched as ops_elementwise.cu launches it: the 16-byte aligned bulk in 16-byte accesses (V = 4, or
// 8 when the gradient or the weights' copy is 16-bit) and the tail one element at a time, for
// gradients stored as f32, bf16 or f16 and no copy, an f32 copy holding 16-bit values, or a bf16/f16
// copy (the 16-bit weights' arena). Checked: the same bits as one element per access (elementwise),
// on aligned and misaligned pointers with tails; the CPU op's values to rounding (the CPU build
// contracts to FMA under -march=native, the kernel here does not: a few ulp); the weights' copy is the
// kernel's own weights rounded by precision.h, bit for bit; a 16-bit gradient gives the bits of the
// f32 gradient holding its widened values (kernel and CPU op alike); zero_grad writes zeros of the
// gradient's dtype; the step's parameter block giving the bits of the same constants as launch
// arguments (decayed and not); gradient_scale's multiplier, and its found_inf writing nothing. Grids
// small enough that the grid-stride loops wrap. No GPU.
#include "cuda_emulation.h"

#include "emulated_storage.h"
#include "optimizer_kernels.cuh"

#include "mwb/kernels/ops.h"
#include "mwb/kernels/precision.h"
#include "support/qt_checks.h"
#include "support/reference.h"
#include "support/suite.h"

#include <QtTest>

#include <algorithm>
#include <vector>

namespace test_kernels_optimizer_emulated {

namespace opt = mwb::cuda::optimizer;
namespace st = mwb::cuda::storage;
namespace emu = mwb::emulation;
using namespace mwb;
using mwb::test::decode16;
using mwb::test::encode16;
using mwb::test::max_rel_error;
using mwb::test::max_ulp16;
using mwb::test::random_floats;
using mwb::test::rounded16;

namespace {

/// The launcher's rounding functor of an f32 copy, with the CPU's rounding (F32: as is).
struct Round {
    DType dtype;
    float operator()(float x) const {
        return dtype == DType::BF16 ? round_to_bf16(x) : dtype == DType::F16 ? round_to_fp16(x) : x;
    }
};

/// What one update reads and writes besides the fp32 arrays: the gradient's storage, and the copy's
/// (`none`: no copy; copy F32 with copy_dtype 16-bit: an f32 array holding the rounding).
struct Setup {
    DType grad = DType::F32;
    bool none = true;
    DType copy = DType::F32, copy_dtype = DType::F32;
    QString name() const {
        return QStringLiteral("grad %1, copy %2 (%3)")
            .arg(QString::fromLatin1(dtype_name(grad)), QString::fromLatin1(none ? "none" : dtype_name(copy)),
                 QString::fromLatin1(dtype_name(copy_dtype)));
    }
};

std::vector<Setup> setups() {
    std::vector<Setup> out;
    for (DType g : {DType::F32, DType::BF16, DType::F16}) {
        out.push_back({g, true, DType::F32, DType::F32});
        out.push_back({g, false, DType::F32, DType::BF16});
        out.push_back({g, false, DType::BF16, DType::BF16});
        out.push_back({g, false, DType::F16, DType::F16});
    }
    return out;
}

/// The arrays, `at` elements into each buffer (at = 1: every pointer misaligned for 16-byte accesses).
/// A 16-bit gradient or copy lives in g16/copy16, an f32 one in g/copy.
struct State {
    int64_t n = 0, at = 0;
    std::vector<float> w, g, m, v, copy;
    std::vector<uint16_t> g16, copy16;

    /// The gradient's values (a 16-bit one widened exactly).
    std::vector<float> grads(DType dt) const {
        if (dt == DType::F32) return {g.begin() + at, g.end()};
        return decode16(dt, {g16.begin() + at, g16.end()});
    }
    /// The copy's values (a 16-bit one widened exactly).
    std::vector<float> copied(DType dt) const {
        if (dt == DType::F32) return {copy.begin() + at, copy.end()};
        return decode16(dt, {copy16.begin() + at, copy16.end()});
    }
    static std::vector<float> tail(const std::vector<float>& x, int64_t at) { return {x.begin() + at, x.end()}; }
    std::vector<float> weights() const { return tail(w, at); }
    /// Every array's values after `at`, the gradient and copy read as `s` stores them.
    std::vector<float> all(const Setup& s) const {
        std::vector<float> r = weights();
        for (const auto& x : {tail(m, at), tail(v, at), grads(s.grad), copied(s.copy)}) r.insert(r.end(), x.begin(), x.end());
        return r;
    }
};

/// The same n values whatever `at`, after `at` others; a 16-bit gradient holds the f32 draws rounded
/// (so `grads` of the f32 state made with `widened` gives the same values).
State initial(int64_t n, DType grad, int64_t at = 0) {
    const auto draw = [&](uint32_t seed, float lo, float hi) {
        std::vector<float> x = random_floats(n, seed, lo, hi);
        x.insert(x.begin(), at, 7.0f);
        return x;
    };
    State s{n, at, draw(21, -1, 1), draw(22, -3, 3), draw(23, -0.1f, 0.1f), draw(24, 0, 0.01f),
            std::vector<float>(n + at, 9.0f), {}, std::vector<uint16_t>(n + at, 0x1234)};
    if (grad != DType::F32) s.g16 = encode16(grad, s.g);
    return s;
}

/// The f32 state holding the widened values of `s`'s 16-bit gradient.
State widened(State s, DType grad) {
    if (grad != DType::F32) s.g = decode16(grad, s.g16);
    s.g16.clear();
    return s;
}

AdamWParams hyper(int64_t step) {
    AdamWParams p;
    p.lr = 3e-3f;
    p.beta1 = 0.9f;
    p.beta2 = 0.95f;
    p.eps = 1e-8f;
    p.weight_decay = 0.1f;
    p.step = step;
    p.grad_scale = 0.5f;
    return p;
}

template <class S>
typename S::type* array(std::vector<float>& f32, std::vector<uint16_t>& bits, int64_t at) {
    if constexpr (sizeof(typename S::type) == 2) return bits.data() + at;
    else return f32.data() + at;
}

/// As ops_elementwise.cu's adamw_update: V (8 when a 16-bit array takes part, else 4) over the
/// multiple-of-V bulk when every pointer is 16-byte aligned (and `vectorised`), V = 1 over the tail;
/// everything with V = 1 otherwise.
void emulated(State& s, const AdamWParams& p, const Setup& setup, const float* scale, const double* block,
              bool vectorised = true) {
    const int64_t n = s.n;
    const AdamWConstants k = adamw_constants(p);
    const opt::AdamArgs a{p.beta1, p.beta2, k.step_size, k.inv_sqrt_bc2, k.decay, p.grad_scale, p.eps, p.zero_grad};
    const bool decays = p.weight_decay != 0.0f;
    const Round round{setup.none || setup.copy != DType::F32 ? DType::F32 : setup.copy_dtype};
    st::with_storages(setup.grad, setup.none ? DType::F32 : setup.copy, [&](auto sg, auto sc) {
        using SG = decltype(sg);
        using SC = decltype(sc);
        constexpr int V = st::any_16bit<SG, SC> ? 8 : 4;
        float *w = s.w.data() + s.at, *m = s.m.data() + s.at, *v = s.v.data() + s.at;
        typename SG::type* g = array<SG>(s.g, s.g16, s.at);
        typename SC::type* copy = setup.none ? nullptr : array<SC>(s.copy, s.copy16, s.at);
        const bool wide = vectorised && st::aligned_to(16, w, m, v, g, copy);
        const int64_t bulk = wide ? n / V * V : 0;
        if (bulk > 0)
            emu::launch(3, 1, 64, [&] {
                opt::k_adamw<V, uint32_t, SG, SC>(w, g, m, v, copy, bulk, a, scale, block, decays, round);
            });
        if (n > bulk)
            emu::launch(2, 1, 32, [&] {
                opt::k_adamw<1, int64_t, SG, SC>(w + bulk, g + bulk, m + bulk, v + bulk, copy ? copy + bulk : nullptr,
                                                 n - bulk, a, scale, block, decays, round);
            });
    });
}

/// The CPU op on the same arrays.
void on_cpu(State& s, const AdamWParams& p, const Setup& setup) {
    const int64_t n = s.n;
    const auto view = [&](std::vector<float>& f32, std::vector<uint16_t>& bits, DType dt) {
        void* data = dt == DType::F32 ? static_cast<void*>(f32.data() + s.at) : static_cast<void*>(bits.data() + s.at);
        return make_view(data, dt, {n}, Device::CPU);
    };
    std::vector<uint16_t> none;
    OpContext ctx;
    ops::adamw_update(ctx, view(s.w, none, DType::F32), view(s.g, s.g16, setup.grad), view(s.m, none, DType::F32),
                      view(s.v, none, DType::F32), p,
                      setup.none ? TensorView{} : view(s.copy, s.copy16, setup.copy), setup.copy_dtype);
}

std::vector<double> wide(const std::vector<float>& x) {
    return {x.begin(), x.end()};
}

}  // namespace

class TestOptimizerEmulated : public QObject {
    Q_OBJECT
private slots:
    void adamw_kernel_is_elementwise_and_the_cpu_update() {
        for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{4099}})
            for (const Setup& setup : setups())
                for (bool zero : {false, true}) {
                    const int64_t step = zero ? 9 : 1;
                    AdamWParams p = hyper(step);
                    p.zero_grad = zero;
                    const QString where = QStringLiteral("n %1, %2, zero_grad %3").arg(n).arg(setup.name()).arg(int(zero));
                    State vec = initial(n, setup.grad), one = vec, shifted = initial(n, setup.grad, 1), cpu = vec;
                    emulated(vec, p, setup, nullptr, nullptr);
                    emulated(one, p, setup, nullptr, nullptr, /*vectorised=*/false);
                    emulated(shifted, p, setup, nullptr, nullptr);  // misaligned: one element at a time
                    MWB_VERIFY_BITWISE(vec.all(setup), one.all(setup));
                    MWB_VERIFY_BITWISE(shifted.all(setup), one.all(setup));
                    on_cpu(cpu, p, setup);
                    // A few ulp of contraction: the weights, and m relative to the size of its
                    // terms (β1·m and (1 − β1)·g are ~0.1 here; m itself cancels towards 0).
                    MWB_VERIFY_ERROR(max_rel_error(vec.weights(), wide(cpu.weights())), 1e-6);
                    MWB_VERIFY_ERROR(max_rel_error(State::tail(vec.m, 0), wide(cpu.m), 0.1), 1e-6);
                    MWB_VERIFY_ERROR(max_rel_error(State::tail(vec.v, 0), wide(cpu.v), 1e-9), 1e-6);
                    // zero_grad: zeros of the gradient's dtype (+0 bits); else the gradient untouched.
                    const std::vector<float> g0 = initial(n, setup.grad).grads(setup.grad);
                    MWB_VERIFY_BITWISE(vec.grads(setup.grad), zero ? std::vector<float>(n, 0.0f) : g0);
                    if (setup.grad != DType::F32 && zero)
                        QVERIFY2(std::all_of(vec.g16.begin(), vec.g16.end(), [](uint16_t h) { return h == 0; }),
                                 qPrintable(where));
                    if (setup.none) {
                        MWB_VERIFY_BITWISE(vec.copied(DType::F32), std::vector<float>(n, 9.0f));  // untouched
                        continue;
                    }
                    // The copy: the kernel's own weights rounded by precision.h (an independent rounding).
                    MWB_VERIFY_BITWISE(vec.copied(setup.copy), rounded16(setup.copy_dtype, vec.weights()));
                    // The CPU's copy of its (a few ulp apart) weights: the same 16-bit value or a neighbour.
                    const std::vector<uint16_t> gpu_bits = encode16(setup.copy_dtype, vec.copied(setup.copy)),
                                                cpu_bits = encode16(setup.copy_dtype, cpu.copied(setup.copy));
                    QVERIFY2(max_ulp16(gpu_bits, cpu_bits) <= 1, qPrintable(where));
                }
    }

    /// A 16-bit gradient is its widened values: the kernel, and the CPU op, give the bits of the f32
    /// gradient holding them, for every copy; scaled by gradient_scale's multiplier too.
    void sixteen_bit_gradients_are_their_widened_values() {
        const std::vector<float> scale = {0.25f, 0.0f};
        for (int64_t n : {int64_t{13}, int64_t{2051}})
            for (const Setup& setup : setups()) {
                if (setup.grad == DType::F32) continue;
                Setup f32 = setup;
                f32.grad = DType::F32;
                AdamWParams p = hyper(3);
                p.zero_grad = false;
                State k16 = initial(n, setup.grad), k32 = widened(k16, setup.grad), c16 = k16, c32 = k32;
                emulated(k16, p, setup, scale.data(), nullptr);
                emulated(k32, p, f32, scale.data(), nullptr);
                MWB_VERIFY_BITWISE(k16.all(setup), k32.all(f32));
                on_cpu(c16, p, setup);
                on_cpu(c32, p, f32);
                MWB_VERIFY_BITWISE(c16.all(setup), c32.all(f32));
                // Not trivially so: the update moved the weights.
                QVERIFY(max_rel_error(k16.weights(), wide(initial(n, setup.grad).weights())) > 1e-4);
            }
    }

    void adamw_kernel_reads_the_step_block_and_the_device_scale() {
        const int64_t n = 2051;
        const AdamWParams p = hyper(5);
        const AdamWConstants k = adamw_constants(p);
        const std::vector<double> block = {k.step_size, k.inv_sqrt_bc2, k.decay, 512.0};
        AdamWParams stale = p;  // the block's values win over these
        stale.lr = 1.0f;
        stale.step = 1;
        const Setup bf16_copy{DType::BF16, false, DType::BF16, DType::BF16};
        for (float decay : {0.1f, 0.0f}) {
            stale.weight_decay = decay;  // 0: this range does not decay
            AdamWParams want = p;
            want.weight_decay = decay;
            const std::vector<float> scale = {0.25f, 0.0f};
            State from_block = initial(n, DType::BF16), from_args = initial(n, DType::BF16);
            emulated(from_block, stale, bf16_copy, scale.data(), block.data());
            emulated(from_args, want, bf16_copy, scale.data(), nullptr);
            MWB_VERIFY_BITWISE(from_block.all(bf16_copy), from_args.all(bf16_copy));
        }
        // The block's constants were used: the stale learning rate would have moved the weights far.
        const Setup plain{};
        State stale_args = initial(n, DType::F32), from_block = initial(n, DType::F32);
        emulated(stale_args, stale, plain, nullptr, nullptr);
        emulated(from_block, stale, plain, nullptr, block.data());
        QVERIFY(max_rel_error(stale_args.weights(), wide(from_block.weights())) > 1e-2);
        // found_inf: nothing is written, the gradients included (f32 and 16-bit ones).
        const std::vector<float> skip = {0.25f, 1.0f};
        AdamWParams zeroing = p;
        zeroing.zero_grad = true;
        for (const Setup& setup : {Setup{DType::F32, false, DType::F32, DType::F16}, Setup{DType::F16, false, DType::F16, DType::F16}}) {
            State skipped = initial(n, setup.grad);
            emulated(skipped, zeroing, setup, skip.data(), block.data());
            MWB_VERIFY_BITWISE(skipped.all(setup), initial(n, setup.grad).all(setup));
        }
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_optimizer_emulated, TestOptimizerEmulated)
}  // namespace test_kernels_optimizer_emulated
#include "test_optimizer_emulated.moc"
