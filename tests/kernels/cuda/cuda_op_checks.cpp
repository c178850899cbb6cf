// CUDA ops against the CPU ops (their twins, themselves tested against float64 references) on random
// inputs, Llama's (SwiGLU, RoPE, grouped-query attention) included. Errors are normwise:
// max|gpu − cpu| / max|cpu| per output tensor. Tolerances: fp32 1e-5 (5e-5 where long sums meet a
// different exp: attention backward), bf16 GEMM inputs 1e-2 (the cuBLASLt epilogues' too); dropout
// masks and storage rounding bit for bit; deterministic mode bit-identical across two runs. 16-bit
// views (bf16, f16): each non-GEMM op on them bit for bit against the same op on f32 views of the same
// values rounded after (storage_16bit), the GEMMs writing 16-bit results against the CPU (1e-2),
// AdamW's 16-bit gradients and weights' copy bit for bit against its f32 path (adamw_16bit), the ops
// accumulating into an f16 gradient arena against the CPU ops on the same bits (f16_gradients).
#include "cuda_op_checks.h"

#include "mwb/kernels/device.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"
#include "mwb/kernels/philox.h"
#include "mwb/kernels/precision.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>

namespace mwb::test {

namespace {

// ---- device buffers mirrored by host vectors ------------------------------------------------------

/// A view of `data` with a shape held as a vector (the buffers below keep theirs).
TensorView view_of(void* data, DType dtype, Device device, const std::vector<int64_t>& shape) {
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.device = device;
    v.ndim = static_cast<int>(shape.size());
    for (int i = 0; i < v.ndim; ++i) v.shape[i] = shape[static_cast<size_t>(i)];
    return v;
}

/// A tensor in both places: `host` is what the CPU op works on, `dev` what the CUDA op works on.
class Twin {
public:
    Twin(std::vector<float> values, std::initializer_list<int64_t> shape) : host_(std::move(values)), shape_(shape) {
        bytes_ = static_cast<int64_t>(host_.size()) * 4;
        dev_ = device::cuda_malloc(std::max<int64_t>(bytes_, 4));
        device::copy_to_device(dev_, host_.data(), bytes_);
    }
    Twin(const Twin&) = delete;
    Twin& operator=(const Twin&) = delete;
    ~Twin() { device::cuda_free(dev_); }

    TensorView cpu() { return view(host_.data(), Device::CPU, DType::F32); }
    TensorView gpu() { return view(dev_, Device::CUDA, DType::F32); }
    std::vector<float>& host() { return host_; }
    /// The device contents, read back.
    std::vector<float> device_values() const {
        std::vector<float> out(host_.size());
        device::copy_to_host(out.data(), dev_, bytes_);
        return out;
    }
    /// Ids: the same bytes reinterpreted as i32 tensors.
    TensorView cpu_i32() { return view(host_.data(), Device::CPU, DType::I32); }
    TensorView gpu_i32() { return view(dev_, Device::CUDA, DType::I32); }

private:
    TensorView view(void* data, Device d, DType t) const { return view_of(data, t, d, shape_); }
    std::vector<float> host_;
    std::vector<int64_t> shape_;
    void* dev_ = nullptr;
    int64_t bytes_ = 0;
};

std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = dist(gen);
    return v;
}

std::vector<float> ids_as_floats(const std::vector<int32_t>& ids) {
    std::vector<float> v(ids.size());
    std::memcpy(v.data(), ids.data(), ids.size() * 4);
    return v;
}

std::vector<int32_t> random_ids(int64_t n, int32_t lo, int32_t hi, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = dist(gen);
    return v;
}

/// Collects the worst normwise error over a check's outputs.
struct Compare {
    double worst = 0;
    std::string which = "-";

    void values(const std::string& name, const std::vector<float>& gpu, const std::vector<float>& cpu) {
        double diff = 0, scale = 0;
        bool bad = gpu.size() != cpu.size();
        for (size_t i = 0; i < cpu.size() && !bad; ++i) {
            if (std::isnan(cpu[i]) != std::isnan(gpu[i])) bad = true;
            if (std::isnan(cpu[i])) continue;
            diff = std::max(diff, std::abs(static_cast<double>(gpu[i]) - cpu[i]));
            scale = std::max(scale, std::abs(static_cast<double>(cpu[i])));
        }
        const double e = bad ? std::numeric_limits<double>::infinity() : (scale > 0 ? diff / scale : diff);
        if (which == "-" || e > worst) {
            worst = std::max(worst, e);
            which = name;
        }
    }
    void twin(const std::string& name, Twin& t) { values(name, t.device_values(), t.host()); }

    /// Bit-for-bit: error is the number of differing elements.
    void bits(const std::string& name, const std::vector<float>& gpu, const std::vector<float>& cpu) {
        int64_t differ = gpu.size() == cpu.size() ? 0 : 1;
        for (size_t i = 0; i < cpu.size() && i < gpu.size(); ++i)
            differ += std::bit_cast<uint32_t>(gpu[i]) != std::bit_cast<uint32_t>(cpu[i]);
        if (differ > 0 && static_cast<double>(differ) >= worst) {
            worst = static_cast<double>(differ);
            which = name + fmt::format(" ({} elements differ)", differ);
        }
    }
};

OpContext cpu_ctx() { return OpContext{Device::CPU, nullptr}; }
OpContext gpu_ctx() { return OpContext{Device::CUDA, nullptr}; }

using CheckFn = std::function<Compare()>;
struct CheckDef {
    CheckFn fn;
    double tolerance;
};

// ---- the checks -----------------------------------------------------------------------------------

Compare check_elementwise() {
    auto c = cpu_ctx(), g = gpu_ctx();
    Compare cmp;
    Twin a(random_floats(3001, 1), {3001}), b(random_floats(3001, 2), {3001}), out(std::vector<float>(3001), {3001});
    for (auto* ctx : {&c, &g}) {
        const bool dev = ctx == &g;
        ops::add(*ctx, dev ? out.gpu() : out.cpu(), dev ? a.gpu() : a.cpu(), dev ? b.gpu() : b.cpu());
        ops::scale(*ctx, dev ? out.gpu() : out.cpu(), 0.37f);
        ops::copy(*ctx, dev ? a.gpu() : a.cpu(), dev ? out.gpu() : out.cpu());
        ops::fill(*ctx, dev ? b.gpu() : b.cpu(), -2.5f);
    }
    cmp.twin("add·scale", out);
    cmp.twin("copy", a);
    cmp.twin("fill", b);
    // fill_from: the value read where the kernel runs (a step block's GradScale: a float in a double).
    Twin from(std::vector<float>(3001), {3001});
    double value = static_cast<float>(65536.0 / 3.0);
    void* device_value = device::cuda_malloc(sizeof(double));
    device::copy_to_device(device_value, &value, sizeof(double));
    ops::fill_from(c, from.cpu(), make_view(&value, DType::F64, {1}), 3001.0f);
    ops::fill_from(g, from.gpu(), make_view(device_value, DType::F64, {1}, Device::CUDA), 3001.0f);
    cmp.twin("fill_from", from);
    device::synchronize();
    device::cuda_free(device_value);
    // Host <-> device copies through ops::copy.
    std::vector<float> back(3001);
    ops::copy(g, view_f32(back.data(), {3001}), out.gpu());
    cmp.values("copy to host", back, out.host());
    return cmp;
}

Compare check_round_to() {
    // Random values over many binades plus the special cases: bit-exact with precision.h.
    std::vector<float> v = random_floats(4096, 3, -1.0f, 1.0f);
    std::mt19937 gen(4);
    for (auto& x : v) x = std::ldexp(x, static_cast<int>(gen() % 80) - 40);
    const float specials[] = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, -3e-7f, 6e-5f,
                              std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                              3.3895314e38f, 1.0039062f};
    std::copy(std::begin(specials), std::end(specials), v.begin());
    Compare cmp;
    for (DType t : {DType::BF16, DType::F16}) {
        Twin x(v, {static_cast<int64_t>(v.size())});
        auto c = cpu_ctx(), g = gpu_ctx();
        ops::round_to(c, x.cpu(), t);
        ops::round_to(g, x.gpu(), t);
        cmp.bits(fmt::format("round_to {}", dtype_name(t)), x.device_values(), x.host());
    }
    return cmp;
}

Compare check_sum_squares() {
    Twin x(random_floats(100003, 5), {100003});
    auto c = cpu_ctx(), g = gpu_ctx();
    const double hc = ops::sum_squares(c, x.cpu()), hg = ops::sum_squares(g, x.gpu());
    Compare cmp;
    cmp.values("sum_squares", {static_cast<float>(hg)}, {static_cast<float>(hc)});
    // In double: the two differ only by summation order.
    if (std::abs(hg - hc) / hc > 1e-12) cmp.values("sum_squares (double)", {1.0f}, {0.0f});
    return cmp;
}

/// The training step's norm and clip on the device: sum_squares_ranges over ragged ranges with gaps
/// and an empty one has the bits of the GPU's own per-range sum_squares summed in order (and the CPU's
/// value to reassociation), gradient_scale the CPU's bits, and adamw_update with that scale the bits of
/// the same multiplier in p.grad_scale, and writes nothing when found_inf is set.
Compare check_gradient_norm() {
    const int64_t n = 5 * 16384 + 321;
    Twin x(random_floats(n, 140, -3, 3), {n});
    const std::vector<IndexRange> ranges = {{0, 7}, {20, 2 * 16384 + 3}, {40000, 0}, {40000, 16384 + 11},
                                            {3 * 16384 + 9, 16384 * 2}};
    auto c = cpu_ctx(), g = gpu_ctx();
    double per_range = 0;
    for (const IndexRange& r : ranges) per_range += ops::sum_squares(g, slice_1d(x.gpu(), r.first, r.count));
    void* dev = device::cuda_malloc(8);
    const TensorView sumsq_gpu = make_view(dev, DType::F64, {1}, Device::CUDA);
    ops::sum_squares_ranges(g, sumsq_gpu, x.gpu(), ranges);
    double on_gpu = ops::read_f64(g, sumsq_gpu)[0];
    double on_cpu = 0;
    ops::sum_squares_ranges(c, make_view(&on_cpu, DType::F64, {1}), x.cpu(), ranges);
    Compare cmp;
    if (std::bit_cast<uint64_t>(on_gpu) != std::bit_cast<uint64_t>(per_range))
        cmp.values("sum_squares_ranges vs per-range sum_squares (bits)", {1.0f}, {0.0f});
    if (std::abs(on_gpu - on_cpu) / on_cpu > 1e-12)
        cmp.values("sum_squares_ranges vs the CPU (double)", {1.0f}, {0.0f});
    {
        // An f16 gradient arena (fp16 without accumulate_allreduce_grads_in_fp32): the CPU's Σ x² of the
        // same fp16 bits, to reassociation in double.
        std::vector<uint16_t> bits(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = fp16_bits(x.host()[i]);
        void* dev16 = device::cuda_malloc(n * 2);
        device::copy_to_device(dev16, bits.data(), n * 2);
        ops::sum_squares_ranges(g, sumsq_gpu, make_view(dev16, DType::F16, {n}, Device::CUDA), ranges);
        const double f16_gpu = ops::read_f64(g, sumsq_gpu)[0];
        double f16_cpu = 0;
        ops::sum_squares_ranges(c, make_view(&f16_cpu, DType::F64, {1}), make_view(bits.data(), DType::F16, {n}),
                                ranges);
        if (!(std::abs(f16_gpu - f16_cpu) / f16_cpu <= 1e-12))
            cmp.values("sum_squares_ranges of an f16 arena vs the CPU (double)", {1.0f}, {0.0f});
        device::cuda_free(dev16);
        ops::sum_squares_ranges(g, sumsq_gpu, x.gpu(), ranges);  // the f32 sum again for the scale checks
    }
    for (double loss_scale : {1.0, 4096.0}) {
        Twin scale(std::vector<float>(2), {2});
        ops::gradient_scale(g, scale.gpu(), sumsq_gpu, loss_scale, 1.0);
        ops::gradient_scale(c, scale.cpu(), make_view(&on_gpu, DType::F64, {1}), loss_scale, 1.0);
        cmp.bits(fmt::format("gradient_scale at loss scale {}", loss_scale), scale.device_values(), scale.host());
    }
    device::cuda_free(dev);
    for (float found_inf : {0.0f, 1.0f}) {
        const int64_t k = 4099;
        Twin w(random_floats(k, 141), {k}), grad(random_floats(k, 142), {k}), m(std::vector<float>(k, 0.01f), {k});
        Twin v(std::vector<float>(k, 0.02f), {k}), scale(std::vector<float>{0.25f, found_inf}, {2});
        AdamWParams p;
        p.lr = 1e-3f;
        p.zero_grad = true;
        const std::vector<float> w0 = w.host(), g0 = grad.host();
        ops::adamw_update(g, w.gpu(), grad.gpu(), m.gpu(), v.gpu(), p, {}, DType::F32, scale.gpu());
        ops::adamw_update(c, w.cpu(), grad.cpu(), m.cpu(), v.cpu(), p, {}, DType::F32, scale.cpu());
        cmp.twin(fmt::format("adamw with the device scale (found_inf {})", found_inf), w);
        if (found_inf != 0) {
            cmp.bits("adamw skipped: weights", w.device_values(), w0);
            cmp.bits("adamw skipped: gradients", grad.device_values(), g0);
        }
    }
    return cmp;
}

Compare check_matmul_f32() {
    Compare cmp;
    const int64_t M = 67, N = 45, K = 129;
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
            Twin a(random_floats(M * K, 10 + ta), {ta ? K : M, ta ? M : K});
            Twin b(random_floats(K * N, 20 + tb), {tb ? N : K, tb ? K : N});
            Twin cc(random_floats(M * N, 30), {M, N});
            auto c = cpu_ctx(), g = gpu_ctx();
            ops::matmul(c, cc.cpu(), a.cpu(), b.cpu(), ta, tb, 0.75f, 0.5f);
            ops::matmul(g, cc.gpu(), a.gpu(), b.gpu(), ta, tb, 0.75f, 0.5f);
            cmp.twin(fmt::format("matmul ta={} tb={}", ta, tb), cc);
        }
    return cmp;
}

