// mwb-gpu-bench: training throughput of the engine's own model on one GPU — GptModel + AdamW on the
// CUDA ops, device memory through the caching Allocator — and the bf16 matrix peak it is measured
// against. The model is mwb-train's configuration: --preset NAME and/or Megatron-LM-named flags (the
// field table of backend/config/fields.cpp, the same ConfigFlags as mwb-train), so a GPT-2, a 1.3B
// GPT and the Llama-3.2-1B shape (RoPE, SwiGLU, grouped-query attention, RMSNorm, no biases) are
// all one command line. One GPU: tensor and pipeline parallel size 1, one micro-batch per iteration.
// Prints one JSON line: tokens/s, model TFLOP/s (backend/telemetry/flops.h, the planner's count), MFU
// against the catalogue's H200 peak (resources/gpus.json) and against the bf16 matmul peak measured
// in the same process, peak memory. `--describe` prints the resolved shape, parameter count and FLOPs
// without a GPU. `mwb-gpu-bench attention` times the attention core alone (attention_bench.cpp).
//
// Precision, as it is today: the weights' working copy and the stored activations are 16-bit tensors
// of the run's 16-bit type (--bf16, as on the CPU; fp32 master weights, gradients and moments); with
// bf16 storage the GEMMs read them directly on bf16 tensor cores (fp32 accumulation; the few fp32
// operands left, dropout-scaled gradients, converted first), with fp32 storage they run in fp32 (TF32
// unless --no-tf32). The JSON says so in "precision".
#include "attention_bench.h"
#include "backend/config/cli.h"
#include "backend/config/validate.h"
#include "backend/data/tokenizer.h"
#include "backend/model/gpt_model.h"
#include "backend/optim/optimizer.h"
#include "backend/telemetry/flops.h"

#include "mwb/kernels/device.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"
#include "mwb/planner/cluster.h"
#include "mwb/planner/layout.h"
#include "mwb/planner/parameters.h"
#include "mwb/planner/presets.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

using namespace mwb;
using Clock = std::chrono::steady_clock;

