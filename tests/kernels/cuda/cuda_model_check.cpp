#include "cuda_model_check.h"

#include "backend/generate/decoder.h"
#include "backend/generate/sampler.h"
#include "backend/model/gpt_model.h"
#include "backend/optim/optimizer.h"
#include "backend/parallel/nccl_communicator.h"
#include "backend/parallel/self_communicator.h"
#include "backend/config/validate.h"
#include "backend/data/mock_data.h"
#include "backend/train/interval_stats.h"
#include "backend/train/progress.h"
#include "backend/train/run_objects.h"
#include "backend/train/train_step.h"

#include "mwb/kernels/device_runtime.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

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

/// The training step's inputs for check_cuda_graph: a tiny GPT with dropout, two micro-batches per
/// iteration, clipping; fp16 with a dynamic loss scale that grows every two clean steps (so it changes
/// while the graph replays), or bf16. Deterministic: cuBLAS's reductions pinned, the own attention.
/// `ramp`: a batch ramp (rampup_batch_size 4 4 20 up to 8): iterations 1-5 with half the micro-batches
/// of iterations 6-14, so StepGraph warms up, captures and replays a graph per count. `tp` and
/// `world`: tensor parallelism and the ranks (the rest data-parallel; NCCL inside the graph).
Config graph_check_config(const std::string& precision, bool graph, bool ramp = false, int tp = 1, int world = 1,
                          const std::string& device = "cuda") {
    Config c;
    c.model.num_layers = 2;
    c.model.hidden_size = 64;
    c.model.num_attention_heads = 4;
    c.model.seq_length = 32;
    c.model.make_vocab_size_divisible_by = 64;
    c.model.vocab_size = 256;
    c.model.hidden_dropout = 0.1;
    c.model.attention_dropout = 0.1;
    c.data.tokenizer_type = "NullTokenizer";
    c.data.mock_data = true;
    c.parallel.tensor_model_parallel_size = tp;
    c.training.micro_batch_size = 2;
    c.training.global_batch_size = 4 * (world / tp);  // two micro-batches per data-parallel rank
    c.training.train_iters = 12;
    if (ramp) {
        c.training.global_batch_size = 8;
        c.training.rampup_batch_size = {"4", "4", "20"};
        c.training.train_iters = 14;
    }
    c.training.lr = 1e-3;
    c.training.clip_grad = 1.0;
    c.training.fp16 = precision == "fp16";
    c.training.bf16 = precision == "bf16";
    c.training.initial_loss_scale = 1024.0;
    c.training.loss_scale_window = 2;
    c.runtime.device = device;
    c.runtime.deterministic = true;
    c.runtime.enable_cuda_graph = graph;
    c.runtime.cuda_graph_warmup_steps = 2;
    resolve(c, world, 256);
    check_config(c, world);
    return c;
}

/// This process's world: one rank, or every rank of `mpirun -np N mwb-gpu-check cuda_graph` (each on
/// its node-local GPU).
World& check_world() {
    static int argc = 1;
    static char name[] = "mwb-gpu-check";
    static char* args[] = {name, nullptr};
    static char** argv = args;
    static World world(&argc, &argv);
    return world;
}

struct GraphCheckRun {
    std::vector<double> loss_sums, grad_norms, loss_scales;
    int64_t skipped = 0, replays = 0, graphs = 0;
    DType grad_dtype = DType::F32;  ///< the gradient arena's
};

/// `iterations` whole TrainSteps of `c` on check_world()'s ranks.
GraphCheckRun train_steps(const Config& c, int iterations) {
    ParallelContext par(check_world(), c.parallel);
    RunObjects o(c, par);
    const data::MockSampleSource train(c.model.seq_length, c.model.vocab_size, 1234, 0);
    IntervalLog log(c, par, o.alloc, o.flops, o.dims.seq, nullptr, false);
    TrainStep step(o, train, log, nullptr);
    Progress p;
    GraphCheckRun r;
    for (int i = 0; i < iterations; ++i) {
        step.run(p);
        r.loss_sums.push_back(log.stats().loss);  // the running sum of the finite losses
        r.grad_norms.push_back(p.last_grad_norm);
        r.loss_scales.push_back(p.last_loss_scale);
    }
    r.skipped = p.skipped;
    r.replays = step.graph().replays();
    r.graphs = step.graph().graphs();
    r.grad_dtype = o.model.grads().dtype;
    return r;
}

}  // namespace

