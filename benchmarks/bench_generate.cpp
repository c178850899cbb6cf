// Decode and prefill speed of the generation engine (backend/generate/) on the CPU, against the
// memory-bandwidth bound of decoding: one decode step reads every weight once, so tokens/s at batch 1
// cannot exceed (copy bandwidth) / (weight bytes per step). Both are measured in the same run, with
// the sgemm peak as the compute reference. Random weights (the speed does not depend on them). Each
// decode runs with a step's threads as one team and as one parallel region per linear layer
// (Decoder::StepThreads), alternating within each repetition.
//   mwb-bench-generate [--model gpt2-124m|llama-1b|all] [--prompt 128] [--new 16] [--reps 3] [--batch 1 8]
#include "backend/generate/generation.h"
#include "backend/model/gpt_model.h"
#include "mwb/kernels/ops.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

using namespace mwb;
using namespace mwb::generate;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/// STREAM-style copy of 1 GiB split over the threads: bytes read + written per second (median of 5).
double copy_bandwidth() {
    const std::size_t n = std::size_t{1} << 28;  // floats: 1 GiB each way
    std::vector<float> a(n, 1.0f), b(n, 0.0f);
    std::vector<double> rates;
    for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = Clock::now();
#pragma omp parallel
        {
            const std::size_t per = n / static_cast<std::size_t>(omp_get_num_threads());
            const std::size_t begin = per * static_cast<std::size_t>(omp_get_thread_num());
            std::memcpy(b.data() + begin, a.data() + begin, per * sizeof(float));
        }
        rates.push_back(2.0 * static_cast<double>(n) * sizeof(float) / since(t0));
    }
    return median(rates);
}

double sgemm_peak() {
    const int n = 2048;
    std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
    std::vector<double> rates;
    for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = Clock::now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
                    n);
        rates.push_back(2.0 * n * n * n / since(t0));
    }
    return median(rates);
}

GptDims gpt2_124m() {
    GptDims d;
    d.layers = 12;
    d.hidden = 768;
    d.heads = 12;
    d.ffn = 3072;
    d.vocab = 50304;
    d.max_positions = 1024;
    return d;
}

GptDims llama_1b() {  // Llama 3.2 1B's shape
    GptDims d;
    d.layers = 16;
    d.hidden = 2048;
    d.heads = 32;
    d.groups = 8;
    d.ffn = 8192;
    d.swiglu = true;
    d.linear_bias = false;
    d.positions = GptDims::Positions::Rope;
    d.rotary_dim = 64;
    d.rotary_base = 500000;
    d.rmsnorm = true;
    d.vocab = 128256;
    d.max_positions = 2048;
    return d;
}

/// The bound uses the best copy bandwidth seen so far in the run: on a busy machine a single
/// measurement can land in a bad moment, and a bound must not be too low.
double best_bandwidth = 0;
double measure_bandwidth() {
    const double bw = copy_bandwidth();
    best_bandwidth = std::max(best_bandwidth, bw);
    return bw;
}

void bench(const char* name, GptDims d, int64_t prompt, int64_t new_tokens, int reps,
           const std::vector<int64_t>& batches) {
    d.seq = 1;
    d.micro_batch = 1;
    OpContext ctx;
    Allocator alloc;
    GptModel model(d, RecomputePolicy{}, DType::F32, ctx, alloc, false);
    model.init_weights(1);
    const int64_t max_len = prompt + new_tokens + 1;
    GenerateOptions o;
    o.sampling.greedy = true;
    o.max_new_tokens = new_tokens;
    for (const int64_t batch : batches) {
        Decoder dec(d, model.layout(), model.params(), batch, max_len);
        std::vector<std::vector<int32_t>> prompts(static_cast<std::size_t>(batch), std::vector<int32_t>(prompt));
        for (int64_t b = 0; b < batch; ++b)
            for (int64_t i = 0; i < prompt; ++i) prompts[b][i] = static_cast<int32_t>((b * 7919 + i * 104729) % 50000);
        // Each repetition decodes with every way of threading a step (Decoder::StepThreads), one after
        // the other, so that they are compared under the same machine load.
        const std::vector<std::pair<const char*, Decoder::StepThreads>> modes = {
            {"team", Decoder::StepThreads::Team}, {"regions", Decoder::StepThreads::Regions}};
        std::vector<double> prefill;
        std::vector<std::vector<double>> decode(modes.size());
        std::vector<float> logits(static_cast<std::size_t>(d.vocab));
        for (int rep = 0; rep < reps; ++rep) {
            for (std::size_t k = 0; k < modes.size(); ++k) {
                dec.set_step_threads(modes[k].second);
                // Prefill alone (row 0), then the whole generation; decode = generation minus prefills.
                dec.reset(0);
                auto t0 = Clock::now();
                dec.prefill(0, prompts[0], logits.data());
                const double p = since(t0);
                prefill.push_back(p);
                t0 = Clock::now();
                const auto out = complete(dec, prompts, o);
                const double all = since(t0);
                decode[k].push_back(static_cast<double>(batch * new_tokens - batch) / std::max(1e-9, all - batch * p));
            }
        }
        const double now = measure_bandwidth();
        const double bytes = static_cast<double>(dec.weight_bytes_per_step());
        const double bound = best_bandwidth / bytes;
        for (std::size_t k = 0; k < modes.size(); ++k) {
            const double tps = median(decode[k]);
            fmt::print(
                "| {} | {} | {} | {:.1f} | {:.2f} | {:.1f} | {:.2f} ({:.2f} GB/s best, {:.2f} now) | {:.0f} % |\n",
                name, batch, modes[k].first, static_cast<double>(prompt) / median(prefill), bytes / 1e9, tps, bound,
                best_bandwidth / 1e9, now / 1e9, batch == 1 ? 100.0 * tps / bound : 100.0 * tps / batch / bound);
        }
        std::fflush(stdout);
    }
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"mwb-bench-generate: decode/prefill tokens/s against the memory-bandwidth bound"};
    std::string which = "all";
    int64_t prompt = 128, new_tokens = 16;
    int reps = 3;
    app.add_option("--model", which)->check(CLI::IsMember({"gpt2-124m", "llama-1b", "all"}));
    app.add_option("--prompt", prompt, "Prompt tokens (prefill)");
    app.add_option("--new", new_tokens, "Tokens decoded per row");
    app.add_option("--reps", reps);
    std::vector<int64_t> batches{1, 8};
    app.add_option("--batch", batches, "Batch sizes (default: 1 8)");
    CLI11_PARSE(app, argc, argv);
    const double bw = measure_bandwidth(), peak = sgemm_peak();
    fmt::print("threads {}, copy bandwidth {:.2f} GB/s (read + write), sgemm 2048^3 {:.1f} GFLOP/s\n\n",
               omp_get_max_threads(), bw / 1e9, peak / 1e9);
    std::fflush(stdout);
    fmt::print(
        "| model | batch | decode step | prefill tok/s | weight GB/step | decode tok/s | bound tok/s (batch 1) | of "
        "bound "
        "per step |\n");
    fmt::print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
    if (which != "llama-1b") bench("GPT-2 124M", gpt2_124m(), prompt, new_tokens, reps, batches);
    if (which != "gpt2-124m") bench("Llama 1B", llama_1b(), prompt, new_tokens, reps, batches);
    return 0;
}