Compare check_matmul_bf16() {
    // bf16 inputs, fp32 accumulation and output; the CPU gets the same bf16-rounded inputs.
    const int64_t M = 128, N = 96, K = 256;
    std::vector<float> av = random_floats(M * K, 40), bv = random_floats(K * N, 41);
    for (auto& x : av) x = round_to_bf16(x);
    for (auto& x : bv) x = round_to_bf16(x);
    Twin a(av, {M, K}), b(bv, {N, K}), out(std::vector<float>(M * N), {M, N});
    void* a16 = device::cuda_malloc(M * K * 2);
    void* b16 = device::cuda_malloc(K * N * 2);
    auto c = cpu_ctx(), g = gpu_ctx();
    TensorView va = make_view(a16, DType::BF16, {M, K}, Device::CUDA), vb = make_view(b16, DType::BF16, {N, K}, Device::CUDA);
    ops::copy(g, va, a.gpu());
    ops::copy(g, vb, b.gpu());
    ops::matmul(c, out.cpu(), a.cpu(), b.cpu(), false, true);
    ops::matmul(g, out.gpu(), va, vb, false, true);
    Compare cmp;
    cmp.twin("matmul bf16", out);
    // The bf16 -> f32 round trip of the converted inputs is exact.
    ops::copy(g, a.gpu(), va);
    cmp.twin("bf16 copy round trip", a);
    device::cuda_free(a16);
    device::cuda_free(b16);
    return cmp;
}

Compare check_bf16_gemm_inputs() {
    // OpContext::gemm_inputs = BF16 on bf16-exact f32 tensors (a bf16-storage run): the same values as
    // the CPU's fp32 GEMMs, only the accumulation differs.
    const int64_t N = 200, in = 192, out = 160;
    auto bf16_values = [](int64_t n, uint32_t seed) {
        std::vector<float> v = random_floats(n, seed);
        for (auto& x : v) x = round_to_bf16(x);
        return v;
    };
    Twin x(bf16_values(N * in, 140), {N, in}), w(bf16_values(out * in, 141), {out, in});
    Twin bias(random_floats(out, 142), {out}), y(std::vector<float>(N * out), {N, out});
    Twin dy(bf16_values(N * out, 143), {N, out}), dx(std::vector<float>(N * in), {N, in});
    Twin dw(random_floats(out * in, 144), {out, in}), c2(std::vector<float>(in * in), {in, in});
    auto c = cpu_ctx(), g = gpu_ctx();
    g.gemm_inputs = DType::BF16;
    for (auto* ctx : {&c, &g}) {
        const bool d = ctx == &g;
        ops::linear_forward(*ctx, d ? y.gpu() : y.cpu(), d ? x.gpu() : x.cpu(), d ? w.gpu() : w.cpu(),
                            d ? bias.gpu() : bias.cpu());
        ops::linear_backward(*ctx, d ? dx.gpu() : dx.cpu(), d ? dw.gpu() : dw.cpu(), {}, d ? dy.gpu() : dy.cpu(),
                             d ? x.gpu() : x.cpu(), d ? w.gpu() : w.cpu(), false);
        ops::matmul(*ctx, d ? c2.gpu() : c2.cpu(), d ? x.gpu() : x.cpu(), d ? x.gpu() : x.cpu(), true, false);
    }
    Compare cmp;
    cmp.twin("linear y (bf16 inputs)", y);
    cmp.twin("linear dx (bf16 inputs)", dx);
    cmp.twin("linear dw (bf16 inputs)", dw);
    cmp.twin("matmul xᵀx (bf16 inputs)", c2);
    return cmp;
}

Compare check_linear() {
    const int64_t N = 70, in = 96, out = 80;
    Compare cmp;
    for (int with_bias = 0; with_bias < 2; ++with_bias) {
        Twin x(random_floats(N * in, 50), {N, in}), w(random_floats(out * in, 51), {out, in});
        Twin bias(random_floats(out, 52), {out}), y(std::vector<float>(N * out), {N, out});
        Twin dy(random_floats(N * out, 53), {N, out}), dx(random_floats(N * in, 54), {N, in});
        Twin dw(random_floats(out * in, 55), {out, in}), db(random_floats(out, 56), {out});
        auto c = cpu_ctx(), g = gpu_ctx();
        ops::linear_forward(c, y.cpu(), x.cpu(), w.cpu(), with_bias ? bias.cpu() : TensorView{});
        ops::linear_forward(g, y.gpu(), x.gpu(), w.gpu(), with_bias ? bias.gpu() : TensorView{});
        ops::linear_backward(c, dx.cpu(), dw.cpu(), with_bias ? db.cpu() : TensorView{}, dy.cpu(), x.cpu(), w.cpu(), true);
        ops::linear_backward(g, dx.gpu(), dw.gpu(), with_bias ? db.gpu() : TensorView{}, dy.gpu(), x.gpu(), w.gpu(), true);
        const std::string tag = with_bias ? " (bias)" : "";
        cmp.twin("linear y" + tag, y);
        cmp.twin("linear dx (accumulated)" + tag, dx);
        cmp.twin("linear dw" + tag, dw);
        if (with_bias) cmp.twin("linear dbias", db);
    }
    // More rows than one column-reduction chunk (256): bias gradient over several partials.
    Twin dy(random_floats(1000 * 33, 57), {1000, 33}), db(random_floats(33, 58), {33});
    Twin x(random_floats(1000 * 8, 59), {1000, 8}), w(random_floats(33 * 8, 60), {33, 8});
    Twin dw(std::vector<float>(33 * 8), {33, 8});
    auto c = cpu_ctx(), g = gpu_ctx();
    ops::linear_backward(c, {}, dw.cpu(), db.cpu(), dy.cpu(), x.cpu(), w.cpu(), false);
    ops::linear_backward(g, {}, dw.gpu(), db.gpu(), dy.gpu(), x.gpu(), w.gpu(), false);
    cmp.twin("dbias over 1000 rows", db);
    cmp.twin("dw over 1000 rows", dw);
    return cmp;
}

/// The linear layers' cuBLASLt epilogues against their CPU twins (the unfused sequence): linear with a
/// bias (BIAS; its backward BGRADB), fc1 + GELU with and without a bias (GELU_AUX_BIAS, GELU_AUX), fc2's
/// backward through GELU' with and without fc1's bias gradient (DGELU_BGRAD, DGELU; BGRADB). Every one
/// of these must have been fused (a refusal counts as an error: the run would be correct but slow);
/// then the cases the epilogues must leave to the unfused path (a bias 4 bytes off alignment, an aux
/// matrix of 100 columns) give the same results. With `bf16`: bf16 GEMM inputs (bf16-exact values)
/// and bf16 storage, whose roundings the fused GELU sees after, not before (held to 1e-2).
Compare check_linear_epilogues(bool bf16) {
    const DType storage = bf16 ? DType::BF16 : DType::F32;
    const auto values = [&](int64_t n, uint32_t seed) {
        std::vector<float> v = random_floats(n, seed);
        if (bf16)
            for (auto& x : v) x = round_to_bf16(x);
        return v;
    };
    auto c = cpu_ctx(), g = gpu_ctx();
    if (bf16) g.gemm_inputs = DType::BF16;
    Compare cmp;
    const auto mlp = [&](int64_t N, int64_t H, int64_t F, bool bias, const std::string& tag) {
        Twin x(values(N * H, 150), {N, H}), w1(values(F * H, 151), {F, H}), b1(random_floats(F, 152), {F});
        Twin w2(values(H * F, 153), {H, F}), b2(random_floats(H, 154), {H}), y(std::vector<float>(N * H), {N, H});
        Twin pre(std::vector<float>(N * F), {N, F}), act(std::vector<float>(N * F), {N, F});
        Twin dy(values(N * H, 155), {N, H}), dpre(std::vector<float>(N * F), {N, F});
        Twin db1(random_floats(F, 156), {F}), dw2(random_floats(H * F, 157), {H, F}), db2(random_floats(H, 158), {H});
        Twin dx(std::vector<float>(N * H), {N, H}), dw1(random_floats(F * H, 159), {F, H});
        for (auto* ctx : {&c, &g}) {
            const bool d = ctx == &g;
            const auto on = [d](Twin& t) { return d ? t.gpu() : t.cpu(); };
            ops::linear_gelu_forward(*ctx, on(act), on(pre), on(x), on(w1), bias ? on(b1) : TensorView{}, storage);
            ops::round_to(*ctx, on(act), storage);
            ops::linear_forward(*ctx, on(y), on(act), on(w2), bias ? on(b2) : TensorView{});
            ops::linear_backward_gelu(*ctx, on(dpre), bias ? on(db1) : TensorView{}, on(dw2),
                                      bias ? on(db2) : TensorView{}, on(dy), on(act), on(w2), on(pre), storage);
            ops::linear_backward(*ctx, on(dx), on(dw1), {}, on(dpre), on(x), on(w1));
        }
        cmp.twin("fc1 pre-activation" + tag, pre);
        cmp.twin("fc1 gelu" + tag, act);
        cmp.twin("fc2 y" + tag, y);
        cmp.twin("dpre" + tag, dpre);
        cmp.twin("fc2 dw" + tag, dw2);
        cmp.twin("fc1 dx" + tag, dx);
        cmp.twin("fc1 dw" + tag, dw1);
        if (bias) {
            cmp.twin("fc1 dbias (DGELU_BGRAD)" + tag, db1);
            cmp.twin("fc2 dbias (BGRADB)" + tag, db2);
        }
    };
    const device::FusedGemmCounts before = device::fused_gemm_counts();
    mlp(96, 64, 256, true, "");
    mlp(520, 64, 128, false, " (no bias)");
    const device::FusedGemmCounts after = device::fused_gemm_counts();
    const int64_t refused = after.unfused - before.unfused;
    if (refused > 0 || after.fused == before.fused)
        cmp.values(fmt::format("epilogues not fused: {} of {}", refused, refused + after.fused - before.fused),
                   {static_cast<float>(std::max<int64_t>(refused, 1))}, {0.0f});
    // The unfused paths: a (100)-column aux matrix (leading dimension not a multiple of 8), a bias
    // 4 bytes off alignment.
    mlp(64, 32, 100, true, " (F = 100, unfused)");
    const int64_t N = 40, in = 32, out = 48;
    Twin x(values(N * in, 160), {N, in}), w(values(out * in, 161), {out, in}), y(std::vector<float>(N * out), {N, out});
    Twin bias(random_floats(out + 1, 162), {out + 1});
    TensorView bc = make_view(bias.host().data() + 1, DType::F32, {out}, Device::CPU);
    TensorView bg = make_view(static_cast<float*>(bias.gpu().data) + 1, DType::F32, {out}, Device::CUDA);
    ops::linear_forward(c, y.cpu(), x.cpu(), w.cpu(), bc);
    ops::linear_forward(g, y.gpu(), x.gpu(), w.gpu(), bg);
    cmp.twin("linear y, bias 4 bytes off alignment (unfused)", y);
    return cmp;
}

