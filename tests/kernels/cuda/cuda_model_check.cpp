#include "cuda_model_check.h"

#include "model/gpt_model.h"
#include "optim/optimizer.h"

#include "mwb/kernels/device_runtime.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

namespace mwb::test {

namespace {

GptDims small_dims() {
    GptDims d;
    d.layers = 2;
    d.hidden = 64;
    d.heads = 4;
    d.ffn = 256;
    d.seq = 32;
    d.micro_batch = 2;
    d.vocab = 256;
    d.max_positions = 32;
    d.hidden_dropout = 0.1f;
    d.attention_dropout = 0.1f;
    return d;
}

std::vector<int32_t> tokens(const GptDims& d, int iteration) {
    std::mt19937 gen(static_cast<uint32_t>(100 + iteration));
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(d.vocab - 1));
    std::vector<int32_t> t(static_cast<std::size_t>(d.micro_batch * (d.seq + 1)));
    for (auto& x : t) x = id(gen);
    return t;
}

}  // namespace

SmallGptRun train_small_gpt(Device device, int iterations) {
    const GptDims d = small_dims();
    OpContext ctx{device, nullptr};
    Allocator alloc(device);
    GptModel model(d, RecomputePolicy{}, DType::F32, ctx, alloc);
    model.init_weights(42);
    TrainingConfig t;
    t.weight_decay = 0.1;
    t.clip_grad = 1.0;
    Optimizer opt(model.layout(), model.params(), model.grads(), t, DType::F32, ctx, alloc);
    SmallGptRun r;
    for (int it = 1; it <= iterations; ++it) {
        model.zero_grads();
        const auto tk = tokens(d, it);
        r.losses.push_back(model.forward_backward(tk.data(), 1.0f, 42, micro_batch_stream(it, 0)));
        r.grad_norms.push_back(opt.step(1e-3, 1.0).grad_norm);
    }
    r.weights.resize(static_cast<std::size_t>(model.params().numel()));
    if (device == Device::CPU)
        std::copy(model.params().f32(), model.params().f32() + model.params().numel(), r.weights.begin());
    else
        device::copy_to_host(r.weights.data(), model.params().data, model.params().numel() * 4);
    return r;
}

CudaCheckResult check_model_against_cpu() {
    CudaCheckResult res;
    res.name = "model";
    res.tolerance = 1e-4;
    try {
        const SmallGptRun cpu = train_small_gpt(Device::CPU, 4), gpu = train_small_gpt(Device::CUDA, 4);
        for (std::size_t i = 0; i < cpu.losses.size(); ++i) {
            const double e = std::abs(gpu.losses[i] - cpu.losses[i]) / std::abs(cpu.losses[i]);
            if (e >= res.error) {
                res.error = e;
                res.detail = fmt::format("loss of iteration {}: {:.9g} on the GPU, {:.9g} on the CPU", i + 1,
                                         gpu.losses[i], cpu.losses[i]);
            }
        }
        res.passed = res.error <= res.tolerance;
    } catch (const std::exception& e) {
        res.detail = e.what();
    }
    return res;
}

}  // namespace mwb::test
