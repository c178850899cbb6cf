// mwb-gpu-bench: training throughput of the engine's own model on one GPU — GptModel + AdamW on the
// CUDA ops, device memory through the caching Allocator — and the bf16 matrix peak it is measured
// against. Prints one JSON line: tokens/s, model TFLOP/s, MFU, peak memory. `mwb-gpu-bench attention`
// times the attention core alone (attention_bench.cpp).
//
// Precision, as it is today: weights and activations are stored rounded to --storage (bf16 emulated
// in fp32 arrays, as on the CPU); with bf16 storage the GEMMs convert their (bf16-valued) inputs and
// run on bf16 tensor cores, with fp32 storage they run in fp32 (TF32 unless --no-tf32); attention is
// the fp32 flash-style kernel. The JSON says so in "precision".
#include "attention_bench.h"
#include "backend/model/gpt_model.h"
#include "backend/optim/optimizer.h"

#include "mwb/kernels/device.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

using namespace mwb;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
    int64_t layers = 12, hidden = 768, heads = 12, seq = 1024, micro_batch = 8, vocab = 50304;
    int iters = 5, warmup = 2;
    std::string storage = "bf16";
    bool tf32 = true;
    bool deterministic = false;
    double peak_tflops = 0;  // 0: measure
    std::string label = "gpt";
};

[[noreturn]] void usage(const char* why) {
    const bool help = std::strcmp(why, "help") == 0;
    if (!help) std::fprintf(stderr, "mwb-gpu-bench: %s\n", why);
    std::fprintf(help ? stdout : stderr,
                 "usage: mwb-gpu-bench attention --help\n"
                 "       mwb-gpu-bench [--layers L] [--hidden H] [--heads A] [--seq S] "
                 "[--micro-batch B] [--vocab V] [--iters N] [--warmup N] [--storage bf16|fp32] [--no-tf32] [--deterministic] "
                 "[--peak-tflops X] [--label NAME]\n");
    std::exit(help ? 0 : 2);
}

Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) usage(("missing value after " + k).c_str());
            return argv[++i];
        };
        auto integer = [&]() {
            const std::string v = next();
            char* end = nullptr;
            const long long x = std::strtoll(v.c_str(), &end, 10);
            if (*end != '\0' || x <= 0) usage((k + " needs a positive integer, got '" + v + "'").c_str());
            return static_cast<int64_t>(x);
        };
        if (k == "--layers") a.layers = integer();
        else if (k == "--hidden") a.hidden = integer();
        else if (k == "--heads") a.heads = integer();
        else if (k == "--seq") a.seq = integer();
        else if (k == "--micro-batch") a.micro_batch = integer();
        else if (k == "--vocab") a.vocab = integer();
        else if (k == "--iters") a.iters = static_cast<int>(integer());
        else if (k == "--warmup") a.warmup = static_cast<int>(integer());
        else if (k == "--storage") {
            a.storage = next();
            if (a.storage != "bf16" && a.storage != "fp32") usage("--storage is bf16 or fp32");
        } else if (k == "--no-tf32") a.tf32 = false;
        else if (k == "--peak-tflops") a.peak_tflops = std::strtod(next().c_str(), nullptr);
        else if (k == "--label") a.label = next();
        else if (k == "--help" || k == "-h") usage("help");
        else usage(("unknown argument " + k).c_str());
    }
    if (a.hidden % a.heads != 0) usage("--hidden must be a multiple of --heads");
    return a;
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
    const Args a = parse(argc, argv);
    const DeviceReport r = probe_devices();
    if (r.cuda_devices == 0) {
        std::printf("no CUDA device: %s\n", r.reason.c_str());
        return 77;
    }
    try {
        device::set_allow_tf32(a.tf32);
        device::set_deterministic(a.deterministic);  // bit-identical run to run (TF32 off)
        const double peak = a.peak_tflops > 0 ? a.peak_tflops : measure_bf16_peak_tflops();

        GptDims d;
        d.layers = a.layers;
        d.hidden = a.hidden;
        d.heads = a.heads;
        d.ffn = 4 * a.hidden;
        d.seq = a.seq;
        d.micro_batch = a.micro_batch;
        d.vocab = a.vocab;
        d.max_positions = a.seq;
        d.hidden_dropout = 0.0f;
        d.attention_dropout = 0.0f;
        const DType storage = a.storage == "bf16" ? DType::BF16 : DType::F32;
        OpContext ctx{Device::CUDA, nullptr};
        // bf16 storage keeps every GEMM operand a bf16 value: run them on bf16 tensor cores, losslessly.
        if (storage == DType::BF16) ctx.gemm_inputs = DType::BF16;
        // The attention kernels mwb-train's default (attention_backend auto) would run.
        const AttentionBackendChoice attention =
            resolve_attention_backend("auto", a.deterministic, ctx.gemm_inputs == DType::BF16);
        ctx.attention = attention.backend;
        Allocator alloc(Device::CUDA);
        GptModel model(d, RecomputePolicy{}, storage, ctx, alloc);
        model.init_weights(1234);
        TrainingConfig t;
        Optimizer opt(model.layout(), model.params(), model.grads(), t, storage, ctx, alloc);

        std::mt19937 gen(5);
        std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(a.vocab - 1));
        std::vector<int32_t> tokens(static_cast<size_t>(a.micro_batch * (a.seq + 1)));
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
            opt.step(1e-4, 1.0);
            device::synchronize();
            if (it > a.warmup) iter_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        }
        iter_seconds /= a.iters;
        const double T = static_cast<double>(a.micro_batch * a.seq), L = static_cast<double>(a.layers),
                     h = static_cast<double>(a.hidden), s = static_cast<double>(a.seq), V = static_cast<double>(a.vocab);
        // Narayanan et al. 2021 eq. 3, as backend/telemetry/flops.h (f = 4h).
        const double flops = 3.0 * T * (L * (8 * h * h + 4 * h * 4 * h + 4 * s * h) + 2 * h * V);
        const MemoryStats m = alloc.stats();
        const DeviceMemoryTotals tot = alloc.device_totals();
        nlohmann::json out = {
            {"engine", "mwb"},
            {"label", a.label},
            {"gpu", r.names.empty() ? "?" : r.names[0]},
            {"layers", a.layers}, {"hidden", a.hidden}, {"heads", a.heads}, {"seq", a.seq},
            {"micro_batch", a.micro_batch}, {"vocab", a.vocab},
            {"params", model.params().numel()},
            {"precision", a.storage == "bf16"
                              ? std::string("bf16 storage emulated in fp32 arrays; GEMMs on bf16 tensor cores (fp32 "
                                            "accumulation); fp32 flash-style attention")
                              : fmt::format("fp32; GEMMs fp32{} on cuBLAS; fp32 flash-style attention",
                                            a.tf32 && !a.deterministic ? " with TF32 tensor cores" : "")},
            {"deterministic", a.deterministic},
            {"attention_backend", attention.reason},
            {"iters", a.iters},
            {"iter_seconds", iter_seconds},
            {"tokens_per_s", T / iter_seconds},
            {"model_tflops", flops / iter_seconds / 1e12},
            {"peak_bf16_tflops", peak},
            {"mfu", flops / iter_seconds / 1e12 / peak},
            {"loss", loss},
            {"peak_allocated_bytes", m.total_peak},
            {"reserved_bytes", m.reserved},
            {"device_used_bytes", tot.total_bytes - tot.free_bytes},
            {"device_total_bytes", tot.total_bytes},
        };
        std::printf("%s\n", out.dump().c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mwb-gpu-bench: %s\n", e.what());
        return 1;
    }
}
