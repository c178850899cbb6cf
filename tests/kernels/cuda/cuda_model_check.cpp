#include "cuda_model_check.h"

#include "backend/generate/decoder.h"
#include "backend/generate/sampler.h"
#include "backend/model/gpt_model.h"
#include "backend/optim/optimizer.h"
#include "backend/parallel/nccl_communicator.h"
#include "backend/parallel/self_communicator.h"

#include "mwb/kernels/device_runtime.h"

#include <fmt/format.h>

#include <chrono>
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

CudaCheckResult check_nccl_group_of_one() {
    CudaCheckResult res;
    res.name = "nccl";
    res.tolerance = 0;
    try {
        SelfCommunicator host("check");
        NcclCommunicator nccl(host, nullptr, false);
        OpContext ctx{Device::CUDA, nullptr};
        const int64_t n = 1 << 20;
        std::vector<float> values(static_cast<std::size_t>(n));
        for (int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = static_cast<float>(i % 1000) * 0.5f;
        float* a = static_cast<float*>(device::cuda_malloc(n * 4));
        float* b = static_cast<float*>(device::cuda_malloc(n * 4));
        const auto view = [&](float* p) { return make_view(p, DType::F32, {n}, Device::CUDA); };
        const auto host_view = [&](std::vector<float>& v) { return make_view(v.data(), DType::F32, {n}); };
        std::vector<float> got(static_cast<std::size_t>(n)), want = values;
        const auto compare = [&](const char* step) {
            ops::copy(ctx, host_view(got), view(b));
            if (got != want && res.detail.empty()) {
                res.error = 1;
                res.detail = fmt::format("{}: wrong values", step);
            }
        };
        ops::copy(ctx, view(a), host_view(values));
        // Queued on the compute stream before the collective, which must wait for it.
        ops::scale(ctx, view(a), 2.0f);
        nccl.all_reduce_sum(a, n);  // a group of one: the values themselves
        ops::copy(ctx, view(b), view(a));
        for (auto& w : want) w *= 2.0f;
        compare("scale, then all-reduce");
        nccl.all_reduce_max(a, n);
        nccl.all_gather(a, b, n);
        compare("all-gather");
        nccl.reduce_scatter_sum(a, b, n);
        compare("reduce-scatter");
        nccl.broadcast(a, n * 4, 0);
        nccl.gather(a, b, n * 4, 0);
        compare("gather");
        ops::fill(ctx, view(b), 0.0f);
        const Message send{a, n, 0, 0}, recv{b, n, 0, 0};
        nccl.exchange({&send, 1}, {&recv, 1})->wait();
        compare("exchange with itself");
        nccl.synchronize();
        device::cuda_free(a);
        device::cuda_free(b);
        res.detail = res.detail.empty() ? "all-reduce, all-gather, reduce-scatter, broadcast, gather, exchange" : res.detail;
        res.passed = res.error == 0;
    } catch (const std::exception& e) {
        res.detail = e.what();
    }
    return res;
}

CudaCheckResult check_nccl_timeout() {
    CudaCheckResult res;
    res.name = "nccl_timeout";
    res.tolerance = 0;
    try {
        // A receive nothing will ever match (a group of one, no send): the kernel waits forever. The
        // host wait must give up after the 2 s timeout, abort the communicator and say who and what.
        SelfCommunicator host("check");
        NcclCommunicator nccl(host, nullptr, false, 2.0);
        float* a = static_cast<float*>(device::cuda_malloc(1024 * 4));
        const Message recv{a, 1024, 0, 0};
        const auto t0 = std::chrono::steady_clock::now();
        std::string message;
        try {
            nccl.exchange({}, {&recv, 1});
        } catch (const std::exception& e) {
            message = e.what();
        }
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        bool reused_fails = false;
        try {
            nccl.synchronize();
        } catch (const std::exception&) {
            reused_fails = true;  // aborted: later calls fail by name instead of touching a dead communicator
        }
        device::synchronize();  // the aborted kernel must not have poisoned the context
        device::cuda_free(a);
        const bool named = message.find("check group") != std::string::npos &&
                           message.find("recv 1024 floats from 0") != std::string::npos &&
                           message.find("world rank 0") != std::string::npos &&
                           message.find("did not complete") != std::string::npos;
        res.error = named && reused_fails && waited >= 2.0 && waited < 30.0 ? 0 : 1;
        res.detail = fmt::format("gave up after {:.1f} s: {}{}", waited, message.empty() ? "(no error)" : message,
                                 reused_fails ? "" : "; the aborted communicator still accepted a call");
        res.passed = res.error == 0;
    } catch (const std::exception& e) {
        res.detail = e.what();
    }
    return res;
}

CudaCheckResult check_generation_against_cpu() {
    CudaCheckResult res;
    res.name = "generation";
    res.tolerance = 1e-4;
    try {
        GptDims gpt = small_dims();
        gpt.hidden_dropout = gpt.attention_dropout = 0;
        gpt.seq = gpt.micro_batch = 1;
        GptDims llama = gpt;
        llama.heads = 4;  // head dim 16, two key/value groups
        llama.groups = 2;
        llama.swiglu = true;
        llama.linear_bias = false;
        llama.rmsnorm = true;
        llama.positions = GptDims::Positions::Rope;
        llama.rotary_dim = 16;
        llama.tied_output = false;
        for (const auto& [name, d] : {std::pair{"gpt", gpt}, std::pair{"llama", llama}}) {
            OpContext ctx;
            Allocator alloc;
            GptModel model(d, RecomputePolicy{}, DType::F32, ctx, alloc, false);
            model.init_weights(7);
            const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {9}, {17, 3, 200, 45, 6, 7, 8}, {44, 2}};
            const int64_t n = static_cast<int64_t>(prompts.size()), V = d.vocab, steps = 12;
            generate::Decoder cpu(d, model.layout(), model.params(), n, 24, Device::CPU);
            generate::Decoder gpu(d, model.layout(), model.params(), n, 24, Device::CUDA);
            std::vector<float> lc(static_cast<std::size_t>(n * V)), lg(lc.size());
            const auto compare = [&](const std::string& what, int64_t rows) {
                double diff = 0, scale = 0;
                for (int64_t e = 0; e < rows * V; ++e) {
                    diff = std::max(diff, std::abs(static_cast<double>(lg[e]) - lc[e]));
                    scale = std::max(scale, std::abs(static_cast<double>(lc[e])));
                }
                const double err = diff / scale;
                if (err >= res.error) {
                    res.error = err;
                    res.detail = fmt::format("{}: logits of {}", name, what);
                }
            };
            std::vector<int64_t> active;
            std::vector<int32_t> next;
            for (int64_t r = 0; r < n; ++r) {
                cpu.prefill(r, prompts[r], lc.data());
                gpu.prefill(r, prompts[r], lg.data());
                compare(fmt::format("prefill of row {}", r), 1);
                active.push_back(r);
                next.push_back(generate::argmax(lc.data(), V));
            }
            for (int64_t step = 0; step < steps; ++step) {
                cpu.decode(active, next, lc.data());
                gpu.decode(active, next, lg.data());
                compare(fmt::format("decode step {} ({} rows)", step, active.size()), static_cast<int64_t>(active.size()));
                for (std::size_t i = 0; i < active.size(); ++i) {
                    const int32_t tc = generate::argmax(lc.data() + i * V, V), tg = generate::argmax(lg.data() + i * V, V);
                    if (tc != tg) throw std::runtime_error(fmt::format("{}: step {} row {}: token {} on the GPU, {} on the CPU",
                                                                       name, step, active[i], tg, tc));
                    next[i] = tc;
                }
                if (step % 4 == 3) {  // a row finishes: the batch shrinks, the others keep their positions
                    active.erase(active.begin());
                    next.erase(next.begin());
                }
            }
        }
        res.passed = res.error <= res.tolerance;
    } catch (const std::exception& e) {
        res.detail = e.what();
    }
    return res;
}

}  // namespace mwb::test
