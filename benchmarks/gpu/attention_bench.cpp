// `mwb-gpu-bench attention`: the causal attention core alone (ops::attention_forward/backward on
// CUDA), timed with CUDA events. Default shape 4 × 16 heads × 2048 × 128 in a bf16 run on bf16
// tensors (qkv, out and their gradients stored in 16 bits: the tensor-core kernels load them directly);
// `--storage fp16` for an fp16 run on fp16 tensors, `--storage fp32` for a bf16 run on fp32 arrays
// holding bf16 values (the layout before 16-bit storage); `--groups G` for grouped-query attention,
// `--fp32` for an fp32 run (the CUDA-core kernels), `--backend cudnn` for cuDNN's fused attention
// (16-bit; the JSON line says which kernels ran and why). FLOPs are FlashAttention's count for causal attention: forward
// 2·B·A·S²·D (the two products, half the square), backward 2.5× that (five products) — the kernels
// do more than that (the backward recomputes the probabilities and delta), the count is the yardstick.
// Prints one JSON line.
#include "attention_bench.h"

#include "mwb/kernels/device.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/ops.h"
#include "mwb/kernels/precision.h"

#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace mwb::bench {

namespace {

struct AttentionArgs {
    int64_t batch = 4, heads = 16, groups = 0, seq = 2048, head_dim = 128;
    int iters = 20, warmup = 3;
    bool fp32 = false;
    std::string backend = "own";  // own | cudnn
    std::string storage = "bf16";  // bf16 | fp16 | fp32 (fp32 arrays of a bf16 run)
};

[[noreturn]] void usage(const char* why) {
    const bool help = std::strcmp(why, "help") == 0;
    if (!help) std::fprintf(stderr, "mwb-gpu-bench attention: %s\n", why);
    std::fprintf(help ? stdout : stderr,
                 "usage: mwb-gpu-bench attention [--batch B] [--heads A] [--groups G] [--seq S] [--head-dim D] "
                 "[--iters N] [--warmup N] [--fp32] [--backend own|cudnn] [--storage bf16|fp16|fp32]\n");
    std::exit(help ? 0 : 2);
}

AttentionArgs parse(int argc, char** argv) {
    AttentionArgs a;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        auto integer = [&]() {
            if (i + 1 >= argc) usage(("missing value after " + k).c_str());
            const std::string v = argv[++i];
            char* end = nullptr;
            const long long x = std::strtoll(v.c_str(), &end, 10);
            if (*end != '\0' || x <= 0) usage((k + " needs a positive integer, got '" + v + "'").c_str());
            return static_cast<int64_t>(x);
        };
        if (k == "--batch") a.batch = integer();
        else if (k == "--heads") a.heads = integer();
        else if (k == "--groups") a.groups = integer();
        else if (k == "--seq") a.seq = integer();
        else if (k == "--head-dim") a.head_dim = integer();
        else if (k == "--iters") a.iters = static_cast<int>(integer());
        else if (k == "--warmup") a.warmup = static_cast<int>(integer());
        else if (k == "--fp32") a.fp32 = true;
        else if (k == "--backend" && i + 1 < argc && (std::strcmp(argv[i + 1], "own") == 0 || std::strcmp(argv[i + 1], "cudnn") == 0))
            a.backend = argv[++i];
        else if (k == "--backend") usage("--backend needs own or cudnn");
        else if (k == "--storage" && i + 1 < argc &&
                 (std::strcmp(argv[i + 1], "bf16") == 0 || std::strcmp(argv[i + 1], "fp16") == 0 ||
                  std::strcmp(argv[i + 1], "fp32") == 0))
            a.storage = argv[++i];
        else if (k == "--storage") usage("--storage needs bf16, fp16 or fp32");
        else if (k == "--help" || k == "-h") usage("help");
        else usage(("unknown argument " + k).c_str());
    }
    if (a.groups > 0 && a.heads % a.groups != 0) usage("--groups must divide --heads");
    if (a.fp32) a.storage = "fp32";  // an fp32 run stores fp32
    return a;
}

void cuda_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// A device tensor of n elements of `dtype` (f32, bf16 or f16) holding `values` rounded to it (or zeros).
struct DeviceTensor {
    void* ptr = nullptr;
    int64_t n = 0;
    DType dtype = DType::F32;
    explicit DeviceTensor(int64_t count, DType dt = DType::F32, const std::vector<float>* values = nullptr)
        : n(count), dtype(dt) {
        const int64_t bytes = n * static_cast<int64_t>(dtype_size(dtype));
        ptr = device::cuda_malloc(std::max<int64_t>(bytes, 4));
        std::vector<float> f32(static_cast<size_t>(n), 0.0f);
        if (values) f32 = *values;
        std::vector<uint16_t> h16;
        for (float x : f32) h16.push_back(dtype == DType::F16 ? fp16_bits(x) : bf16_bits(x));
        device::copy_to_device(ptr, dtype == DType::F32 ? static_cast<const void*>(f32.data()) : h16.data(), bytes);
    }
    DeviceTensor(const DeviceTensor&) = delete;
    DeviceTensor& operator=(const DeviceTensor&) = delete;
    ~DeviceTensor() { device::cuda_free(ptr); }
    TensorView view(std::initializer_list<int64_t> shape) const { return make_view(ptr, dtype, shape, Device::CUDA); }
};

