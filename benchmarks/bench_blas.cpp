// Issue 13's BLAS question: the training GEMMs of config S (6 layers, hidden 384, 6 heads in 2 groups,
// SwiGLU 1024, vocab 32000, seq 256 × micro batch 4 = 1024 tokens) timed with OpenBLAS (the build's BLAS,
// without kernels/cpu/gemm.h's routing) and with Debian's BLIS and oneDNN, side by side in one process, alternating the
// libraries round by round; medians. Each library is timed two ways:
//   split  — mwb's cut of the product into single-threaded calls (split_sgemm; same bits for any
//            thread count), the way mwb-train calls its BLAS;
//   own    — the whole product in one call, the library's own threading;
// and each library's square-2048 sgemm (own threading) is its peak. BLIS and oneDNN are dlopen'ed with
// RTLD_LOCAL: both export cblas_sgemm/sgemm_, which must not interpose on OpenBLAS's.
//   mwb-bench-blas [--split-only] [--head-chunks] [--threads T] [--rounds R] [--reps N] [--tokens 1024] [--hidden 384]
//   [--vocab 32000]
#include "benchmarks/timing.h"
#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <omp.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using mwb::bench::time_it;
using mwb::bench::Timing;

// ---- the candidates, loaded at run time ---------------------------------------------------------

// BLIS's typed API (blis.h, 0.9.0, 64-bit dim_t/inc_t): strides instead of transposes.
using BliSgemm = void (*)(int transa, int transb, int64_t m, int64_t n, int64_t k, const float* alpha, const float* a,
                          int64_t rsa, int64_t csa, const float* b, int64_t rsb, int64_t csb, const float* beta,
                          float* c, int64_t rsc, int64_t csc);
using BliSetThreads = void (*)(int64_t);
using BliArchId = int (*)();
using BliArchString = const char* (*)(int);
// oneDNN's C API: row-major sgemm with cblas's arguments (dnnl.h); threads = omp_get_max_threads().
using DnnlSgemm = int (*)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

BliSgemm bli_sgemm_fn = nullptr;
BliSetThreads bli_set_threads_fn = nullptr;
DnnlSgemm dnnl_sgemm_fn = nullptr;

void* open_local(const char* path) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) fmt::print("(not loaded: {}: {})\n", path, dlerror());
    return h;
}

void openblas_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                    const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void blis_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    bli_sgemm_fn(0, 0, m, n, k, &alpha, a, ta ? 1 : lda, ta ? lda : 1, b, tb ? 1 : ldb, tb ? ldb : 1, &beta, c, ldc, 1);
}