Compare check_embedding() {
    const int64_t S = 13, B = 3, H = 40, V = 50, vocab_start = 25;
    const std::vector<int32_t> idv = random_ids(S * B, 0, 100, 60);  // about half fall in [25, 75)
    Twin ids(ids_as_floats(idv), {S * B});
    Twin table(random_floats(V * H, 61), {V, H}), out(std::vector<float>(S * B * H), {S, B, H});
    Twin wpe(random_floats(20 * H, 62), {20, H});
    Twin dout(random_floats(S * B * H, 63), {S, B, H});
    Twin dtable(random_floats(V * H, 64), {V, H}), dwpe(random_floats(20 * H, 65), {20, H});
    auto c = cpu_ctx(), g = gpu_ctx();
    for (auto* ctx : {&c, &g}) {
        const bool d = ctx == &g;
        ops::embedding_forward(*ctx, d ? out.gpu() : out.cpu(), d ? ids.gpu_i32() : ids.cpu_i32(),
                               d ? table.gpu() : table.cpu(), vocab_start);
        ops::position_embedding_forward(*ctx, d ? out.gpu() : out.cpu(), d ? wpe.gpu() : wpe.cpu(), 4);
        ops::embedding_backward(*ctx, d ? dtable.gpu() : dtable.cpu(), d ? dout.gpu() : dout.cpu(),
                                d ? ids.gpu_i32() : ids.cpu_i32(), vocab_start);
        ops::position_embedding_backward(*ctx, d ? dwpe.gpu() : dwpe.cpu(), d ? dout.gpu() : dout.cpu(), 4);
    }
    Compare cmp;
    cmp.twin("embedding + position forward", out);
    cmp.bits("embedding backward (row order, bit for bit)", dtable.device_values(), dtable.host());
    cmp.twin("position embedding backward", dwpe);
    return cmp;
}

void norms_with_f32_dout(Compare& cmp);  // after Device16

Compare check_norms() {
    Compare cmp;
    for (const int64_t rows : {7, 600}) {
        const int64_t H = 200;
        Twin x(random_floats(rows * H, 70, -2, 3), {rows, H}), w(random_floats(H, 71), {H}), b(random_floats(H, 72), {H});
        Twin out(std::vector<float>(rows * H), {rows, H}), mean(std::vector<float>(rows), {rows});
        Twin rstd(std::vector<float>(rows), {rows}), dout(random_floats(rows * H, 73), {rows, H});
        Twin dx(random_floats(rows * H, 74), {rows, H}), dw(random_floats(H, 75), {H}), db(random_floats(H, 76), {H});
        auto c = cpu_ctx(), g = gpu_ctx();
        for (auto* ctx : {&c, &g}) {
            const bool d = ctx == &g;
            ops::layernorm_forward(*ctx, d ? out.gpu() : out.cpu(), d ? mean.gpu() : mean.cpu(),
                                   d ? rstd.gpu() : rstd.cpu(), d ? x.gpu() : x.cpu(), d ? w.gpu() : w.cpu(),
                                   d ? b.gpu() : b.cpu(), 1e-5f);
            ops::layernorm_backward(*ctx, d ? dx.gpu() : dx.cpu(), d ? dw.gpu() : dw.cpu(), d ? db.gpu() : db.cpu(),
                                    d ? dout.gpu() : dout.cpu(), d ? x.gpu() : x.cpu(), d ? mean.gpu() : mean.cpu(),
                                    d ? rstd.gpu() : rstd.cpu(), d ? w.gpu() : w.cpu(), rows == 7);
        }
        const std::string tag = fmt::format(" ({} rows)", rows);
        cmp.twin("layernorm out" + tag, out);
        cmp.twin("layernorm mean" + tag, mean);
        cmp.twin("layernorm rstd" + tag, rstd);
        cmp.twin("layernorm dx" + tag, dx);
        cmp.twin("layernorm dw" + tag, dw);
        cmp.twin("layernorm db" + tag, db);
        for (auto* ctx : {&c, &g}) {
            const bool d = ctx == &g;
            ops::rmsnorm_forward(*ctx, d ? out.gpu() : out.cpu(), d ? rstd.gpu() : rstd.cpu(), d ? x.gpu() : x.cpu(),
                                 d ? w.gpu() : w.cpu(), 1e-6f);
            ops::rmsnorm_backward(*ctx, d ? dx.gpu() : dx.cpu(), d ? dw.gpu() : dw.cpu(), d ? dout.gpu() : dout.cpu(),
                                  d ? x.gpu() : x.cpu(), d ? rstd.gpu() : rstd.cpu(), d ? w.gpu() : w.cpu(), rows != 7);
        }
        cmp.twin("rmsnorm out" + tag, out);
        cmp.twin("rmsnorm dx" + tag, dx);
        cmp.twin("rmsnorm dw" + tag, dw);
    }
    norms_with_f32_dout(cmp);
    return cmp;
}

Compare check_gelu() {
    const int64_t n = 5000;
    std::vector<float> xv = random_floats(n, 80, -8, 8);
    xv[0] = 30.0f;
    xv[1] = -30.0f;
    xv[2] = 0.0f;
    Twin x(xv, {n}), out(std::vector<float>(n), {n}), dout(random_floats(n, 81), {n}), dx(std::vector<float>(n), {n});
    auto c = cpu_ctx(), g = gpu_ctx();
    for (auto* ctx : {&c, &g}) {
        const bool d = ctx == &g;
        ops::gelu_forward(*ctx, d ? out.gpu() : out.cpu(), d ? x.gpu() : x.cpu());
        ops::gelu_backward(*ctx, d ? dx.gpu() : dx.cpu(), d ? dout.gpu() : dout.cpu(), d ? x.gpu() : x.cpu());
    }
    Compare cmp;
    cmp.twin("gelu forward", out);
    cmp.twin("gelu backward", dx);
    return cmp;
}

Compare check_swiglu() {
    // F = 132: the 128-bit kernels; F = 7: the scalar ones. Saturated sigmoids at both ends and zero.
    Compare cmp;
    for (const int64_t F : {132, 7}) {
        const int64_t N = 37;
        std::vector<float> xv = random_floats(N * 2 * F, 82, -8, 8);
        xv[0] = 30.0f;
        xv[1] = -30.0f;
        xv[2] = 0.0f;
        Twin x(xv, {N, 2 * F}), out(std::vector<float>(N * F), {N, F}), dout(random_floats(N * F, 83), {N, F});
        Twin dx(std::vector<float>(N * 2 * F), {N, 2 * F});
        auto c = cpu_ctx(), g = gpu_ctx();
        for (auto* ctx : {&c, &g}) {
            const bool d = ctx == &g;
            ops::swiglu_forward(*ctx, d ? out.gpu() : out.cpu(), d ? x.gpu() : x.cpu());
            ops::swiglu_backward(*ctx, d ? dx.gpu() : dx.cpu(), d ? dout.gpu() : dout.cpu(), d ? x.gpu() : x.cpu());
        }
        cmp.twin(fmt::format("swiglu forward F={}", F), out);
        cmp.twin(fmt::format("swiglu backward F={}", F), dx);
    }
    return cmp;
}

struct RopeCase {
    int64_t S, B, A, G, D;
    int rotary_dim;
    bool interleaved;
    int64_t offset;
};

Compare check_rope() {
    // Multi-head, grouped and multi-query layouts; rotate-half and interleaved pairs; full and partial
    // rotary dims (R/2 = 3: the scalar kernels); a position offset. Tables as Llama's, in float64.
    const RopeCase cases[] = {{33, 2, 4, 4, 64, 64, false, 0},
                              {33, 2, 4, 2, 64, 32, true, 7},
                              {20, 3, 6, 1, 32, 6, false, 3},
                              {17, 1, 8, 2, 128, 128, false, 100}};
    Compare cmp;
    for (const RopeCase& rc : cases) {
        AttentionParams p;
        p.num_heads = static_cast<int>(rc.A);
        p.num_query_groups = static_cast<int>(rc.G);
        p.total_heads = p.num_heads;
        p.batch = static_cast<int>(rc.B);
        const int64_t half = rc.rotary_dim / 2, rows = rc.S + rc.offset, n = rc.S * rc.B * (rc.A + 2 * rc.G) * rc.D;
        std::vector<float> cv(static_cast<size_t>(rows * half)), sv(cv.size());
        for (int64_t pos = 0; pos < rows; ++pos)
            for (int64_t i = 0; i < half; ++i) {
                const double angle = static_cast<double>(pos) * std::pow(10000.0, -2.0 * static_cast<double>(i) / rc.rotary_dim);
                cv[static_cast<size_t>(pos * half + i)] = static_cast<float>(std::cos(angle));
                sv[static_cast<size_t>(pos * half + i)] = static_cast<float>(std::sin(angle));
            }
        Twin cos_t(cv, {rows, half}), sin_t(sv, {rows, half});
        const std::initializer_list<int64_t> shape = {rc.S, rc.B, (rc.A + 2 * rc.G) * rc.D};
        Twin qkv(random_floats(n, 84, -2, 2), shape), dqkv(random_floats(n, 85, -2, 2), shape);
        auto c = cpu_ctx(), g = gpu_ctx();
        for (auto* ctx : {&c, &g}) {
            const bool d = ctx == &g;
            ops::rope_forward(*ctx, d ? qkv.gpu() : qkv.cpu(), d ? cos_t.gpu() : cos_t.cpu(), d ? sin_t.gpu() : sin_t.cpu(),
                              p, rc.rotary_dim, rc.interleaved, rc.offset);
            ops::rope_backward(*ctx, d ? dqkv.gpu() : dqkv.cpu(), d ? cos_t.gpu() : cos_t.cpu(),
                               d ? sin_t.gpu() : sin_t.cpu(), p, rc.rotary_dim, rc.interleaved, rc.offset);
        }
        const std::string tag = fmt::format(" A={} G={} D={} R={}{} offset {}", rc.A, rc.G, rc.D, rc.rotary_dim,
                                            rc.interleaved ? " interleaved" : "", rc.offset);
        cmp.twin("rope forward" + tag, qkv);
        cmp.twin("rope backward" + tag, dqkv);
    }
    return cmp;
}

Compare check_dropout_masks() {
    // Ones through dropout give the mask itself (0 or 1/(1-p), exact): bit for bit, at odd offsets.
    Compare cmp;
    const RngStream rng{1234, 99};
    for (const int64_t offset : {0LL, 3LL, 1000001LL}) {
        const int64_t n = 4099;
        Twin x(std::vector<float>(n, 1.0f), {n}), out(std::vector<float>(n), {n});
        auto c = cpu_ctx(), g = gpu_ctx();
        ops::dropout_forward(c, out.cpu(), x.cpu(), 0.3f, rng, offset);
        ops::dropout_forward(g, out.gpu(), x.gpu(), 0.3f, rng, offset);
        cmp.bits(fmt::format("dropout mask offset {}", offset), out.device_values(), out.host());
        ops::dropout_backward(c, x.cpu(), out.cpu(), 0.3f, rng, offset);
        ops::dropout_backward(g, x.gpu(), out.gpu(), 0.3f, rng, offset);
        cmp.bits(fmt::format("dropout backward offset {}", offset), x.device_values(), x.host());
    }
    return cmp;
}

Compare check_dropout_add() {
    const int64_t rows = 37, cols = 129;
    const RngStream rng{77, 5};
    Twin x(random_floats(rows * cols, 90), {rows, cols}), res(random_floats(rows * cols, 91), {rows, cols});
    Twin bias(random_floats(cols, 92), {cols}), out(std::vector<float>(rows * cols), {rows, cols});
    Twin out2(std::vector<float>(rows * cols), {rows, cols});
    auto c = cpu_ctx(), g = gpu_ctx();
    for (auto* ctx : {&c, &g}) {
        const bool d = ctx == &g;
        ops::dropout_add_forward(*ctx, d ? out.gpu() : out.cpu(), d ? res.gpu() : res.cpu(), d ? x.gpu() : x.cpu(),
                                 0.1f, rng, 17);
        ops::bias_dropout_add_forward(*ctx, d ? out2.gpu() : out2.cpu(), d ? res.gpu() : res.cpu(),
                                      d ? x.gpu() : x.cpu(), d ? bias.gpu() : bias.cpu(), 0.2f, rng, 5);
    }
    Compare cmp;
    cmp.twin("dropout_add", out);
    cmp.twin("bias_dropout_add", out2);
    return cmp;
}

