// CUDA's AdamW kernel (kernels/cuda/optimizer_kernels.cuh) executed on CPU threads by cuda_emulation.h,
// launched as ops_elementwise.cu launches it: the 16-byte aligned bulk with 128-bit accesses (V = 4)
// and the tail one float at a time. The same bits as one float per access (elementwise); the CPU op's
// values to rounding (the CPU build contracts to FMA under -march=native, the kernel here does not:
// a few ulp); the weights' bf16/fp16 copy the rounding of the kernel's own weights, bit for bit;
// zero_grad; the step's parameter block giving the bits of the same constants as launch arguments
// (decayed and not); gradient_scale's multiplier, and its found_inf writing nothing. Grids small
// enough that the grid-stride loops wrap. No GPU.
#include "cuda_emulation.h"

#include "optimizer_kernels.cuh"

#include "mwb/kernels/ops.h"
#include "mwb/kernels/precision.h"
#include "support/qt_checks.h"
#include "support/reference.h"

#include <QtTest>

#include <vector>

namespace opt = mwb::cuda::optimizer;
namespace emu = mwb::emulation;
using namespace mwb;
using mwb::test::max_rel_error;
using mwb::test::random_floats;

namespace {

/// The launcher's rounding functor, with the CPU's rounding.
struct Round {
    DType dtype;
    float operator()(float x) const {
        return dtype == DType::BF16 ? round_to_bf16(x) : dtype == DType::F16 ? round_to_fp16(x) : x;
    }
};

struct State {
    std::vector<float> w, g, m, v, copy;
    std::vector<float> all() const {
        std::vector<float> r = w;
        for (const auto* p : {&g, &m, &v, &copy}) r.insert(r.end(), p->begin(), p->end());
        return r;
    }
};

State initial(int64_t n) {
    State s{random_floats(n, 21), random_floats(n, 22, -3, 3), random_floats(n, 23, -0.1f, 0.1f),
            random_floats(n, 24, 0, 0.01f), std::vector<float>(n, 9.0f)};
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

/// As ops_elementwise.cu's adamw_update: V = 4 over the multiple-of-4 bulk (`wide`), V = 1 over the
/// tail; everything with V = 1 otherwise.
void emulated(State& s, const AdamWParams& p, DType copy_dtype, const float* scale, const double* block,
              bool wide = true) {
    const int64_t n = static_cast<int64_t>(s.w.size());
    const AdamWConstants k = adamw_constants(p);
    const opt::AdamArgs a{p.beta1, p.beta2, k.step_size, k.inv_sqrt_bc2, k.decay, p.grad_scale, p.eps, p.zero_grad};
    float* copy = copy_dtype == DType::F32 ? nullptr : s.copy.data();
    const bool decays = p.weight_decay != 0.0f;
    const int64_t bulk = wide ? n / 4 * 4 : 0;
    if (bulk > 0)
        emu::launch(3, 1, 64, [&] {
            opt::k_adamw<4, uint32_t>(s.w.data(), s.g.data(), s.m.data(), s.v.data(), copy, bulk, a, scale, block,
                                      decays, Round{copy_dtype});
        });
    if (n > bulk)
        emu::launch(2, 1, 32, [&] {
            opt::k_adamw<1, int64_t>(s.w.data() + bulk, s.g.data() + bulk, s.m.data() + bulk, s.v.data() + bulk,
                                     copy ? copy + bulk : nullptr, n - bulk, a, scale, block, decays,
                                     Round{copy_dtype});
        });
}

void on_cpu(State& s, const AdamWParams& p) {
    const auto view = [](std::vector<float>& x) { return view_f32(x.data(), {static_cast<int64_t>(x.size())}); };
    OpContext ctx;
    ops::adamw_update(ctx, view(s.w), view(s.g), view(s.m), view(s.v), p);
}

std::vector<double> wide(const std::vector<float>& x) {
    return {x.begin(), x.end()};
}

}  // namespace

class TestOptimizerEmulated : public QObject {
    Q_OBJECT
private slots:
    void adamw_kernel_is_elementwise_and_the_cpu_update() {
        for (int64_t n : {int64_t{1}, int64_t{6}, int64_t{1027}, int64_t{4099}})
            for (DType copy : {DType::F32, DType::BF16, DType::F16})
                for (bool zero : {false, true})
                    for (int64_t step : {int64_t{1}, int64_t{9}}) {
                        AdamWParams p = hyper(step);
                        p.zero_grad = zero;
                        State vec = initial(n), one = initial(n), cpu = initial(n);
                        emulated(vec, p, copy, nullptr, nullptr);
                        emulated(one, p, copy, nullptr, nullptr, /*wide=*/false);
                        MWB_VERIFY_BITWISE(vec.all(), one.all());
                        on_cpu(cpu, p);
                        // A few ulp of contraction: the weights, and m relative to the size of its
                        // terms (β1·m and (1 − β1)·g are ~0.1 here; m itself cancels towards 0).
                        MWB_VERIFY_ERROR(max_rel_error(vec.w, wide(cpu.w)), 1e-6);
                        MWB_VERIFY_ERROR(max_rel_error(vec.m, wide(cpu.m), 0.1), 1e-6);
                        MWB_VERIFY_ERROR(max_rel_error(vec.v, wide(cpu.v), 1e-9), 1e-6);
                        MWB_VERIFY_BITWISE(vec.g, zero ? std::vector<float>(n, 0.0f) : initial(n).g);
                        if (copy == DType::F32) continue;
                        std::vector<float> rounded = vec.w;  // the copy: the kernel's own weights, rounded
                        for (float& x : rounded) x = Round{copy}(x);
                        MWB_VERIFY_BITWISE(vec.copy, rounded);
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
        for (float decay : {0.1f, 0.0f}) {
            stale.weight_decay = decay;  // 0: this range does not decay
            AdamWParams want = p;
            want.weight_decay = decay;
            const std::vector<float> scale = {0.25f, 0.0f};
            State from_block = initial(n), from_args = initial(n);
            emulated(from_block, stale, DType::BF16, scale.data(), block.data());
            emulated(from_args, want, DType::BF16, scale.data(), nullptr);
            MWB_VERIFY_BITWISE(from_block.all(), from_args.all());
        }
        // The block's constants were used: the stale learning rate would have moved the weights far.
        State stale_args = initial(n), from_block = initial(n);
        emulated(stale_args, stale, DType::F32, nullptr, nullptr);
        emulated(from_block, stale, DType::F32, nullptr, block.data());
        QVERIFY(max_rel_error(stale_args.w, wide(from_block.w)) > 1e-2);
        // found_inf: nothing is written, the gradients included.
        const std::vector<float> skip = {0.25f, 1.0f};
        AdamWParams zeroing = p;
        zeroing.zero_grad = true;
        State skipped = initial(n);
        emulated(skipped, zeroing, DType::F16, skip.data(), block.data());
        MWB_VERIFY_BITWISE(skipped.all(), initial(n).all());
    }
};

QTEST_APPLESS_MAIN(TestOptimizerEmulated)
#include "test_optimizer_emulated.moc"