void dnnl_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    dnnl_sgemm_fn(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

struct Library {
    std::string name;
    mwb::cpu::SgemmFn sgemm;
    /// Own threading for the "own" mode and the peak (BLIS does not follow OpenMP's setting).
    std::function<void(int)> set_threads;
};

// ---- the shapes ---------------------------------------------------------------------------------

struct Gemm {
    std::string name;
    bool ta, tb;
    int64_t m, n, k;
    float beta;
    int per_step;  ///< how many times one training step runs it (layers)
};

/// One linear layer (in → out over T tokens): y = x·Wᵀ, dx = dy·W, dW += dyᵀ·x (kernels/cpu/linear.cpp).
void add_linear(std::vector<Gemm>& g, const std::string& name, int64_t T, int64_t in, int64_t out, int layers) {
    g.push_back({name + " fwd  y=x·Wᵀ", false, true, T, out, in, 0.0f, layers});
    g.push_back({name + " dX   dy·W", false, false, T, in, out, 0.0f, layers});
    g.push_back({name + " dW   dyᵀ·x", true, false, out, in, T, 1.0f, layers});
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<float> rnd(int64_t n, float scale) {
    std::mt19937 g(1);
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = d(g);
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"mwb-bench-blas: config S's training GEMMs with OpenBLAS, BLIS and oneDNN"};
    int threads = omp_get_max_threads(), rounds = 3, reps = 3;
    int64_t T = 1024, H = 384, A = 6, G = 2, F = 1024, V = 32000, L = 6;
    app.add_option("--threads", threads);
    app.add_option("--rounds", rounds, "Alternations of the libraries (medians over them)");
    app.add_option("--reps", reps, "Calls per timing");
    app.add_option("--tokens", T, "seq × micro batch");
    app.add_option("--hidden", H);
    app.add_option("--heads", A);
    app.add_option("--groups", G);
    app.add_option("--ffn", F, "SwiGLU width per branch");
    app.add_option("--vocab", V);
    app.add_option("--layers", L);
    bool split_only = false, head_chunks = false;
    app.add_flag("--head-chunks", head_chunks,
                 "Also time the LM head's forward (β = 0) cut into column chunks of several widths (OpenBLAS)");
    app.add_flag("--split-only", split_only, "Skip the libraries' own threading (BLIS's is slow on a loaded machine)");
    CLI11_PARSE(app, argc, argv);
    omp_set_num_threads(threads);

    std::vector<Library> libs;
    libs.push_back({"OpenBLAS", openblas_sgemm, [](int t) { omp_set_num_threads(t); }});
    if (void* h = open_local("/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4")) {
        bli_sgemm_fn = reinterpret_cast<BliSgemm>(dlsym(h, "bli_sgemm"));
        bli_set_threads_fn = reinterpret_cast<BliSetThreads>(dlsym(h, "bli_thread_set_num_threads"));
        auto id = reinterpret_cast<BliArchId>(dlsym(h, "bli_arch_query_id"));
        auto str = reinterpret_cast<BliArchString>(dlsym(h, "bli_arch_string"));
        if (bli_sgemm_fn && bli_set_threads_fn) {
            const char* forced = std::getenv("BLIS_ARCH_TYPE");
            fmt::print("BLIS 0.9.0 (blis-openmp), kernels for {} (BLIS_ARCH_TYPE={})\n", id && str ? str(id()) : "?",
                       forced ? forced : "unset");
            libs.push_back({"BLIS", blis_sgemm, [](int t) {
                                omp_set_num_threads(t);
                                bli_set_threads_fn(t);
                            }});
        }
    }
    if (void* h = open_local("/usr/lib/x86_64-linux-gnu/libdnnl.so.2")) {
        dnnl_sgemm_fn = reinterpret_cast<DnnlSgemm>(dlsym(h, "dnnl_sgemm"));
        if (dnnl_sgemm_fn) libs.push_back({"oneDNN", dnnl_sgemm, [](int t) { omp_set_num_threads(t); }});
    }
#if MWB_WITH_ONEDNN
    // The build's own choice per shape (kernels/cpu/linear.cpp), for the same table.
    libs.push_back({"mwb (mixed)", mwb::cpu::blas_sgemm, [](int t) { omp_set_num_threads(t); }});
#endif
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    const char* l2 = std::getenv("OPENBLAS_L2_SIZE");
    fmt::print(
        "threads {}, tokens {}, hidden {}, heads {} in {} groups, SwiGLU {}, vocab {}, layers {}; "
        "OPENBLAS_CORETYPE={} OPENBLAS_L2_SIZE={}\n",
        threads, T, H, A, G, F, V, L, coretype ? coretype : "(unset)", l2 ? l2 : "(unset)");

    const int64_t D = H / A;
    std::vector<Gemm> gemms;
    add_linear(gemms, "qkv ", T, H, (A + 2 * G) * D, static_cast<int>(L));
    add_linear(gemms, "proj", T, H, H, static_cast<int>(L));
    add_linear(gemms, "fc1 ", T, H, 2 * F, static_cast<int>(L));
    add_linear(gemms, "fc2 ", T, F, H, static_cast<int>(L));
    add_linear(gemms, "head", T, H, V, 1);
    // What OpenBLAS's zeroing of C for β = 0 costs at the logits' size (not part of the step).
    gemms.push_back({"head fwd  β=1 (ref)", false, true, T, V, H, 1.0f, 0});

    int64_t max_elems = 2048 * 2048;
    for (const Gemm& g : gemms) max_elems = std::max({max_elems, g.m * g.k, g.k * g.n, g.m * g.n});
    const auto a = rnd(max_elems, 1.0f), b = rnd(max_elems, 0.05f);
    std::vector<float> c(static_cast<std::size_t>(max_elems), 0.0f);

    // times[lib][mode][gemm] over rounds; mode 0 = split, 1 = own; peaks[lib] over rounds.
    const std::size_t nl = libs.size(), ng = gemms.size();
    std::vector<std::vector<std::vector<std::vector<double>>>> wall(
        nl, std::vector<std::vector<std::vector<double>>>(2, std::vector<std::vector<double>>(ng)));
    auto cpu = wall;
    std::vector<std::vector<double>> peak(nl), peak_cpu(nl);
    for (int r = 0; r < rounds; ++r) {
        for (std::size_t li = 0; li < nl; ++li) {
            // Alternate the order each round so that no library always runs after the same one.
            const Library& lib = libs[r % 2 ? nl - 1 - li : li];
            const std::size_t id = r % 2 ? nl - 1 - li : li;
            lib.set_threads(threads);
            const int64_t n2 = 2048;
            const Timing tp = time_it(
                [&] { lib.sgemm(false, true, n2, n2, n2, 1.0f, a.data(), n2, b.data(), n2, 0.0f, c.data(), n2); },
                reps);
            peak[id].push_back(2.0 * n2 * n2 * n2 * 1e-9 / tp.wall);
            // On a shared machine the CPU time is what the load disturbs least: GFLOP/s per busy core × threads.
            peak_cpu[id].push_back(2.0 * n2 * n2 * n2 * 1e-9 / tp.cpu * threads);
            for (int mode = 0; mode < (split_only ? 1 : 2); ++mode) {
                // split: single-threaded calls on mwb's OpenMP threads; the library's own threads off.
                lib.set_threads(mode == 0 ? 1 : threads);
                if (mode == 0) omp_set_num_threads(threads);
                for (std::size_t gi = 0; gi < ng; ++gi) {
                    const Gemm& g = gemms[gi];
                    const int64_t lda = g.ta ? g.m : g.k, ldb = g.tb ? g.k : g.n;
                    const Timing t = time_it(
                        [&] {
                            if (mode == 0)
                                mwb::cpu::split_sgemm(lib.sgemm, g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data(), lda,
                                                      b.data(), ldb, g.beta, c.data(), g.n);
                            else
                                lib.sgemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data(), lda, b.data(), ldb, g.beta,
                                          c.data(), g.n);
                        },
                        reps);
                    wall[id][mode][gi].push_back(t.wall);
                    cpu[id][mode][gi].push_back(t.cpu);
                }
            }
            lib.set_threads(threads);
        }
    }

    // Two views of every number: wall time, and CPU time scaled to `threads` busy cores (passive OpenMP
    // waits: run with OMP_WAIT_POLICY=passive, or idle threads count as busy).
    double best_peak = 0, best_peak_cpu = 0;
    for (std::size_t li = 0; li < nl; ++li) {
        best_peak = std::max(best_peak, median(peak[li]));
        best_peak_cpu = std::max(best_peak_cpu, median(peak_cpu[li]));
    }
    fmt::print("\nsgemm 2048² NT peak (own threading), median of {} rounds, wall / CPU-time GFLOP/s:\n", rounds);
    for (std::size_t li = 0; li < nl; ++li)
        fmt::print("  {:<9} {:7.1f} / {:7.1f}\n", libs[li].name, median(peak[li]), median(peak_cpu[li]));
    fmt::print(
        "\nper call: median wall ms, CPU ms, and % of the best peak by wall / by CPU time "
        "(best peaks {:.1f} / {:.1f} GFLOP/s)\n",
        best_peak, best_peak_cpu);
    for (int mode = 0; mode < (split_only ? 1 : 2); ++mode) {
        fmt::print("\n{}\n{:<20} {:>5} {:>5} {:>5}",
                   mode == 0 ? "split (mwb's cut, single-threaded calls)" : "own (one call, the library's threads)",
                   "GEMM", "m", "n", "k");
        for (const Library& lib : libs) fmt::print(" | {:>30}", lib.name + " wall cpu %w %c");
        fmt::print("\n");
        std::vector<double> step_wall(nl, 0), step_cpu(nl, 0);
        double step_flops = 0;
        for (std::size_t gi = 0; gi < ng; ++gi) {
            const Gemm& g = gemms[gi];
            const double flops = 2.0 * g.m * g.n * g.k;
            step_flops += flops * g.per_step;
            fmt::print("{:<20} {:>5} {:>5} {:>5}", g.name, g.m, g.n, g.k);
            for (std::size_t li = 0; li < nl; ++li) {
                const double w = median(wall[li][mode][gi]), cp = median(cpu[li][mode][gi]);
                step_wall[li] += w * g.per_step;
                step_cpu[li] += cp * g.per_step;
                fmt::print(" | {:7.2f} {:7.2f} {:4.0f}% {:4.0f}%", w * 1e3, cp * 1e3,
                           100 * flops / w * 1e-9 / best_peak, 100 * flops / cp * threads * 1e-9 / best_peak_cpu);
            }
            fmt::print("\n");
        }
        fmt::print("{:<38}", fmt::format("step's GEMMs ({:.1f} GFLOP)", step_flops * 1e-9));
        for (std::size_t li = 0; li < nl; ++li)
            fmt::print(" | {:7.1f} {:7.1f} {:4.0f}% {:4.0f}%", step_wall[li] * 1e3, step_cpu[li] * 1e3,
                       100 * step_flops / step_wall[li] * 1e-9 / best_peak,
                       100 * step_flops / step_cpu[li] * threads * 1e-9 / best_peak_cpu);
        fmt::print("\n");
    }
    if (head_chunks) {
        // Does a narrower column chunk (its slice of the logits stays in L2 between OpenBLAS's zeroing for
        // β = 0 and its kernel) beat mwb's cut? Each width: chunks over 2 threads, single-threaded calls.
        fmt::print("\nLM head forward {}×{}×{} (β = 0), OpenBLAS, column chunks; median of {} rounds\n", T, V, H,
                   rounds);
        const std::vector<int64_t> widths = {V / 8, V / 16, 1024, 512, 256};
        std::vector<std::vector<double>> w_ms(widths.size()), c_ms(widths.size());
        for (int r = 0; r < rounds; ++r)
            for (std::size_t wi = 0; wi < widths.size(); ++wi) {
                const int64_t width = widths[wi], chunks = (V + width - 1) / width;
                const Timing t = time_it(
                    [&] {
#pragma omp parallel for schedule(static)
                        for (int64_t i = 0; i < chunks; ++i) {
                            const int64_t first = i * width, count = std::min(width, V - first);
                            openblas_sgemm(false, true, T, count, H, 1.0f, a.data(), H, b.data() + first * H, H, 0.0f,
                                           c.data() + first, V);
                        }
                    },
                    reps);
                w_ms[wi].push_back(t.wall * 1e3);
                c_ms[wi].push_back(t.cpu * 1e3);
            }
        for (std::size_t wi = 0; wi < widths.size(); ++wi)
            fmt::print("  width {:>5}: {:8.2f} ms wall {:8.2f} ms CPU\n", widths[wi], median(w_ms[wi]),
                       median(c_ms[wi]));
    }
    return 0;
}