/// A tensor stored in 16 bits (bf16 or f16), on the device and bit for bit on the host: made from
/// `values` (rounded on the host), or from a Twin (converted on the device by the copy op — its values
/// should be 16-bit exact — the host copy rounded from the Twin's host values). The CPU op works on
/// cpu(), the CUDA op on gpu() (on(gpu): either); the contents come back decoded on the host (values:
/// the device's, cpu_values: the host's) or widened on the device into a Twin of the same size.
class Device16 {
public:
    Device16(DType dtype, const std::vector<float>& values, std::initializer_list<int64_t> shape)
        : dtype_(dtype), shape_(shape), host_(encoded(dtype, values)) {
        allocate();
        device::copy_to_device(dev_, host_.data(), bytes());
    }
    Device16(Twin& src, DType dtype, std::initializer_list<int64_t> shape)
        : dtype_(dtype), shape_(shape), host_(encoded(dtype, src.host())) {
        allocate();
        auto g = gpu_ctx();
        ops::copy(g, gpu(), src.gpu());
    }
    Device16(const Device16&) = delete;
    Device16& operator=(const Device16&) = delete;
    ~Device16() { device::cuda_free(dev_); }
    TensorView gpu() const { return view_of(dev_, dtype_, Device::CUDA, shape_); }
    TensorView cpu() { return view_of(host_.data(), dtype_, Device::CPU, shape_); }
    TensorView on(bool gpu_side) { return gpu_side ? gpu() : cpu(); }
    /// The device contents, decoded on the host.
    std::vector<float> values() const {
        std::vector<uint16_t> bits(host_.size());
        device::copy_to_host(bits.data(), dev_, bytes());
        return decoded(bits);
    }
    /// The host contents (what the CPU op wrote), decoded.
    std::vector<float> cpu_values() const { return decoded(host_); }
    /// The device contents widened on the device (the copy op) into `scratch`, read back.
    std::vector<float> widened(Twin& scratch) const {
        auto g = gpu_ctx();
        ops::copy(g, scratch.gpu(), gpu());
        return scratch.device_values();
    }

private:
    static std::vector<uint16_t> encoded(DType dtype, const std::vector<float>& values) {
        std::vector<uint16_t> bits(values.size());
        for (std::size_t i = 0; i < values.size(); ++i)
            bits[i] = dtype == DType::F16 ? fp16_bits(values[i]) : bf16_bits(values[i]);
        return bits;
    }
    std::vector<float> decoded(const std::vector<uint16_t>& bits) const {
        std::vector<float> v(bits.size());
        for (std::size_t i = 0; i < v.size(); ++i)
            v[i] = dtype_ == DType::F16 ? from_fp16_bits(bits[i]) : from_bf16_bits(bits[i]);
        return v;
    }
    int64_t bytes() const { return static_cast<int64_t>(host_.size()) * 2; }
    void allocate() { dev_ = device::cuda_malloc(std::max<int64_t>(bytes(), 4)); }
    DType dtype_;
    std::vector<int64_t> shape_;
    std::vector<uint16_t> host_;
    void* dev_ = nullptr;
};

std::vector<float> rounded_values(std::vector<float> v, DType dtype) {
    for (auto& x : v) x = dtype == DType::BF16 ? round_to_bf16(x) : round_to_fp16(x);
    return v;
}

/// The norms' backward with an f32 dout beside 16-bit x and dx (a 16-bit run's norm-input gradient
/// under tensor parallelism: the f32 reduction buffer), both norms, bf16 and f16, the statistics of one
/// device forward shared by every backward. Against the CPU op on the same values (dw, db: to
/// rounding; dx, rounded once by both: no element more than one 16-bit step of the tensor's largest
/// value away) and, on the device, bit for bit against the f32-x op on the widened values with dx
/// rounded after: dw and db always (the column partials are the same kernel), dx at H = 203 (both
/// scalar row loops; at H = 200 the 16-bit loop moves 8 columns per access and the f32 one 4).
void norms_with_f32_dout(Compare& cmp) {
    auto c = cpu_ctx(), g = gpu_ctx();
    for (DType dt : {DType::BF16, DType::F16})
        for (const int64_t H : {200, 203}) {
            const int64_t rows = 600, n = rows * H;
            const double step = dt == DType::BF16 ? 1.0 / 128 : 1.0 / 1024;
            Twin x(rounded_values(random_floats(n, 90, -2, 3), dt), {rows, H}), dout(random_floats(n, 91), {rows, H});
            Twin w(random_floats(H, 92, 0.5f, 1.5f), {H}), b(random_floats(H, 93), {H});
            Twin mean(std::vector<float>(rows), {rows}), rstd(std::vector<float>(rows), {rows});
            Twin out(std::vector<float>(n), {rows, H}), dx(std::vector<float>(n), {rows, H});
            Twin dx32(std::vector<float>(n), {rows, H}), scratch(std::vector<float>(n), {rows, H});
            Twin dw(random_floats(H, 94), {H}), db(random_floats(H, 95), {H});
            Twin dw32(dw.host(), {H}), db32(db.host(), {H});
            Device16 x16(x, dt, {rows, H}), dx16(dx, dt, {rows, H});
            for (const bool rms : {false, true}) {
                const std::string tag = fmt::format(" ({}, {} x, f32 dout, H {})", rms ? "rmsnorm" : "layernorm",
                                                    dtype_name(dt), H);
                if (rms)
                    ops::rmsnorm_forward(g, out.gpu(), rstd.gpu(), x.gpu(), w.gpu(), 1e-6f);
                else
                    ops::layernorm_forward(g, out.gpu(), mean.gpu(), rstd.gpu(), x.gpu(), w.gpu(), b.gpu(), 1e-5f);
                mean.host() = mean.device_values();
                rstd.host() = rstd.device_values();
                for (auto* ctx : {&c, &g}) {
                    const bool d = ctx == &g;
                    const TensorView vx = d ? x16.gpu() : x.cpu(), vdx = d ? dx16.gpu() : dx.cpu();
                    if (rms)
                        ops::rmsnorm_backward(*ctx, vdx, d ? dw.gpu() : dw.cpu(), d ? dout.gpu() : dout.cpu(), vx,
                                              d ? rstd.gpu() : rstd.cpu(), d ? w.gpu() : w.cpu(), false);
                    else
                        ops::layernorm_backward(*ctx, vdx, d ? dw.gpu() : dw.cpu(), d ? db.gpu() : db.cpu(),
                                                d ? dout.gpu() : dout.cpu(), vx, d ? mean.gpu() : mean.cpu(),
                                                d ? rstd.gpu() : rstd.cpu(), d ? w.gpu() : w.cpu(), false);
                }
                ops::round_to(c, dx.cpu(), dt);  // the CPU op's f32 dx, stored as a 16-bit dx would be
                const std::vector<float> got = dx16.widened(scratch);
                double largest = 0;
                for (float v : dx.host()) largest = std::max(largest, std::abs(static_cast<double>(v)));
                int64_t beyond = 0;
                for (int64_t i = 0; i < n; ++i)
                    beyond += std::abs(static_cast<double>(got[i]) - dx.host()[i]) > step * largest;
                cmp.values("dx: elements beyond one 16-bit step of the CPU op's" + tag, {static_cast<float>(beyond)},
                           {0.0f});
                cmp.twin("dw" + tag, dw);
                if (!rms) cmp.twin("db" + tag, db);
                // The f32-x op on the device, dx rounded after.
                if (rms)
                    ops::rmsnorm_backward(g, dx32.gpu(), dw32.gpu(), dout.gpu(), x.gpu(), rstd.gpu(), w.gpu(), false);
                else
                    ops::layernorm_backward(g, dx32.gpu(), dw32.gpu(), db32.gpu(), dout.gpu(), x.gpu(), mean.gpu(),
                                            rstd.gpu(), w.gpu(), false);
                ops::round_to(g, dx32.gpu(), dt);
                cmp.bits("dw = the f32-x op's" + tag, dw.device_values(), dw32.device_values());
                if (!rms) cmp.bits("db = the f32-x op's" + tag, db.device_values(), db32.device_values());
                if (H % 8 != 0) cmp.bits("dx = the f32-x op's rounded" + tag, got, dx32.device_values());
            }
        }
}

/// bias_dropout_add_norm_forward: the fused kernel against the CPU op (f32; another summation order:
/// to rounding) and, on the device, bit for bit against the two unfused ops it replaces (f32, and bf16 /
/// f16 residual stream beside the model's f32 row-parallel sum x), LayerNorm and RMSNorm, with and
/// without bias; H = 200 takes the 16-byte row loops, H = 203 the scalar ones.
Compare check_residual_norm() {
    Compare cmp;
    auto c = cpu_ctx(), g = gpu_ctx();
    for (const int64_t H : {200, 203}) {
        const int64_t rows = 37, n = rows * H;
        const RngStream rng{77, 6};
        Twin x(random_floats(n, 160), {rows, H}), res(random_floats(n, 161, -2, 3), {rows, H});
        Twin bias(random_floats(H, 162), {H}), w(random_floats(H, 163, 0.5f, 1.5f), {H}), b(random_floats(H, 164), {H});
        Twin out(std::vector<float>(n), {rows, H}), nout(std::vector<float>(n), {rows, H});
        Twin mean(std::vector<float>(rows), {rows}), rstd(std::vector<float>(rows), {rows});
        Twin out1(std::vector<float>(n), {rows, H}), nout1(std::vector<float>(n), {rows, H});
        Twin mean1(std::vector<float>(rows), {rows}), rstd1(std::vector<float>(rows), {rows});
        for (const bool rms : {false, true}) {
            const std::string tag = fmt::format(" ({}, H {})", rms ? "rmsnorm" : "layernorm", H);
            const TensorView no;
            for (auto* ctx : {&c, &g}) {
                const bool d = ctx == &g;
                ops::bias_dropout_add_norm_forward(*ctx, d ? out.gpu() : out.cpu(), d ? nout.gpu() : nout.cpu(),
                                                   rms ? no : d ? mean.gpu() : mean.cpu(), d ? rstd.gpu() : rstd.cpu(),
                                                   d ? res.gpu() : res.cpu(), d ? x.gpu() : x.cpu(),
                                                   d ? bias.gpu() : bias.cpu(), d ? w.gpu() : w.cpu(),
                                                   rms ? no : d ? b.gpu() : b.cpu(), 0.1f, rng, 8, 1e-5f);
            }
            cmp.twin("residual" + tag, out);
            cmp.twin("norm out" + tag, nout);
            cmp.twin("rstd" + tag, rstd);
            if (!rms) cmp.twin("mean" + tag, mean);
            // On the device: the two ops, bit for bit (no bias: dropout_add_forward).
            for (const bool with_bias : {true, false}) {
                const std::string t2 = tag + (with_bias ? " bias" : " no bias");
                if (with_bias)
                    ops::bias_dropout_add_forward(g, out1.gpu(), res.gpu(), x.gpu(), bias.gpu(), 0.1f, rng, 8);
                else
                    ops::dropout_add_forward(g, out1.gpu(), res.gpu(), x.gpu(), 0.1f, rng, 8);
                if (rms)
                    ops::rmsnorm_forward(g, nout1.gpu(), rstd1.gpu(), out1.gpu(), w.gpu(), 1e-5f);
                else
                    ops::layernorm_forward(g, nout1.gpu(), mean1.gpu(), rstd1.gpu(), out1.gpu(), w.gpu(), b.gpu(),
                                           1e-5f);
                ops::bias_dropout_add_norm_forward(g, out.gpu(), nout.gpu(), rms ? no : mean.gpu(), rstd.gpu(),
                                                   res.gpu(), x.gpu(), with_bias ? bias.gpu() : no, w.gpu(),
                                                   rms ? no : b.gpu(), 0.1f, rng, 8, 1e-5f);
                cmp.bits("fused = unfused residual" + t2, out.device_values(), out1.device_values());
                cmp.bits("fused = unfused norm out" + t2, nout.device_values(), nout1.device_values());
                cmp.bits("fused = unfused rstd" + t2, rstd.device_values(), rstd1.device_values());
                if (!rms) cmp.bits("fused = unfused mean" + t2, mean.device_values(), mean1.device_values());
            }
            // A 16-bit residual stream with the f32 sum x (the model's mix), against the same two ops.
            for (DType dt : {DType::BF16, DType::F16}) {
                const std::string t3 = tag + fmt::format(" {}", dtype_name(dt));
                Twin res_r(rounded_values(res.host(), dt), {rows, H}), scratch(std::vector<float>(n), {rows, H});
                Device16 r16(res_r, dt, {rows, H}), o16(out, dt, {rows, H}), n16(nout, dt, {rows, H});
                Device16 o16b(out, dt, {rows, H}), n16b(nout, dt, {rows, H});
                ops::bias_dropout_add_forward(g, o16b.gpu(), r16.gpu(), x.gpu(), bias.gpu(), 0.1f, rng, 8);
                if (rms)
                    ops::rmsnorm_forward(g, n16b.gpu(), rstd1.gpu(), o16b.gpu(), w.gpu(), 1e-5f);
                else
                    ops::layernorm_forward(g, n16b.gpu(), mean1.gpu(), rstd1.gpu(), o16b.gpu(), w.gpu(), b.gpu(), 1e-5f);
                ops::bias_dropout_add_norm_forward(g, o16.gpu(), n16.gpu(), rms ? no : mean.gpu(), rstd.gpu(), r16.gpu(),
                                                   x.gpu(), bias.gpu(), w.gpu(), rms ? no : b.gpu(), 0.1f, rng, 8,
                                                   1e-5f);
                cmp.bits("fused = unfused residual" + t3, o16.widened(scratch), o16b.widened(scratch));
                cmp.bits("fused = unfused norm out" + t3, n16.widened(scratch), n16b.widened(scratch));
                cmp.bits("fused = unfused rstd" + t3, rstd.device_values(), rstd1.device_values());
            }
        }
    }
    return cmp;
}