namespace {

struct BenchArgs {
    std::string preset;
    int iters = 5, warmup = 2;
    bool no_tf32 = false;
    bool describe = false;
    double peak_tflops = 0;  // 0: measure
    std::string label = "gpt";
};

/// The configuration of a one-GPU benchmark run: the preset (or Megatron-LM's defaults) under the
/// flags, on one rank, one micro-batch per iteration, mock data. Throws ConfigError naming the field.
Config bench_config(const BenchArgs& a, const ConfigFlags& flags) {
    Config c = a.preset.empty() ? Config{} : planner::load_preset(a.preset);
    // Random tokens of --vocab-size ids, as the PyTorch side draws them (the presets say so themselves).
    if (a.preset.empty()) c.data.tokenizer_type = "NullTokenizer";
    flags.apply(c);
    c.parallel.tensor_model_parallel_size = 1;
    c.parallel.pipeline_model_parallel_size = 1;
    c.training.global_batch_size = c.training.micro_batch_size;
    c.training.train_iters = a.warmup + a.iters;
    if (c.training.lr == kLrNotGiven) c.training.lr = 1e-4;
    c.data.mock_data = true;
    // Dropout off: a throughput run, as PyTorch's side (the presets of the big models have none either).
    c.model.hidden_dropout = 0;
    c.model.attention_dropout = 0;
    const auto tokenizer = data::make_tokenizer(c.data, c.model);
    for (const std::string& note : resolve(c, 1, tokenizer->vocab_size()))
        std::fprintf(stderr, "mwb-gpu-bench: %s\n", note.c_str());
    check_config(c, 1);
    return c;
}

/// What both the run and --describe report about the model: its shape, parameters and FLOPs.
nlohmann::json describe(const Config& c, const GptDims& d, const FlopCounts& flops) {
    const planner::ModelShape shape = planner::ModelShape::from(c);
    const int64_t params = planner::count_parameters(shape, planner::Layout::from(c, 1)).total;
    return {
        {"layers", d.layers}, {"hidden", d.hidden}, {"heads", d.heads}, {"groups", d.kv_groups()},
        {"head_dim", d.head_dim()}, {"ffn", d.ffn}, {"seq", d.seq}, {"micro_batch", d.micro_batch},
        {"vocab", d.vocab}, {"swiglu", d.swiglu}, {"rmsnorm", d.rmsnorm}, {"rope", d.positions == GptDims::Positions::Rope},
        {"linear_bias", d.linear_bias}, {"tied_output", d.tied_output},
        {"params", params},
        {"model_flops_per_iter", flops.model},
        {"flops", std::string("backend/telemetry/flops.h (Narayanan et al. eq. 3, Megatron-LM's count; attention ") +
                      c.telemetry.mfu_attention_flops + ")"},
    };
}

/// The measured bf16 GEMM peak: 8192³ products on cuBLAS (bf16 inputs, fp32 accumulation, bf16 out),
/// mean of ten after three warm-ups, on random data.
double measure_bf16_peak_tflops() {
    const int64_t n = 8192;
    OpContext ctx{Device::CUDA, nullptr};
    std::vector<float> host(static_cast<size_t>(n * n));
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> dist(-1, 1);
    for (auto& x : host) x = dist(gen);
    void* f = device::cuda_malloc(n * n * 4);
    void* a = device::cuda_malloc(n * n * 2);
    void* b = device::cuda_malloc(n * n * 2);
    void* c = device::cuda_malloc(n * n * 2);
    device::copy_to_device(f, host.data(), n * n * 4);
    const TensorView vf = make_view(f, DType::F32, {n, n}, Device::CUDA);
    const TensorView va = make_view(a, DType::BF16, {n, n}, Device::CUDA), vb = make_view(b, DType::BF16, {n, n}, Device::CUDA);
    const TensorView vc = make_view(c, DType::BF16, {n, n}, Device::CUDA);
    ops::copy(ctx, va, vf);
    ops::copy(ctx, vb, vf);
    for (int i = 0; i < 3; ++i) ops::matmul(ctx, vc, va, vb, false, true);
    device::synchronize();
    const auto t0 = Clock::now();
    for (int i = 0; i < 10; ++i) ops::matmul(ctx, vc, va, vb, false, true);
    device::synchronize();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count() / 10;
    for (void* p : {f, a, b, c}) device::cuda_free(p);
    return 2.0 * n * n * n / s / 1e12;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "attention") == 0) return bench::run_attention_bench(argc - 1, argv + 1);
    CLI::App app{"mwb-gpu-bench: the engine's training step on one GPU (GptModel + AdamW), as mwb-train configures it. "
                 "`mwb-gpu-bench attention --help`: the attention core alone.",
                 "mwb-gpu-bench"};
    app.set_help_flag("-h,--help", "Print this help and exit");
    BenchArgs a;
    app.add_option("--preset", a.preset, "A preset by name (resources/presets/NAME.json, e.g. llama-3.2-1b); flags override it");
    app.add_option("--iters", a.iters, "Timed iterations")->check(CLI::PositiveNumber);
    app.add_option("--warmup", a.warmup, "Untimed iterations first")->check(CLI::NonNegativeNumber);
    app.add_flag("--no-tf32", a.no_tf32, "fp32 GEMMs without TF32 tensor cores");
    app.add_option("--peak-tflops", a.peak_tflops, "The bf16 peak to measure MFU against; 0 measures it (8192^3)");
    app.add_option("--label", a.label, "A name for the JSON line");
    app.add_flag("--describe", a.describe, "Print the resolved shape, parameters and FLOPs as JSON (no GPU needed) and exit");
    const ConfigFlags flags(app);
    if (const auto code = parse_command_line(app, argc, argv)) return *code;

    Config cfg;
    GptDims d;
    FlopCounts flops;
    nlohmann::json shape;
    try {
        cfg = bench_config(a, flags);
        d = GptDims::from_config(cfg);
        flops = flops_per_iteration(cfg);
        shape = describe(cfg, d, flops);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mwb-gpu-bench: %s\n", e.what());
        return 2;
    }
    if (a.describe) {
        std::printf("%s\n", shape.dump().c_str());
        return 0;
    }
    const DeviceReport r = probe_devices();
    if (r.cuda_devices == 0) {
        std::printf("no CUDA device: %s\n", r.reason.c_str());
        return 77;
    }
    try {
        device::set_allow_tf32(!a.no_tf32);
        device::set_deterministic(cfg.runtime.deterministic);  // bit-identical run to run (TF32 off)
        const double measured_peak = a.peak_tflops > 0 ? a.peak_tflops : measure_bf16_peak_tflops();
        // MFU's usual yardstick: the datasheet's dense 16-bit peak of the catalogue (resources/gpus.json).
        const double h200_peak = planner::find_device(planner::device_catalogue(), "H200").peak_flops_16bit / 1e12;

        const DType storage = storage_dtype(cfg.training);
        OpContext ctx{Device::CUDA, nullptr};
        // 16-bit storage keeps every GEMM operand a 16-bit value: run them on tensor cores, losslessly.
        if (storage == DType::BF16) ctx.gemm_inputs = DType::BF16;
        // The attention kernels mwb-train would run for this configuration (--attention-backend).
        const AttentionBackendChoice attention =
            resolve_attention_backend(cfg.runtime.attention_backend, cfg.runtime.deterministic,
                                      ctx.gemm_inputs == DType::BF16);
        ctx.attention = attention.backend;
        Allocator alloc(Device::CUDA);
        // The gradient arena mwb-train allocates (f16 in fp16 runs without accumulate_allreduce_grads_in_fp32).
        GptModel model(d, RecomputePolicy::from_config(cfg.training), storage, ctx, alloc, /*gradients=*/true,
                       gradient_dtype(cfg.training));
        model.init_weights(1234);
        Optimizer opt(model.layout(), model.params(), model.grads(), cfg.training, storage, ctx, alloc);

        std::mt19937 gen(5);
        std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(d.vocab - 1));
        std::vector<int32_t> tokens(static_cast<size_t>(d.micro_batch * (d.seq + 1)));
        double loss = 0, iter_seconds = 0;
        for (int it = 1; it <= a.warmup + a.iters; ++it) {
            for (auto& x : tokens) x = id(gen);
            if (it == a.warmup + 1) {
                device::synchronize();
                alloc.reset_peaks();
            }
            const auto t0 = Clock::now();
            model.zero_grads();
            loss = model.forward_backward(tokens.data(), 1.0f, 1234, micro_batch_stream(it, 0));
            opt.step(cfg.training.lr, 1.0);
            device::synchronize();
            if (it > a.warmup) iter_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        }
        iter_seconds /= a.iters;
        const double T = static_cast<double>(d.micro_batch * d.seq);
        const double achieved = flops.model / iter_seconds / 1e12;
        const MemoryStats m = alloc.stats();
        const DeviceMemoryTotals tot = alloc.device_totals();
        nlohmann::json out = {
            {"engine", "mwb"},
            {"label", a.label},
            {"gpu", r.names.empty() ? "?" : r.names[0]},
            {"precision", storage == DType::BF16
                              ? std::string("bf16 weights and activations (fp32 masters and gradients); GEMMs on bf16 tensor "
                                            "cores (fp32 accumulation); tensor-core attention")
                              : fmt::format("{}; GEMMs {} on cuBLAS; fp32 flash-style attention", dtype_name(storage),
                                            !a.no_tf32 && !cfg.runtime.deterministic ? "fp32 with TF32 tensor cores" : "fp32")},
            {"deterministic", cfg.runtime.deterministic},
            {"attention_backend", attention.reason},
            {"iters", a.iters},
            {"iter_seconds", iter_seconds},
            {"tokens_per_s", T / iter_seconds},
            {"model_tflops", achieved},
            {"peak_bf16_tflops", measured_peak},
            {"mfu", achieved / measured_peak},
            {"h200_peak_tflops", h200_peak},
            {"mfu_h200", achieved / h200_peak},
            {"loss", loss},
            {"peak_allocated_bytes", m.total_peak},
            {"reserved_bytes", m.reserved},
            {"device_used_bytes", tot.total_bytes - tot.free_bytes},
            {"device_total_bytes", tot.total_bytes},
        };
        out.update(shape);
        std::printf("%s\n", out.dump().c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mwb-gpu-bench: %s\n", e.what());
        return 1;
    }
}