CudaCheckResult check_cuda_graph() {
    CudaCheckResult res;
    res.name = "cuda_graph";
    res.tolerance = 0;
    try {
        constexpr int kWarmup = 2;
        std::string detail;
        struct Case {
            std::string precision;
            bool ramp;
            int tp;
        };
        // One GPU: fp16, bf16, a bf16 batch ramp. Under `mpirun -np 2` on two GPUs: data-parallel bf16,
        // tensor-parallel bf16 and a data-parallel fp16 ramp (NCCL captured in the graphs).
        World& world = check_world();
        const int ranks = world.size();
        if (ranks > 1) device::set_device(world.local_rank());
        const std::vector<Case> cases =
            ranks == 1 ? std::vector<Case>{{"fp16", false, 1}, {"bf16", false, 1}, {"bf16", true, 1}}
                       : std::vector<Case>{{"bf16", false, 1}, {"bf16", false, ranks}, {"fp16", true, 1}};
        for (const Case& k : cases) {
            const std::string layout = ranks == 1 ? "" : k.tp > 1 ? fmt::format(" tp{}", k.tp) : fmt::format(" dp{}", ranks);
            const std::string precision = k.precision + layout + (k.ramp ? " ramp" : "");
            // Without a ramp: 2 eager steps, a capture, 9 replays. The ramp: per count (2 micro-batches
            // in iterations 1-5, 4 in 6-14) 2 eager steps, a capture, the rest replays: 2 + 6, two graphs.
            const int kIterations = k.ramp ? 14 : 12;
            const int64_t want_replays = k.ramp ? 8 : kIterations - kWarmup - 1, want_graphs = k.ramp ? 2 : 1;
            const GraphCheckRun eager =
                train_steps(graph_check_config(k.precision, false, k.ramp, k.tp, ranks), kIterations);
            const GraphCheckRun graph =
                train_steps(graph_check_config(k.precision, true, k.ramp, k.tp, ranks), kIterations);
            const auto first_difference = [&](const char* what, const std::vector<double>& a,
                                              const std::vector<double>& b) {
                for (std::size_t i = 0; i < a.size(); ++i)
                    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) {
                        res.error += 1;
                        if (res.detail.empty())
                            res.detail = fmt::format("{}: {} of iteration {}: {:.17g} eager, {:.17g} graphed", precision,
                                                     what, i + 1, a[i], b[i]);
                        return;
                    }
            };
            first_difference("loss (running sum)", eager.loss_sums, graph.loss_sums);
            first_difference("gradient norm", eager.grad_norms, graph.grad_norms);
            first_difference("loss scale", eager.loss_scales, graph.loss_scales);
            if (graph.replays != want_replays || graph.graphs != want_graphs) {
                res.error += 1;
                if (res.detail.empty())
                    res.detail = fmt::format("{}: {} replays of {} graphs, not {} of {} (each captured once after {} "
                                             "eager steps at its micro-batch count)",
                                             precision, graph.replays, graph.graphs, want_replays, want_graphs, kWarmup);
            }
            // The loss scale must change while the graph replays, or the check proves nothing about it.
            const bool scale_moved = k.precision != "fp16" || graph.loss_scales[kWarmup + 1] != graph.loss_scales.back();
            if (!scale_moved) {
                res.error += 1;
                if (res.detail.empty()) res.detail = precision + ": the loss scale did not change while the graph replayed";
            }
            detail += fmt::format("{}{}: {} replays, loss scale {:g} -> {:g}, {} skipped", detail.empty() ? "" : "; ",
                                  precision, graph.replays, graph.loss_scales.front(), graph.loss_scales.back(),
                                  graph.skipped);
        }
        if (res.detail.empty()) res.detail = "bit-identical to eager: " + detail;
        res.passed = res.error == 0;
    } catch (const std::exception& e) {
        res.detail = e.what();
    }
    return res;
}

CudaCheckResult check_model_fp16_gradients() {
    CudaCheckResult res;
    res.name = "model_fp16_gradients";
    res.tolerance = 1e-2;
    try {
        constexpr int kIterations = 6;
        Config gpu_config = graph_check_config("fp16", false), cpu_config = graph_check_config("fp16", false, false, 1, 1, "cpu");
        gpu_config.training.accumulate_allreduce_grads_in_fp32 = false;
        cpu_config.training.accumulate_allreduce_grads_in_fp32 = false;
        const GraphCheckRun gpu = train_steps(gpu_config, kIterations), cpu = train_steps(cpu_config, kIterations);
        if (gpu.grad_dtype != DType::F16 || cpu.grad_dtype != DType::F16) {
            res.error = 1;
            res.detail = fmt::format("gradient arenas {} on the GPU, {} on the CPU, not f16", dtype_name(gpu.grad_dtype),
                                     dtype_name(cpu.grad_dtype));
        }
        const auto worst = [&](const char* what, const std::vector<double>& g, const std::vector<double>& c) {
            for (std::size_t i = 0; i < c.size(); ++i) {
                double e = std::abs(g[i] - c[i]) / std::max(std::abs(c[i]), 1e-30);
                if (std::isnan(e)) e = std::numeric_limits<double>::infinity();
                if (e > res.error) {
                    res.error = e;
                    res.detail = fmt::format("{} of iteration {}: {:.9g} on the GPU, {:.9g} on the CPU", what, i + 1,
                                             g[i], c[i]);
                }
            }
        };
        worst("loss (running sum)", gpu.loss_sums, cpu.loss_sums);
        worst("gradient norm", gpu.grad_norms, cpu.grad_norms);
        worst("loss scale", gpu.loss_scales, cpu.loss_scales);
        res.passed = res.error <= res.tolerance;
    } catch (const std::exception& e) {
        res.detail = e.what();
    }
    return res;
}

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