/// The 16-bit kernels on the device (storage.cuh) against the same ops on f32 views of the same
/// values, their results rounded after: an emulated 16-bit run's bits, element for element.
Compare check_storage_16bit() {
    Compare cmp;
    auto g = gpu_ctx();
    for (DType dt : {DType::BF16, DType::F16}) {
        const std::string tag = fmt::format(" ({})", dtype_name(dt));
        const int64_t rows = 67, H = 264, n = rows * H;  // odd rows, a row width of 8·33
        Twin x(rounded_values(random_floats(n, 150, -3, 3), dt), {rows, H});
        Twin dout(rounded_values(random_floats(n, 151), dt), {rows, H});
        Twin res(rounded_values(random_floats(n, 152), dt), {rows, H});
        Twin b(random_floats(H, 154), {H});
        Twin mean(std::vector<float>(rows), {rows}), rstd(std::vector<float>(rows), {rows});
        Twin mean16(std::vector<float>(rows), {rows}), rstd16(std::vector<float>(rows), {rows});
        Twin out(std::vector<float>(n), {rows, H}), readback(std::vector<float>(n), {rows, H});
        Device16 x16(x, dt, {rows, H}), dout16(dout, dt, {rows, H});
        Device16 res16(res, dt, {rows, H}), out16(out, dt, {rows, H});
        const auto same = [&](const std::string& name, const Device16& got) {
            ops::round_to(g, out.gpu(), dt);
            cmp.bits(name + tag, got.widened(readback), out.device_values());
        };
        ops::gelu_forward(g, out.gpu(), x.gpu());
        ops::gelu_forward(g, out16.gpu(), x16.gpu());
        same("gelu forward", out16);
        ops::gelu_backward(g, out.gpu(), dout.gpu(), x.gpu());
        ops::gelu_backward(g, out16.gpu(), dout16.gpu(), x16.gpu());
        same("gelu backward", out16);
        ops::add(g, out.gpu(), x.gpu(), res.gpu());
        ops::add(g, out16.gpu(), x16.gpu(), res16.gpu());
        same("add", out16);
        ops::bias_dropout_add_forward(g, out.gpu(), res.gpu(), x.gpu(), b.gpu(), 0.2f, RngStream{9, 4}, 8);
        ops::bias_dropout_add_forward(g, out16.gpu(), res16.gpu(), x16.gpu(), b.gpu(), 0.2f, RngStream{9, 4}, 8);
        same("bias_dropout_add", out16);
        ops::dropout_forward(g, out.gpu(), x.gpu(), 0.3f, RngStream{9, 5}, 3);
        ops::dropout_forward(g, out16.gpu(), x16.gpu(), 0.3f, RngStream{9, 5}, 3);
        same("dropout (offset 3)", out16);
        // The norms at a row width of 2·133: not a multiple of 4, so the f32 and the 16-bit kernels both take
        // the one-element row loop and sum in one order. (A 16-byte loop moves 4 floats but 8 16-bit values:
        // the orders differ, and the 16-bit results are the f32 ones rounded only at equal loop widths, as
        // test_kernels_norm_emulated shows; the norms check holds both loops to the CPU op.)
        const int64_t Hn = 266, nn = rows * Hn;
        Twin xn(rounded_values(random_floats(nn, 155, -3, 3), dt), {rows, Hn});
        Twin doutn(rounded_values(random_floats(nn, 156), dt), {rows, Hn});
        Twin wn(random_floats(Hn, 157, 0.5f, 1.5f), {Hn}), bn(random_floats(Hn, 158), {Hn});
        Twin dw(std::vector<float>(Hn), {Hn}), db(std::vector<float>(Hn), {Hn});
        Twin dw16(std::vector<float>(Hn), {Hn}), db16(std::vector<float>(Hn), {Hn});
        Twin outn(std::vector<float>(nn), {rows, Hn}), readn(std::vector<float>(nn), {rows, Hn});
        Device16 xn16(xn, dt, {rows, Hn}), doutn16(doutn, dt, {rows, Hn}), outn16(outn, dt, {rows, Hn});
        const auto same_n = [&](const std::string& name, const Device16& got) {
            ops::round_to(g, outn.gpu(), dt);
            cmp.bits(name + tag, got.widened(readn), outn.device_values());
        };
        ops::layernorm_forward(g, outn.gpu(), mean.gpu(), rstd.gpu(), xn.gpu(), wn.gpu(), bn.gpu(), 1e-5f);
        ops::layernorm_forward(g, outn16.gpu(), mean16.gpu(), rstd16.gpu(), xn16.gpu(), wn.gpu(), bn.gpu(), 1e-5f);
        same_n("layernorm out", outn16);
        cmp.bits("layernorm mean" + tag, mean16.device_values(), mean.device_values());
        cmp.bits("layernorm rstd" + tag, rstd16.device_values(), rstd.device_values());
        ops::layernorm_backward(g, outn.gpu(), dw.gpu(), db.gpu(), doutn.gpu(), xn.gpu(), mean.gpu(), rstd.gpu(),
                                wn.gpu(), false);
        ops::layernorm_backward(g, outn16.gpu(), dw16.gpu(), db16.gpu(), doutn16.gpu(), xn16.gpu(), mean.gpu(),
                                rstd.gpu(), wn.gpu(), false);
        same_n("layernorm dx", outn16);
        cmp.bits("layernorm dw" + tag, dw16.device_values(), dw.device_values());
        cmp.bits("layernorm db" + tag, db16.device_values(), db.device_values());
        ops::rmsnorm_forward(g, outn.gpu(), rstd.gpu(), xn.gpu(), wn.gpu(), 1e-6f);
        ops::rmsnorm_forward(g, outn16.gpu(), rstd16.gpu(), xn16.gpu(), wn.gpu(), 1e-6f);
        same_n("rmsnorm out", outn16);
        // SwiGLU over x as (rows, 2·132).
        Twin half(std::vector<float>(n / 2), {rows, H / 2}), half_back(std::vector<float>(n / 2), {rows, H / 2});
        Device16 half16(half, dt, {rows, H / 2});
        ops::swiglu_forward(g, half.gpu(), x.gpu());
        ops::swiglu_forward(g, half16.gpu(), x16.gpu());
        ops::round_to(g, half.gpu(), dt);
        cmp.bits("swiglu forward" + tag, half16.widened(half_back), half.device_values());
    }
    return cmp;
}

/// GEMMs reading and writing 16-bit tensors directly (no conversion pass): 16-bit x, w, y, dx against
/// the CPU ops on the same values (the CPU widens them and rounds its results once).
Compare check_gemm_16bit() {
    Compare cmp;
    auto c = cpu_ctx(), g = gpu_ctx();
    for (DType dt : {DType::BF16, DType::F16}) {
        const std::string tag = fmt::format(" ({})", dtype_name(dt));
        const int64_t N = 192, in = 256, out = 160;
        Twin x(rounded_values(random_floats(N * in, 160), dt), {N, in}), w(rounded_values(random_floats(out * in, 161), dt), {out, in});
        Twin bias(rounded_values(random_floats(out, 162), dt), {out}), dy(rounded_values(random_floats(N * out, 163), dt), {N, out});
        Twin y(std::vector<float>(N * out), {N, out}), dx(std::vector<float>(N * in), {N, in});
        Twin dw(random_floats(out * in, 164), {out, in}), dbias(random_floats(out, 165), {out});
        Twin y_back(std::vector<float>(N * out), {N, out}), dx_back(std::vector<float>(N * in), {N, in});
        Device16 x16(x, dt, {N, in}), w16(w, dt, {out, in}), dy16(dy, dt, {N, out}), y16(y, dt, {N, out}), dx16(dx, dt, {N, in});
        // CPU: f32 views of the values, results rounded as a 16-bit store (fp32 bias on both).
        ops::linear_forward(c, y.cpu(), x.cpu(), w.cpu(), bias.cpu());
        ops::linear_backward(c, dx.cpu(), dw.cpu(), dbias.cpu(), dy.cpu(), x.cpu(), w.cpu(), false);
        ops::round_to(c, y.cpu(), dt);
        ops::round_to(c, dx.cpu(), dt);
        ops::linear_forward(g, y16.gpu(), x16.gpu(), w16.gpu(), bias.gpu());
        ops::linear_backward(g, dx16.gpu(), dw.gpu(), dbias.gpu(), dy16.gpu(), x16.gpu(), w16.gpu(), false);
        cmp.values("linear y (16-bit x, w, y; f32 bias)" + tag, y16.widened(y_back), y.host());
        cmp.values("linear dx (16-bit dy, w, dx)" + tag, dx16.widened(dx_back), dx.host());
        cmp.twin("linear dw (fp32 main gradient from 16-bit dy, x)" + tag, dw);
        cmp.twin("linear dbias (from 16-bit dy)" + tag, dbias);
        // The classifier's hidden input: 16-bit x times an f32 table (widened at the call), fp32 logits.
        Twin table(random_floats(out * in, 166), {out, in}), logits(std::vector<float>(N * out), {N, out});
        ops::matmul(c, logits.cpu(), x.cpu(), table.cpu(), false, true);
        ops::matmul(g, logits.gpu(), x16.gpu(), table.gpu(), false, true);
        cmp.twin("logits of a 16-bit hidden input" + tag, logits);
    }
    return cmp;
}

/// fp16 without accumulate_allreduce_grads_in_fp32: every op that accumulates into the f16 gradient
/// arena, on f16 activations and weights, against the CPU op on the same bits (each rounds its fp32
/// sum once into the arena, test_kernels_f16_gradients): linear_backward's dw (cuBLAS/cuBLASLt with an
/// f16 C, beta = 1) and dbias (BGRADB's fp32 bias gradient, or column sums, added once) over one and
/// several 256-row chunks, linear_backward_gelu's (DGELU, fc1's bias gradient), LayerNorm and RMSNorm
/// gamma and beta, and the word and position embedding tables (bit for bit: row order on both). The
/// GEMMs and norms sum in other orders: within an fp16 step (1e-2 normwise). Whether cuBLASLt fused
/// BGRADB with an fp32 bias gradient beside an f16 D is not asked: either path must give these values.
Compare check_f16_gradients() {
    Compare cmp;
    auto c = cpu_ctx(), g = gpu_ctx();
    for (const int64_t N : {192, 1000}) {
        const int64_t in = 256, out = 160, F = 128;
        const std::string tag = fmt::format(" ({} rows)", N);
        Device16 x(DType::F16, random_floats(N * in, 170), {N, in});
        Device16 w(DType::F16, random_floats(out * in, 171), {out, in});
        Device16 dy(DType::F16, random_floats(N * out, 172), {N, out});
        Device16 dx(DType::F16, std::vector<float>(N * in), {N, in});
        Device16 dw(DType::F16, random_floats(out * in, 173, -4, 4), {out, in});
        Device16 dbias(DType::F16, random_floats(out, 174, -4, 4), {out});
        // fc2 of an MLP whose fc1 output (pre, act) is (N, F): dpre and fc1's bias gradient.
        Device16 act(DType::F16, random_floats(N * F, 175), {N, F});
        Device16 pre(DType::F16, random_floats(N * F, 176, -3, 3), {N, F});
        Device16 w2(DType::F16, random_floats(out * F, 177), {out, F});
        Device16 dpre(DType::F16, std::vector<float>(N * F), {N, F});
        Device16 dw2(DType::F16, random_floats(out * F, 178, -4, 4), {out, F});
        Device16 db2(DType::F16, random_floats(out, 179, -4, 4), {out});
        Device16 db1(DType::F16, random_floats(F, 180, -4, 4), {F});
        for (bool d : {false, true}) {
            OpContext& ctx = d ? g : c;
            ops::linear_backward(ctx, dx.on(d), dw.on(d), dbias.on(d), dy.on(d), x.on(d), w.on(d), false);
            ops::linear_backward_gelu(ctx, dpre.on(d), db1.on(d), dw2.on(d), db2.on(d), dy.on(d), act.on(d), w2.on(d),
                                      pre.on(d), DType::F16);
        }
        cmp.values("linear dx" + tag, dx.values(), dx.cpu_values());
        cmp.values("linear dw into f16" + tag, dw.values(), dw.cpu_values());
        cmp.values("linear dbias into f16" + tag, dbias.values(), dbias.cpu_values());
        cmp.values("dpre" + tag, dpre.values(), dpre.cpu_values());
        cmp.values("fc2 dw into f16" + tag, dw2.values(), dw2.cpu_values());
        cmp.values("fc2 dbias into f16" + tag, db2.values(), db2.cpu_values());
        cmp.values("fc1 dbias into f16 (from dpre)" + tag, db1.values(), db1.cpu_values());
    }
    for (const int64_t rows : {7, 600}) {
        const int64_t H = 200;
        const std::string tag = fmt::format(" ({} rows)", rows);
        Device16 x(DType::F16, random_floats(rows * H, 181, -2, 3), {rows, H});
        Device16 dout(DType::F16, random_floats(rows * H, 182), {rows, H});
        Device16 w(DType::F16, random_floats(H, 183, 0.5f, 1.5f), {H}), b(DType::F16, random_floats(H, 184), {H});
        Device16 out(DType::F16, std::vector<float>(rows * H), {rows, H});
        Device16 dx(DType::F16, std::vector<float>(rows * H), {rows, H});
        Device16 dw(DType::F16, random_floats(H, 185, -4, 4), {H}), db(DType::F16, random_floats(H, 186, -4, 4), {H});
        Device16 rdw(DType::F16, random_floats(H, 187, -4, 4), {H});
        Twin mean(std::vector<float>(rows), {rows}), rstd(std::vector<float>(rows), {rows});
        for (bool d : {false, true}) {
            OpContext& ctx = d ? g : c;
            const auto f = [d](Twin& t) { return d ? t.gpu() : t.cpu(); };
            ops::layernorm_forward(ctx, out.on(d), f(mean), f(rstd), x.on(d), w.on(d), b.on(d), 1e-5f);
            ops::layernorm_backward(ctx, dx.on(d), dw.on(d), db.on(d), dout.on(d), x.on(d), f(mean), f(rstd), w.on(d),
                                    false);
            ops::rmsnorm_forward(ctx, out.on(d), f(rstd), x.on(d), w.on(d), 1e-6f);
            ops::rmsnorm_backward(ctx, dx.on(d), rdw.on(d), dout.on(d), x.on(d), f(rstd), w.on(d), false);
        }
        cmp.values("layernorm dw into f16" + tag, dw.values(), dw.cpu_values());
        cmp.values("layernorm db into f16" + tag, db.values(), db.cpu_values());
        cmp.values("rmsnorm dw into f16" + tag, rdw.values(), rdw.cpu_values());
    }
    {
        const int64_t S = 13, B = 3, H = 40, V = 150, vocab_start = 25;
        std::vector<int32_t> idv = random_ids(S * B, 0, 200, 188);
        for (int64_t r = 0; r < S * B; r += 4) idv[static_cast<std::size_t>(r)] = 30;  // a row summed many times
        Twin ids(ids_as_floats(idv), {S * B});
        Device16 dout(DType::F16, random_floats(S * B * H, 189), {S, B, H});
        Device16 dtable(DType::F16, random_floats(V * H, 190, -8, 8), {V, H});
        Device16 dwpe(DType::F16, random_floats(20 * H, 191, -8, 8), {20, H});
        for (bool d : {false, true}) {
            OpContext& ctx = d ? g : c;
            ops::embedding_backward(ctx, dtable.on(d), dout.on(d), d ? ids.gpu_i32() : ids.cpu_i32(), vocab_start);
            ops::position_embedding_backward(ctx, dwpe.on(d), dout.on(d), 4);
        }
        cmp.bits("embedding backward into f16 (bit for bit)", dtable.values(), dtable.cpu_values());
        cmp.bits("position embedding backward into f16 (bit for bit)", dwpe.values(), dwpe.cpu_values());
    }
    return cmp;
}