/// Milliseconds per call of `fn`, `iters` calls between two events on the ops' (default) stream.
template <class Fn>
double time_ms(int iters, const Fn& fn) {
    cudaEvent_t start = nullptr, stop = nullptr;
    cuda_check(cudaEventCreate(&start), "cudaEventCreate");
    cuda_check(cudaEventCreate(&stop), "cudaEventCreate");
    cuda_check(cudaEventRecord(start, nullptr), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) fn();
    cuda_check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    device::synchronize();  // raises a kernel fault, if any, as mwb::Error
    return static_cast<double>(ms) / iters;
}

}  // namespace

int run_attention_bench(int argc, char** argv) {
    const AttentionArgs a = parse(argc, argv);
    const DeviceReport r = probe_devices();
    if (r.cuda_devices == 0) {
        std::printf("no CUDA device: %s\n", r.reason.c_str());
        return 77;
    }
    try {
        AttentionParams p;
        p.num_heads = static_cast<int>(a.heads);
        p.num_query_groups = static_cast<int>(a.groups);
        p.total_heads = p.num_heads;
        p.batch = static_cast<int>(a.batch);
        p.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
        const int64_t S = a.seq, B = a.batch, A = a.heads, G = p.groups(), D = a.head_dim;
        const int64_t row = (A + 2 * G) * D, qkv_n = S * B * row, out_n = S * B * A * D;
        std::mt19937 gen(7);
        std::uniform_real_distribution<float> dist(-1, 1);
        std::vector<float> host(static_cast<size_t>(qkv_n));
        const bool fp16 = a.storage == "fp16";
        const DType stored = a.storage == "bf16" ? DType::BF16 : fp16 ? DType::F16 : DType::F32;
        // a 16-bit run's activations: 16-bit values (in fp32 arrays with --storage fp32)
        const auto value = [&] { return a.fp32 ? dist(gen) : fp16 ? round_to_fp16(dist(gen)) : round_to_bf16(dist(gen)); };
        for (auto& x : host) x = value();
        DeviceTensor qkv(qkv_n, stored, &host), dqkv(qkv_n, stored);
        host.resize(static_cast<size_t>(out_n));
        for (auto& x : host) x = value();
        DeviceTensor dout(out_n, stored, &host), out(out_n, stored);
        OpContext ctx{Device::CUDA, nullptr};
        if (!a.fp32) ctx.gemm_inputs = fp16 ? DType::F16 : DType::BF16;  // the tensor-core kernels, as in 16-bit runs
        const AttentionBackendChoice choice = resolve_attention_backend(a.backend, false, !a.fp32);
        ctx.attention = p.backend = choice.backend;
        p.head_dim = static_cast<int>(D);
        DeviceTensor lse(ops::attention_saved_elements(Device::CUDA, p, S));  // one log-sum-exp per row
        DeviceTensor ws(ops::attention_workspace_bytes(Device::CUDA, p, S, 1) / 4);
        const TensorView vqkv = qkv.view({S, B, row}), vd = dqkv.view({S, B, row});
        const TensorView vo = out.view({S, B, A * D}), vdo = dout.view({S, B, A * D});
        const TensorView vl = lse.view({lse.n}), vw = ws.view({ws.n});
        auto fwd = [&] { ops::attention_forward(ctx, vo, vl, vqkv, vw, p); };
        auto bwd = [&] { ops::attention_backward(ctx, vd, vdo, vqkv, vo, vl, vw, p); };
        for (int i = 0; i < a.warmup; ++i) {
            fwd();
            bwd();
        }
        device::synchronize();
        const double fwd_ms = time_ms(a.iters, fwd), bwd_ms = time_ms(a.iters, bwd);
        const double fwd_flops = 2.0 * static_cast<double>(B * A) * static_cast<double>(S) * static_cast<double>(S) *
                                 static_cast<double>(D);
        const double bwd_flops = 2.5 * fwd_flops;
        nlohmann::json j = {
            {"engine", "mwb"},
            {"label", "attention"},
            {"gpu", r.names.empty() ? "?" : r.names[0]},
            {"batch", B}, {"heads", A}, {"groups", G}, {"seq", S}, {"head_dim", D},
            {"kernels", p.backend == AttentionBackend::Cudnn ? (fp16 ? "cuDNN fused attention (fp16)"
                                                                     : "cuDNN fused attention (bf16)")
                        : a.fp32                             ? "fp32 CUDA cores"
                        : fp16                               ? "fp16 tensor cores (WMMA, fp32 accumulation)"
                                                             : "bf16 tensor cores (WMMA, fp32 accumulation)"},
            {"storage", a.storage},
            {"attention_backend", choice.reason},
            {"cudnn_refused", cudnn_attention_refusals()},
            {"iters", a.iters},
            {"fwd_ms", fwd_ms},
            {"bwd_ms", bwd_ms},
            {"fwd_tflops", fwd_flops / (fwd_ms * 1e-3) / 1e12},
            {"bwd_tflops", bwd_flops / (bwd_ms * 1e-3) / 1e12},
            {"flops", "causal: forward 2·B·A·S²·D, backward 2.5× forward (FlashAttention's count)"},
            {"timing", "CUDA events around the calls, after warm-up"},
        };
        std::printf("%s\n", j.dump().c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mwb-gpu-bench attention: %s\n", e.what());
        return 1;
    }
}

}  // namespace mwb::bench
