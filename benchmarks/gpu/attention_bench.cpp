// `mwb-gpu-bench attention`: the causal attention core alone (ops::attention_forward/backward on
// CUDA), timed with CUDA events. Default shape 4 × 16 heads × 2048 × 128 in a bf16 run (the
// tensor-core kernels on bf16-valued inputs); `--groups G` for grouped-query attention, `--fp32` for
// the CUDA-core kernels, `--backend cudnn` for cuDNN's fused attention (bf16; the JSON line says
// which kernels ran and why). FLOPs are FlashAttention's count for causal attention: forward
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
};

[[noreturn]] void usage(const char* why) {
    const bool help = std::strcmp(why, "help") == 0;
    if (!help) std::fprintf(stderr, "mwb-gpu-bench attention: %s\n", why);
    std::fprintf(help ? stdout : stderr,
                 "usage: mwb-gpu-bench attention [--batch B] [--heads A] [--groups G] [--seq S] [--head-dim D] "
                 "[--iters N] [--warmup N] [--fp32] [--backend own|cudnn]\n");
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
        else if (k == "--help" || k == "-h") usage("help");
        else usage(("unknown argument " + k).c_str());
    }
    if (a.groups > 0 && a.heads % a.groups != 0) usage("--groups must divide --heads");
    return a;
}

void cuda_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// A device buffer of n floats holding `values` (or zeros).
struct DeviceFloats {
    void* ptr = nullptr;
    int64_t n = 0;
    explicit DeviceFloats(int64_t count, const std::vector<float>* values = nullptr) : n(count) {
        ptr = device::cuda_malloc(std::max<int64_t>(n, 1) * 4);
        std::vector<float> zeros;
        if (!values) zeros.assign(static_cast<size_t>(n), 0.0f);
        device::copy_to_device(ptr, values ? values->data() : zeros.data(), n * 4);
    }
    DeviceFloats(const DeviceFloats&) = delete;
    DeviceFloats& operator=(const DeviceFloats&) = delete;
    ~DeviceFloats() { device::cuda_free(ptr); }
    TensorView view(std::initializer_list<int64_t> shape) const {
        return make_view(ptr, DType::F32, shape, Device::CUDA);
    }
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
        for (auto& x : host) x = round_to_bf16(dist(gen));  // a bf16 run's activations
        DeviceFloats qkv(qkv_n, &host), dqkv(qkv_n);
        host.resize(static_cast<size_t>(out_n));
        for (auto& x : host) x = round_to_bf16(dist(gen));
        DeviceFloats dout(out_n, &host), out(out_n);
        OpContext ctx{Device::CUDA, nullptr};
        if (!a.fp32) ctx.gemm_inputs = DType::BF16;  // the tensor-core kernels, as in bf16 runs
        const AttentionBackendChoice choice = resolve_attention_backend(a.backend, false, !a.fp32);
        ctx.attention = p.backend = choice.backend;
        p.head_dim = static_cast<int>(D);
        DeviceFloats lse(ops::attention_saved_elements(Device::CUDA, p, S));  // with cuDNN: + a bf16 copy of O
        DeviceFloats ws(ops::attention_workspace_bytes(Device::CUDA, p, S, 1) / 4);
        const TensorView vqkv = qkv.view({S, B, row}), vd = dqkv.view({S, B, row});
        const TensorView vo = out.view({S, B, A * D}), vdo = dout.view({S, B, A * D});
        const TensorView vl = lse.view({lse.n}), vw = ws.view({ws.n});
        auto fwd = [&] { ops::attention_forward(ctx, vo, vl, vqkv, vw, p); };
        auto bwd = [&] { ops::attention_backward(ctx, vd, vdo, vqkv, vl, vw, p); };
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
            {"kernels", p.backend == AttentionBackend::Cudnn ? "cuDNN fused attention (bf16)"
                        : a.fp32                             ? "fp32 CUDA cores"
                                                             : "bf16 tensor cores (WMMA, fp32 accumulation)"},
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