struct AttnCase {
    int64_t S, B, A, D;
    float p;
    int head_offset, total_heads;
    int64_t G = 0;  // key/value groups (grouped-query attention); 0: G = A
    int64_t groups() const { return G > 0 ? G : A; }
};

AttentionParams attn_params(const AttnCase& a) {
    AttentionParams p;
    p.num_heads = static_cast<int>(a.A);
    p.num_query_groups = static_cast<int>(a.G);
    p.head_offset = a.head_offset;
    p.total_heads = a.total_heads;
    p.batch = static_cast<int>(a.B);
    p.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.D)));
    p.dropout_p = a.p;
    p.rng = RngStream{2024, 11};
    return p;
}

/// x rounded to `dtype` (bf16 or f16) element by element: the CPU op's results on 16-bit views.
std::vector<float> rounded(std::vector<float> x, DType dtype) {
    for (float& v : x) v = dtype == DType::F16 ? round_to_fp16(v) : round_to_bf16(v);
    return x;
}

/// One attention case with qkv, out, dout and dqkv stored in 16 bits (`stored`) on the GPU: the own
/// kernels (tensor cores: E = the storage type) or cuDNN bound in place, against the CPU op in fp32 on
/// the same 16-bit values (the GPU's one rounding of each output is part of its error).
void attention_case_16bit(Compare& cmp, const AttnCase& a, DType stored, bool cudnn = false) {
    AttentionParams p = attn_params(a);
    if (cudnn) {
        p.backend = AttentionBackend::Cudnn;
        p.head_dim = static_cast<int>(a.D);
    }
    const int64_t row = (a.A + 2 * a.groups()) * a.D, qkv_n = a.S * a.B * row, out_n = a.S * a.B * a.A * a.D;
    Twin qkv(rounded(random_floats(qkv_n, 100, -2, 2), stored), {a.S, a.B, row});
    Twin out(std::vector<float>(out_n), {a.S, a.B, a.A * a.D});
    Twin dout(rounded(random_floats(out_n, 101), stored), {a.S, a.B, a.A * a.D});
    Twin dqkv(std::vector<float>(qkv_n), {a.S, a.B, row});
    Device16 qkv16(stored, qkv.host(), {a.S, a.B, row}), out16(stored, out.host(), {a.S, a.B, a.A * a.D});
    Device16 dout16(stored, dout.host(), {a.S, a.B, a.A * a.D}), dqkv16(stored, dqkv.host(), {a.S, a.B, row});
    std::vector<float> probs(static_cast<size_t>(ops::attention_saved_elements(Device::CPU, p, a.S)));
    std::vector<float> ws(static_cast<size_t>(ops::attention_workspace_bytes(Device::CPU, p, a.S, ops::num_threads()) / 4 + 1));
    const int64_t lse_n = ops::attention_saved_elements(Device::CUDA, p, a.S);
    const int64_t dws_n = ops::attention_workspace_bytes(Device::CUDA, p, a.S, 1) / 4;
    Twin lse(std::vector<float>(lse_n), {lse_n}), dws(std::vector<float>(dws_n), {dws_n});
    auto c = cpu_ctx(), g = gpu_ctx();
    g.gemm_inputs = stored;
    if (cudnn) g.attention = AttentionBackend::Cudnn;
    const TensorView vp = view_f32(probs.data(), {static_cast<int64_t>(probs.size())});
    const TensorView vw = view_f32(ws.data(), {static_cast<int64_t>(ws.size())});
    ops::attention_forward(c, out.cpu(), vp, qkv.cpu(), vw, p);
    ops::attention_forward(g, out16.gpu(), lse.gpu(), qkv16.gpu(), dws.gpu(), p);
    ops::attention_backward(c, dqkv.cpu(), dout.cpu(), qkv.cpu(), out.cpu(), vp, vw, p);
    ops::attention_backward(g, dqkv16.gpu(), dout16.gpu(), qkv16.gpu(), out16.gpu(), lse.gpu(), dws.gpu(), p);
    const std::string tag = fmt::format(" S={} B={} A={} G={} D={} p={} ({} storage{})", a.S, a.B, a.A, a.groups(), a.D,
                                        a.p, dtype_name(stored), cudnn ? ", cuDNN" : ", tensor cores");
    cmp.values("attention out" + tag, out16.values(), out.host());
    cmp.values("attention dqkv" + tag, dqkv16.values(), dqkv.host());
}

Compare check_attention_16bit() {
    // bf16 and f16 tensors: the tensor-core kernels load the 16-bit tiles directly (fp16: half
    // fragments); P and dS rounded to the storage type for their products, then one rounding of
    // each output: 1e-2, as for bf16 values in fp32 arrays.
    Compare cmp;
    for (DType t : {DType::BF16, DType::F16}) {
        attention_case_16bit(cmp, {130, 1, 2, 64, 0.0f, 0, 2}, t);
        attention_case_16bit(cmp, {257, 2, 8, 128, 0.1f, 0, 8, 2}, t);  // GQA, dropout
        attention_case_16bit(cmp, {70, 1, 4, 16, 0.25f, 4, 8, 1}, t);   // MQA, heads 4..7 of 8
        attention_case_16bit(cmp, {65, 1, 1, 80, 0.0f, 0, 1}, t);
    }
    return cmp;
}

/// cuDNN on bf16 and f16 tensors bound in place (strided views of the packed grouped qkv, O read
/// from the stored output), multi-head, grouped-query and multi-query.
Compare check_attention_cudnn_16bit() {
    Compare cmp;
    if (const AttentionBackendChoice c = resolve_attention_backend("cudnn", false, true); c.backend != AttentionBackend::Cudnn) {
        cmp.values("cuDNN does not run: " + c.reason, {1.0f}, {0.0f});
        return cmp;
    }
    for (DType t : {DType::BF16, DType::F16}) {
        attention_case_16bit(cmp, {130, 1, 2, 64, 0.0f, 0, 2}, t, true);
        attention_case_16bit(cmp, {257, 2, 8, 128, 0.0f, 0, 8, 2}, t, true);
        attention_case_16bit(cmp, {70, 1, 4, 64, 0.0f, 0, 4, 1}, t, true);
    }
    if (const std::string refused = cudnn_attention_refusals(); !refused.empty())
        cmp.values("cuDNN refused: " + refused, {1.0f}, {0.0f});
    return cmp;
}

/// Forward and backward of one attention case on both devices; returns the comparison. With
/// `tensor_cores` the GPU runs as in a bf16 run (gemm_inputs BF16: the tensor-core kernels) on
/// bf16-valued inputs.
void attention_case(Compare& cmp, const AttnCase& a, bool backward, bool tensor_cores = false, bool cudnn = false) {
    AttentionParams p = attn_params(a);
    if (cudnn) {  // cuDNN's fused attention on the GPU (bf16 inputs); the CPU ignores the choice
        p.backend = AttentionBackend::Cudnn;
        p.head_dim = static_cast<int>(a.D);
        tensor_cores = true;
    }
    const int64_t row = (a.A + 2 * a.groups()) * a.D;  // qkv columns per position and sequence
    const int64_t qkv_n = a.S * a.B * row, out_n = a.S * a.B * a.A * a.D;
    std::vector<float> qkv_values = random_floats(qkv_n, 100, -2, 2);
    if (tensor_cores)
        for (float& x : qkv_values) x = round_to_bf16(x);
    Twin qkv(qkv_values, {a.S, a.B, row});
    Twin out(std::vector<float>(out_n), {a.S, a.B, a.A * a.D});
    Twin dout(random_floats(out_n, 101), {a.S, a.B, a.A * a.D});
    Twin dqkv(std::vector<float>(qkv_n), {a.S, a.B, row});
    const int threads = ops::num_threads();
    std::vector<float> probs(static_cast<size_t>(ops::attention_saved_elements(Device::CPU, p, a.S)));
    std::vector<float> ws(static_cast<size_t>(ops::attention_workspace_bytes(Device::CPU, p, a.S, threads) / 4 + 1));
    const int64_t lse_n = ops::attention_saved_elements(Device::CUDA, p, a.S);
    const int64_t dws_n = ops::attention_workspace_bytes(Device::CUDA, p, a.S, 1) / 4;
    Twin lse(std::vector<float>(lse_n), {lse_n}), dws(std::vector<float>(dws_n), {dws_n});
    auto c = cpu_ctx(), g = gpu_ctx();
    if (tensor_cores) g.gemm_inputs = DType::BF16;
    if (cudnn) g.attention = AttentionBackend::Cudnn;
    const TensorView vp = view_f32(probs.data(), {static_cast<int64_t>(probs.size())});
    const TensorView vw = view_f32(ws.data(), {static_cast<int64_t>(ws.size())});
    ops::attention_forward(c, out.cpu(), vp, qkv.cpu(), vw, p);
    ops::attention_forward(g, out.gpu(), lse.gpu(), qkv.gpu(), dws.gpu(), p);
    const std::string tag = fmt::format(" S={} B={} A={} G={} D={} p={}{}", a.S, a.B, a.A, a.groups(), a.D, a.p,
                                        cudnn ? " (cuDNN)" : tensor_cores ? " (tensor cores)" : "");
    cmp.twin("attention out" + tag, out);
    if (!backward) return;
    ops::attention_backward(c, dqkv.cpu(), dout.cpu(), qkv.cpu(), out.cpu(), vp, vw, p);
    ops::attention_backward(g, dqkv.gpu(), dout.gpu(), qkv.gpu(), out.gpu(), lse.gpu(), dws.gpu(), p);
    cmp.twin("attention dqkv" + tag, dqkv);
}

Compare check_attention_forward() {
    Compare cmp;
    attention_case(cmp, {77, 2, 3, 32, 0.0f, 0, 3}, false);
    attention_case(cmp, {130, 1, 2, 64, 0.0f, 0, 2}, false);
    attention_case(cmp, {40, 2, 2, 128, 0.0f, 0, 2}, false);
    attention_case(cmp, {65, 2, 2, 16, 0.25f, 2, 6}, false);  // dropout, heads 2..3 of 6
    attention_case(cmp, {70, 1, 2, 96, 0.1f, 0, 2}, false);   // head dims that are not powers of two
    attention_case(cmp, {70, 1, 1, 160, 0.0f, 0, 1}, false);
    return cmp;
}

Compare check_attention_backward() {
    Compare cmp;
    attention_case(cmp, {77, 2, 3, 32, 0.0f, 0, 3}, true);
    attention_case(cmp, {100, 1, 2, 64, 0.0f, 0, 2}, true);
    attention_case(cmp, {40, 1, 1, 128, 0.0f, 0, 1}, true);
    attention_case(cmp, {65, 2, 2, 16, 0.25f, 2, 6}, true);
    attention_case(cmp, {70, 1, 1, 80, 0.0f, 0, 1}, true);
    attention_case(cmp, {70, 1, 2, 160, 0.1f, 0, 2}, true);
    return cmp;
}

Compare check_attention_tensor_cores() {
    // bf16 runs: P and dS are rounded to bf16 for their products (as FlashAttention-2), ~2e-3 here.
    Compare cmp;
    attention_case(cmp, {130, 1, 2, 64, 0.0f, 0, 2}, true, true);
    attention_case(cmp, {70, 2, 2, 16, 0.25f, 2, 6}, true, true);
    attention_case(cmp, {257, 1, 2, 128, 0.1f, 1, 4}, true, true);
    attention_case(cmp, {65, 1, 1, 80, 0.0f, 0, 1}, true, true);
    attention_case(cmp, {64, 1, 1, 160, 0.0f, 0, 1}, true, true);
    return cmp;
}

Compare check_attention_gqa() {
    // Grouped-query (G = A/2, A/4) and multi-query (G = 1) attention, forward and backward, fp32 kernels.
    Compare cmp;
    attention_case(cmp, {77, 2, 4, 32, 0.0f, 0, 4, 2}, true);
    attention_case(cmp, {100, 1, 8, 64, 0.1f, 8, 16, 2}, true);  // dropout, heads 8..15 of 16
    attention_case(cmp, {65, 2, 4, 128, 0.0f, 0, 4, 1}, true);
    attention_case(cmp, {70, 1, 6, 80, 0.0f, 0, 6, 3}, true);
    return cmp;
}

Compare check_attention_gqa_tensor_cores() {
    Compare cmp;
    attention_case(cmp, {130, 1, 4, 64, 0.0f, 0, 4, 2}, true, true);
    attention_case(cmp, {257, 2, 8, 128, 0.1f, 0, 8, 2}, true, true);
    attention_case(cmp, {70, 1, 4, 16, 0.25f, 4, 8, 1}, true, true);
    return cmp;
}

/// cuDNN's fused attention against the CPU op, bf16 values (1e-2): multi-head, grouped-query and
/// multi-query, head dims 64 and 128. Fails when cuDNN does not run here (the reason as the name) or
/// refused a shape (which then ran on the own kernels). Dropout: cuDNN's masks are its own, so the
/// check is that the same stream gives the same bits and another stream other bits.
Compare check_attention_cudnn() {
    Compare cmp;
    if (const AttentionBackendChoice c = resolve_attention_backend("cudnn", false, true); c.backend != AttentionBackend::Cudnn) {
        cmp.values("cuDNN does not run: " + c.reason, {1.0f}, {0.0f});
        return cmp;
    }
    attention_case(cmp, {130, 1, 2, 64, 0.0f, 0, 2}, true, true, true);
    attention_case(cmp, {257, 2, 8, 128, 0.0f, 0, 8, 2}, true, true, true);  // GQA, 4 query heads per group
    attention_case(cmp, {70, 1, 4, 64, 0.0f, 0, 4, 1}, true, true, true);    // MQA
    attention_case(cmp, {512, 1, 4, 128, 0.0f, 0, 4, 4}, true, true, true);
    // Dropout: forward twice with one stream (bit-identical), once with another (different).
    const AttnCase a{96, 1, 4, 64, 0.1f, 0, 4, 2};
    AttentionParams p = attn_params(a);
    p.backend = AttentionBackend::Cudnn;
    p.head_dim = static_cast<int>(a.D);
    const int64_t row = (a.A + 2 * a.groups()) * a.D, qkv_n = a.S * a.B * row, out_n = a.S * a.B * a.A * a.D;
    std::vector<float> values = random_floats(qkv_n, 100, -2, 2);
    for (float& x : values) x = round_to_bf16(x);
    Twin qkv(values, {a.S, a.B, row});
    const int64_t saved_n = ops::attention_saved_elements(Device::CUDA, p, a.S);
    const int64_t ws_n = ops::attention_workspace_bytes(Device::CUDA, p, a.S, 1) / 4;
    Twin saved(std::vector<float>(saved_n), {saved_n}), ws(std::vector<float>(ws_n), {ws_n});
    auto g = gpu_ctx();
    g.gemm_inputs = DType::BF16;
    g.attention = AttentionBackend::Cudnn;
    std::vector<std::vector<float>> outs;
    for (uint64_t stream : {11u, 11u, 12u}) {
        Twin out(std::vector<float>(out_n), {a.S, a.B, a.A * a.D});
        p.rng = RngStream{2024, stream};
        ops::attention_forward(g, out.gpu(), saved.gpu(), qkv.gpu(), ws.gpu(), p);
        outs.push_back(out.device_values());
    }
    cmp.bits("cuDNN dropout, the same stream twice", outs[1], outs[0]);
    if (outs[2] == outs[0]) cmp.values("cuDNN dropout: another stream gave the same mask", {1.0f}, {0.0f});
    if (const std::string refused = cudnn_attention_refusals(); !refused.empty())
        cmp.values("cuDNN refused: " + refused, {1.0f}, {0.0f});
    return cmp;
}

/// Generation's cached attention: a prefill of 37 tokens into row 1, then a decode step of rows 0-2 at
/// different positions, GQA and multi-head, head dims 64 and 80 (the kernel's lane guard).
Compare check_cached_attention() {
    Compare cmp;
    struct Shape {
        int A, G;
        int64_t D;
    };
    for (const Shape sh : {Shape{8, 2, 64}, Shape{4, 4, 80}}) {
        const int64_t R = 3, L = 96, W = (sh.A + 2 * sh.G) * sh.D;
        AttentionParams p;
        p.num_heads = sh.A;
        p.num_query_groups = sh.G;
        p.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.D)));
        Twin k(random_floats(R * sh.G * L * sh.D, 90), {R, sh.G, L, sh.D});
        Twin v(random_floats(R * sh.G * L * sh.D, 91), {R, sh.G, L, sh.D});
        auto c = cpu_ctx(), g = gpu_ctx();
        // (rows, positions) of each call; rows 0 and 2 hold random "earlier tokens" already.
        const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> calls = {
            {std::vector<int32_t>(37, 1), [] {
                 std::vector<int32_t> pos(37);
                 for (int i = 0; i < 37; ++i) pos[i] = i;
                 return pos;
             }()},
            {{0, 1, 2}, {70, 37, 5}}};
        for (std::size_t call = 0; call < calls.size(); ++call) {
            const auto& [rows, positions] = calls[call];
            const int64_t n = static_cast<int64_t>(rows.size());
            Twin qkv(random_floats(n * W, 92 + static_cast<uint32_t>(call), -2, 2), {n, W});
            Twin out(std::vector<float>(static_cast<std::size_t>(n * sh.A * sh.D), -7.0f), {n, sh.A * sh.D});
            Twin r(ids_as_floats(rows), {n}), pos(ids_as_floats(positions), {n});
            for (auto* ctx : {&c, &g}) {
                const bool d = ctx == &g;
                ops::cached_attention_forward(*ctx, d ? out.gpu() : out.cpu(), d ? k.gpu() : k.cpu(),
                                              d ? v.gpu() : v.cpu(), d ? qkv.gpu() : qkv.cpu(),
                                              d ? r.gpu_i32() : r.cpu_i32(), d ? pos.gpu_i32() : pos.cpu_i32(), p);
            }
            const std::string tag = fmt::format(" (A={}, G={}, D={}, {})", sh.A, sh.G, sh.D, call ? "decode" : "prefill");
            cmp.twin("cached attention out" + tag, out);
        }
        cmp.twin(fmt::format("k cache (D={})", sh.D), k);
        cmp.twin(fmt::format("v cache (D={})", sh.D), v);
    }
    return cmp;
}

Compare check_cross_entropy() {
    const int64_t N = 19, V = 3001, vocab_start = 1000;
    const std::vector<int32_t> tv = random_ids(N, 0, 5000, 110);  // some targets outside the shard
    Twin targets(ids_as_floats(tv), {N});
    Twin logits(random_floats(N * V, 111, -6, 6), {N, V});
    Twin mx(std::vector<float>(N), {N}), se(std::vector<float>(N), {N}), tl(std::vector<float>(N), {N});
    Twin lse(random_floats(N, 112, 7, 9), {N}), scale(random_floats(N, 113, 0.1f, 1.0f), {N});
    auto c = cpu_ctx(), g = gpu_ctx();
    for (auto* ctx : {&c, &g}) {
        const bool d = ctx == &g;
        ops::cross_entropy_partials(*ctx, d ? mx.gpu() : mx.cpu(), d ? se.gpu() : se.cpu(), d ? tl.gpu() : tl.cpu(),
                                    d ? logits.gpu() : logits.cpu(), d ? targets.gpu_i32() : targets.cpu_i32(),
                                    vocab_start);
        ops::cross_entropy_backward(*ctx, d ? logits.gpu() : logits.cpu(), d ? targets.gpu_i32() : targets.cpu_i32(),
                                    d ? lse.gpu() : lse.cpu(), d ? scale.gpu() : scale.cpu(), vocab_start);
    }
    Compare cmp;
    cmp.twin("cross_entropy row_max", mx);
    cmp.twin("cross_entropy row_sumexp", se);
    cmp.twin("cross_entropy target_logit", tl);
    cmp.twin("cross_entropy dlogits", logits);

    // The classifier's other ops: the fused loss + gradient (every target inside the vocabulary), the
    // shards' combination and the loss sum (GptModel::head's sequence).
    const std::vector<int32_t> inside = random_ids(N, 0, V, 114);
    Twin ftargets(ids_as_floats(inside), {N});
    Twin flogits(random_floats(N * V, 115, -6, 6), {N, V}), flse(std::vector<float>(N), {N});
    Twin ftl(std::vector<float>(N), {N}), gmax(random_floats(N, 116, 6, 7), {N});
    double loss[2] = {0, 0};
    for (auto* ctx : {&c, &g}) {
        const bool d = ctx == &g;
        ops::cross_entropy_fused(*ctx, d ? flse.gpu() : flse.cpu(), d ? ftl.gpu() : ftl.cpu(),
                                 d ? flogits.gpu() : flogits.cpu(), d ? ftargets.gpu_i32() : ftargets.cpu_i32(),
                                 d ? scale.gpu() : scale.cpu());
        ops::cross_entropy_rescale(*ctx, d ? se.gpu() : se.cpu(), d ? mx.gpu() : mx.cpu(), d ? gmax.gpu() : gmax.cpu());
        ops::cross_entropy_lse(*ctx, d ? mx.gpu() : mx.cpu(), d ? gmax.gpu() : gmax.cpu(), d ? se.gpu() : se.cpu());
        TensorView out = make_view(&loss[0], DType::F64, {1});
        if (d) out = make_view(device::cuda_malloc(8), DType::F64, {1}, Device::CUDA);
        ops::cross_entropy_loss_sum(*ctx, out, d ? flse.gpu() : flse.cpu(), d ? ftl.gpu() : ftl.cpu(), 1.0, false);
        if (d) {
            loss[1] = ops::read_f64(g, out)[0];
            device::cuda_free(out.data);
        }
    }
    cmp.twin("cross_entropy_fused lse", flse);
    cmp.twin("cross_entropy_fused target_logit", ftl);
    cmp.twin("cross_entropy_fused dlogits", flogits);
    cmp.twin("cross_entropy_rescale", se);
    cmp.twin("cross_entropy_lse", mx);
    cmp.values("cross_entropy_loss_sum", {static_cast<float>(loss[1])}, {static_cast<float>(loss[0])});
    return cmp;
}

Compare check_adamw() {
    const int64_t n = 10007;
    Twin w(random_floats(n, 120), {n}), grad(random_floats(n, 121, -3, 3), {n});
    Twin m(random_floats(n, 122, -0.1f, 0.1f), {n}), v(random_floats(n, 123, 0.0f, 0.01f), {n});
    Twin copy(std::vector<float>(n), {n});
    AdamWParams p;
    p.lr = 3e-3f;
    p.weight_decay = 0.1f;
    p.step = 7;
    p.grad_scale = 0.5f;
    auto c = cpu_ctx(), g = gpu_ctx();
    for (auto* ctx : {&c, &g}) {
        const bool d = ctx == &g;
        ops::adamw_update(*ctx, d ? w.gpu() : w.cpu(), d ? grad.gpu() : grad.cpu(), d ? m.gpu() : m.cpu(),
                          d ? v.gpu() : v.cpu(), p, d ? copy.gpu() : copy.cpu(), DType::BF16);
    }
    Compare cmp;
    cmp.twin("adamw param", w);
    cmp.twin("adamw exp_avg", m);
    cmp.twin("adamw exp_avg_sq", v);
    // The bf16 copy is exactly the rounding of the GPU's own fp32 weights.
    std::vector<float> rounded = w.device_values();
    for (auto& x : rounded) x = round_to_bf16(x);
    cmp.bits("adamw bf16 copy", copy.device_values(), rounded);
    // The step's parameter block in device memory (what a captured step reads): the GPU's own bits
    // of the same step from AdamWParams, at an offset that leaves the 128-bit bulk a ragged tail.
    const AdamWConstants k = adamw_constants(p);
    const double block[step_params::Count] = {k.step_size, k.inv_sqrt_bc2, k.decay, 1.0};
    void* dev_block = device::cuda_malloc(sizeof(block));
    device::copy_to_device(dev_block, block, sizeof(block));
    const auto tail = [](Twin& t) { return slice_1d(t.gpu(), 3, n - 3); };
    std::vector<std::vector<float>> by_args;
    for (int pass = 0; pass < 2; ++pass) {
        Twin w2(random_floats(n, 124), {n}), m2(random_floats(n, 125, -0.1f, 0.1f), {n});
        Twin v2(random_floats(n, 126, 0.0f, 0.01f), {n}), g2(random_floats(n, 127, -3, 3), {n});
        AdamWParams q = p;
        if (pass == 1) q.lr = 1.0f;  // not read: the block's constants apply
        ops::adamw_update(
            g, tail(w2), tail(g2), tail(m2), tail(v2), q, {}, DType::F32, {},
            pass == 1 ? make_view(dev_block, DType::F64, {step_params::Count}, Device::CUDA) : TensorView{});
        if (pass == 0)
            by_args = {w2.device_values(), m2.device_values(), v2.device_values()};
        else {
            cmp.bits("adamw from the step block: param", w2.device_values(), by_args[0]);
            cmp.bits("adamw from the step block: exp_avg", m2.device_values(), by_args[1]);
            cmp.bits("adamw from the step block: exp_avg_sq", v2.device_values(), by_args[2]);
        }
    }
    device::cuda_free(dev_block);
    return cmp;
}

/// AdamW with the weights' working copy and the gradients in 16 bits (bf16/f16 runs: the copy is the
/// 16-bit weights' arena, fp16 runs keep 16-bit gradients): the bits of the same update from f32
/// gradients holding the same values into an f32 copy holding the rounding (the path `adamw` holds
/// to the CPU op), with 16-bit zeros left in the gradients; on the whole arrays (the 16-byte bulk
/// of 8 elements and a tail of 7) and from element 3 (misaligned: one element at a time).
Compare check_adamw_16bit() {
    Compare cmp;
    auto g = gpu_ctx();
    const int64_t n = 10007;
    for (DType dt : {DType::BF16, DType::F16})
        for (int64_t at : {int64_t{0}, int64_t{3}}) {
            const std::string tag = fmt::format(" ({}, from element {})", dtype_name(dt), at);
            const auto part = [&](const TensorView& t) { return slice_1d(t, at, n - at); };
            Twin w(random_floats(n, 170), {n}), m(random_floats(n, 171, -0.1f, 0.1f), {n});
            Twin v(random_floats(n, 172, 0.0f, 0.01f), {n}), grad(rounded_values(random_floats(n, 173, -3, 3), dt), {n});
            Twin w32(w.host(), {n}), m32(m.host(), {n}), v32(v.host(), {n}), grad32(grad.host(), {n});
            Twin copy32(std::vector<float>(n), {n}), zeros(std::vector<float>(n), {n}), back(std::vector<float>(n), {n});
            Device16 grad16(grad, dt, {n}), copy16(zeros, dt, {n});
            AdamWParams p;
            p.lr = 3e-3f;
            p.weight_decay = 0.1f;
            p.step = 7;
            p.grad_scale = 0.5f;
            p.zero_grad = true;
            ops::adamw_update(g, part(w.gpu()), part(grad16.gpu()), part(m.gpu()), part(v.gpu()), p,
                              part(copy16.gpu()), dt);
            ops::adamw_update(g, part(w32.gpu()), part(grad32.gpu()), part(m32.gpu()), part(v32.gpu()), p,
                              part(copy32.gpu()), dt);
            cmp.bits("adamw 16-bit grad: param" + tag, w.device_values(), w32.device_values());
            cmp.bits("adamw 16-bit grad: exp_avg" + tag, m.device_values(), m32.device_values());
            cmp.bits("adamw 16-bit grad: exp_avg_sq" + tag, v.device_values(), v32.device_values());
            cmp.bits("adamw 16-bit copy" + tag, copy16.widened(back), copy32.device_values());
            cmp.bits("adamw 16-bit zeroed grad" + tag, grad16.widened(back), grad32.device_values());
            // The copy is the rounding of the GPU's own fp32 weights (precision.h), untouched before `at`.
            std::vector<float> rounded = rounded_values(w.device_values(), dt);
            std::fill(rounded.begin(), rounded.begin() + at, 0.0f);
            cmp.bits("adamw 16-bit copy = round(param)" + tag, copy16.widened(back), rounded);
        }
    return cmp;
}

/// Deterministic mode: the reduction-heavy ops twice on the same inputs give the same bits.
Compare check_deterministic() {
    device::set_deterministic(true);
    auto run = [] {
        std::vector<std::vector<float>> outs;
        const AttnCase a{96, 2, 2, 64, 0.1f, 0, 2};
        const AttentionParams p = attn_params(a);
        const int64_t qkv_n = a.S * a.B * a.A * 3 * a.D, out_n = a.S * a.B * a.A * a.D;
        Twin qkv(random_floats(qkv_n, 130), {a.S, a.B, a.A * 3 * a.D});
        Twin out(std::vector<float>(out_n), {a.S, a.B, a.A * a.D}), dout(random_floats(out_n, 131), {a.S, a.B, a.A * a.D});
        Twin dqkv(std::vector<float>(qkv_n), {a.S, a.B, a.A * 3 * a.D});
        const int64_t lse_n = ops::attention_saved_elements(Device::CUDA, p, a.S);
        Twin lse(std::vector<float>(lse_n), {lse_n}), ws(std::vector<float>(lse_n), {lse_n});
        auto g = gpu_ctx();
        ops::attention_forward(g, out.gpu(), lse.gpu(), qkv.gpu(), ws.gpu(), p);
        ops::attention_backward(g, dqkv.gpu(), dout.gpu(), qkv.gpu(), out.gpu(), lse.gpu(), ws.gpu(), p);
        outs.push_back(out.device_values());
        outs.push_back(dqkv.device_values());
        {  // grouped-query attention: dk/dv summed over a group's heads, in order
            const AttnCase q{96, 2, 4, 64, 0.1f, 0, 4, 2};
            const AttentionParams pq = attn_params(q);
            const int64_t row = (q.A + 2 * q.G) * q.D, n = q.S * q.B * row, on = q.S * q.B * q.A * q.D;
            Twin gqkv(random_floats(n, 138), {q.S, q.B, row}), gdqkv(std::vector<float>(n), {q.S, q.B, row});
            Twin gout(std::vector<float>(on), {q.S, q.B, q.A * q.D}), gdout(random_floats(on, 139), {q.S, q.B, q.A * q.D});
            const int64_t ln = ops::attention_saved_elements(Device::CUDA, pq, q.S);
            Twin glse(std::vector<float>(ln), {ln}), gws(std::vector<float>(ln), {ln});
            ops::attention_forward(g, gout.gpu(), glse.gpu(), gqkv.gpu(), gws.gpu(), pq);
            ops::attention_backward(g, gdqkv.gpu(), gdout.gpu(), gqkv.gpu(), gout.gpu(), glse.gpu(), gws.gpu(), pq);
            outs.push_back(gout.device_values());
            outs.push_back(gdqkv.device_values());
        }
        const int64_t N = 1200, H = 96;
        Twin x(random_floats(N * H, 132), {N, H}), w(random_floats(H * H, 133), {H, H}), dy(random_floats(N * H, 134), {N, H});
        Twin dx(std::vector<float>(N * H), {N, H}), dw(std::vector<float>(H * H), {H, H}), db(std::vector<float>(H), {H});
        ops::linear_backward(g, dx.gpu(), dw.gpu(), db.gpu(), dy.gpu(), x.gpu(), w.gpu(), false);
        outs.push_back(dx.device_values());
        outs.push_back(dw.device_values());
        outs.push_back(db.device_values());
        Twin mean(std::vector<float>(N), {N}), rstd(std::vector<float>(N), {N}), lw(random_floats(H, 135), {H});
        Twin lb(random_floats(H, 136), {H}), ldw(std::vector<float>(H), {H}), ldb(std::vector<float>(H), {H});
        ops::layernorm_forward(g, dx.gpu(), mean.gpu(), rstd.gpu(), x.gpu(), lw.gpu(), lb.gpu(), 1e-5f);
        ops::layernorm_backward(g, dx.gpu(), ldw.gpu(), ldb.gpu(), dy.gpu(), x.gpu(), mean.gpu(), rstd.gpu(), lw.gpu(),
                                false);
        outs.push_back(dx.device_values());
        outs.push_back(ldw.device_values());
        const std::vector<int32_t> idv = random_ids(N, 0, 50, 137);
        Twin ids(ids_as_floats(idv), {N}), dtable(std::vector<float>(50 * H), {50, H});
        ops::embedding_backward(g, dtable.gpu(), dy.gpu(), ids.gpu_i32(), 0);
        outs.push_back(dtable.device_values());
        outs.push_back({static_cast<float>(ops::sum_squares(g, x.gpu()))});
        return outs;
    };
    const auto first = run(), second = run();
    device::set_deterministic(false);
    Compare cmp;
    for (size_t i = 0; i < first.size(); ++i) cmp.bits(fmt::format("run-to-run output {}", i), second[i], first[i]);
    return cmp;
}

const std::vector<std::pair<std::string, CheckDef>>& registry() {
    static const std::vector<std::pair<std::string, CheckDef>> r = {
        {"elementwise", {check_elementwise, 0.0}},
        {"round_to", {check_round_to, 0.0}},
        {"sum_squares", {check_sum_squares, 1e-6}},
        {"gradient_norm", {check_gradient_norm, 1e-5}},
        {"matmul_f32", {check_matmul_f32, 1e-5}},
        {"matmul_bf16", {check_matmul_bf16, 1e-2}},
        {"linear", {check_linear, 1e-5}},
        {"bf16_gemm_inputs", {check_bf16_gemm_inputs, 1e-4}},
        {"linear_epilogues", {[] { return check_linear_epilogues(false); }, 1e-5}},
        {"linear_epilogues_bf16", {[] { return check_linear_epilogues(true); }, 1e-2}},
        {"embedding", {check_embedding, 1e-5}},
        {"norms", {check_norms, 1e-5}},
        {"gelu", {check_gelu, 1e-5}},
        {"swiglu", {check_swiglu, 1e-5}},
        {"rope", {check_rope, 1e-5}},
        {"dropout_masks", {check_dropout_masks, 0.0}},
        {"dropout_add", {check_dropout_add, 1e-6}},
        {"residual_norm", {check_residual_norm, 1e-5}},
        {"storage_16bit", {check_storage_16bit, 0.0}},
        {"gemm_16bit", {check_gemm_16bit, 1e-2}},
        {"f16_gradients", {check_f16_gradients, 1e-2}},
        {"attention_forward", {check_attention_forward, 1e-5}},
        {"attention_backward", {check_attention_backward, 5e-5}},
        {"attention_tensor_cores", {check_attention_tensor_cores, 1e-2}},
        {"attention_gqa", {check_attention_gqa, 5e-5}},
        {"attention_gqa_tensor_cores", {check_attention_gqa_tensor_cores, 1e-2}},
        {"attention_cudnn", {check_attention_cudnn, 1e-2}},
        {"attention_16bit", {check_attention_16bit, 1e-2}},
        {"attention_cudnn_16bit", {check_attention_cudnn_16bit, 1e-2}},
        {"cached_attention", {check_cached_attention, 1e-5}},
        {"cross_entropy", {check_cross_entropy, 1e-5}},
        {"adamw", {check_adamw, 1e-5}},
        {"adamw_16bit", {check_adamw_16bit, 0.0}},
        {"deterministic", {check_deterministic, 0.0}},
    };
    return r;
}

}  // namespace

std::string cuda_unavailable_reason() {
    const DeviceReport r = probe_devices();
    if (!r.cuda_kernels_built) return r.reason.empty() ? "this build has no CUDA kernels" : r.reason;
    if (r.cuda_devices == 0) return r.reason;
    return "";
}

std::vector<std::string> cuda_check_names() {
    std::vector<std::string> names;
    for (const auto& [name, def] : registry()) names.push_back(name);
    return names;
}

CudaCheckResult run_cuda_check(const std::string& name) {
    CudaCheckResult res;
    res.name = name;
    const auto& r = registry();
    const auto it = std::find_if(r.begin(), r.end(), [&](const auto& e) { return e.first == name; });
    if (it == r.end()) {
        res.detail = "no such check";
        return res;
    }
    res.tolerance = it->second.tolerance;
    try {
        const Compare cmp = it->second.fn();
        device::synchronize();
        res.error = cmp.worst;
        res.detail = cmp.which;
        res.passed = cmp.worst <= res.tolerance;
    } catch (const std::exception& e) {
        res.detail = e.what();
        res.passed = false;
    }
    return res;
}

}  // namespace mwb::test
