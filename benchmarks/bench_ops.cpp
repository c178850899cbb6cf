// Times every CPU op at the shapes of one transformer layer and the LM head (default: config S,
// 6 layers, hidden 384, 6 heads, seq 256, micro batch 4, vocab 50304), and the machine's sgemm peak.
//   mwb-bench-ops [--hidden H] [--heads A] [--groups G] [--seq S] [--batch B] [--vocab V] [--reps R]
#include "benchmarks/timing.h"
#include "mwb/kernels/ops.h"

#include <CLI/CLI.hpp>
#include <cblas.h>
#include <fmt/format.h>
#if MWB_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include <random>
#include <utility>
#include <vector>

using namespace mwb;

namespace {

using mwb::bench::time_it;
using mwb::bench::Timing;

std::vector<float> rnd(int64_t n, float scale = 1.0f) {
    std::mt19937 g(1);
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = d(g);
    return v;
}

void row(const char* name, Timing t, double flops) {
    if (flops > 0)
        fmt::print("{:<34} {:>9.3f} ms  {:>8.1f} GFLOP/s  (CPU {:>9.3f} ms)\n", name, t.wall * 1e3,
                   flops / t.wall * 1e-9, t.cpu * 1e3);
    else
        fmt::print("{:<34} {:>9.3f} ms  {:>17}(CPU {:>9.3f} ms)\n", name, t.wall * 1e3, "", t.cpu * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"mwb-bench-ops: time the CPU ops at one model's shapes"};
    int64_t H = 384, A = 6, G = 0, S = 256, B = 4, V = 50304;
    int reps = 5;
    bool peak_only = false;
    app.add_flag("--sgemm-peak", peak_only, "Print only each BLAS's sgemm GFLOP/s of a 2048^3 product, \"NAME GFLOPS\" lines (for scripts)");
    app.add_option("--hidden", H);
    app.add_option("--heads", A);
    app.add_option("--groups", G, "Key/value groups of the attention (default: one per head)");
    app.add_option("--seq", S);
    app.add_option("--batch", B);
    app.add_option("--vocab", V);
    app.add_option("--reps", reps);
    CLI11_PARSE(app, argc, argv);
    const int64_t N = S * B, F = 4 * H;
    OpContext ctx;
    {
        const int64_t n = 2048;
        auto a = rnd(n * n), b = rnd(n * n), c = rnd(n * n);
        // The machine's reference: each BLAS of the build on its own, with its own threading; the
        // best of them is the peak (a % of a slower library's peak would flatter).
        std::vector<std::pair<const char*, Timing>> peaks;
        peaks.emplace_back("OpenBLAS", time_it([&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
        }, reps));
#if MWB_WITH_ONEDNN
        peaks.emplace_back("oneDNN", time_it([&] {
            dnnl_sgemm('N', 'T', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
        }, reps));
#endif
        if (peak_only) {
            // One "library GFLOP/s" line each (benchmarks/run_benchmarks.py takes the best).
            for (const auto& [name, t] : peaks) fmt::print("{} {:.1f}\n", name, 2.0 * n * n * n / t.wall * 1e-9);
            return 0;
        }
        fmt::print("threads {}, N = S·B = {}, H {}, A {}, V {}\n", ops::num_threads(), N, H, A, V);
        for (const auto& [name, t] : peaks) row(fmt::format("sgemm 2048^3 {} (peak reference)", name).c_str(), t, 2.0 * n * n * n);
    }

    auto x = rnd(N * H), y = rnd(N * F), dy = rnd(N * F), w = rnd(F * H, 0.05f), dw = rnd(F * H), bias = rnd(F);
    auto qkv = rnd(N * 3 * H), dqkv = rnd(N * 3 * H), ctxo = rnd(N * H), dctx = rnd(N * H);
    auto probs = rnd(B * A * S * S);
    auto mean = rnd(N), rstd = rnd(N), lnw = rnd(H), lnb = rnd(H), dlnw = rnd(H), dlnb = rnd(H), out = rnd(N * H);
    const double lin = 2.0 * N * H * 3 * H;
    row("linear qkv fwd (N,H)->(N,3H)", time_it([&] {
            ops::linear_forward(ctx, view_f32(qkv.data(), {N, 3 * H}), view_f32(x.data(), {N, H}),
                                view_f32(w.data(), {3 * H, H}), view_f32(bias.data(), {3 * H}));
        }, reps), lin);
    row("linear qkv bwd (dx, dw, db)", time_it([&] {
            ops::linear_backward(ctx, view_f32(out.data(), {N, H}), view_f32(dw.data(), {3 * H, H}),
                                 view_f32(dlnb.data(), {H}).numel() ? view_f32(bias.data(), {3 * H}) : TensorView{},
                                 view_f32(dqkv.data(), {N, 3 * H}), view_f32(x.data(), {N, H}),
                                 view_f32(w.data(), {3 * H, H}));
        }, reps), 2 * lin);
    row("linear fc1 fwd (N,H)->(N,4H)", time_it([&] {
            ops::linear_forward(ctx, view_f32(y.data(), {N, F}), view_f32(x.data(), {N, H}), view_f32(w.data(), {F, H}),
                                view_f32(bias.data(), {F}));
        }, reps), 2.0 * N * H * F);
    AttentionParams ap;
    ap.num_heads = static_cast<int>(A);
    ap.total_heads = static_cast<int>(A);
    ap.num_query_groups = static_cast<int>(G);
    ap.batch = static_cast<int>(B);
    const int64_t qkv_width = ap.qkv_heads() * (H / A);
    ap.softmax_scale = 0.125f;
    for (float p : {0.0f, 0.1f}) {
        ap.dropout_p = p;
        std::vector<float> ws(static_cast<std::size_t>(ops::attention_workspace_bytes(ap, S, ops::num_threads()) / 4));
        const double att_flops = 4.0 * B * S * S * H;  // full matrices, as the model FLOP count
        row(fmt::format("attention fwd (dropout {})", p).c_str(), time_it([&] {
                ops::attention_forward(ctx, view_f32(ctxo.data(), {S, B, H}), view_f32(probs.data(), {B, A, S, S}),
                                       view_f32(qkv.data(), {S, B, qkv_width}), view_f32(ws.data(), {(int64_t)ws.size()}), ap);
            }, reps), att_flops);
        row(fmt::format("attention bwd (dropout {})", p).c_str(), time_it([&] {
                ops::attention_backward(ctx, view_f32(dqkv.data(), {S, B, qkv_width}), view_f32(dctx.data(), {S, B, H}),
                                        view_f32(qkv.data(), {S, B, qkv_width}), view_f32(ctxo.data(), {S, B, H}),
                                        view_f32(probs.data(), {B, A, S, S}), view_f32(ws.data(), {(int64_t)ws.size()}),
                                        ap);
            }, reps), 2 * att_flops);
    }
    row("layernorm fwd", time_it([&] {
            ops::layernorm_forward(ctx, view_f32(out.data(), {N, H}), view_f32(mean.data(), {N}), view_f32(rstd.data(), {N}),
                                   view_f32(x.data(), {N, H}), view_f32(lnw.data(), {H}), view_f32(lnb.data(), {H}), 1e-5f);
        }, reps), 0);
    row("layernorm bwd", time_it([&] {
            ops::layernorm_backward(ctx, view_f32(ctxo.data(), {N, H}), view_f32(dlnw.data(), {H}), view_f32(dlnb.data(), {H}),
                                    view_f32(out.data(), {N, H}), view_f32(x.data(), {N, H}), view_f32(mean.data(), {N}),
                                    view_f32(rstd.data(), {N}), view_f32(lnw.data(), {H}), false);
        }, reps), 0);
    row("gelu fwd (N,4H)", time_it([&] { ops::gelu_forward(ctx, view_f32(dy.data(), {N, F}), view_f32(y.data(), {N, F})); }, reps), 0);
    row("gelu bwd (N,4H)", time_it([&] {
            ops::gelu_backward(ctx, view_f32(dy.data(), {N, F}), view_f32(dy.data(), {N, F}), view_f32(y.data(), {N, F}));
        }, reps), 0);
    row("dropout+add (N,H) p=0.1", time_it([&] {
            ops::dropout_add_forward(ctx, view_f32(out.data(), {N, H}), view_f32(x.data(), {N, H}),
                                     view_f32(ctxo.data(), {N, H}), 0.1f, RngStream{1, 2}, 0);
        }, reps), 0);
    // The model's attention residual into the MLP norm: the two ops above in one pass per row.
    row("dropout+add+layernorm fused (N,H) p=0.1", time_it([&] {
            ops::bias_dropout_add_norm_forward(ctx, view_f32(y.data(), {N, H}), view_f32(out.data(), {N, H}),
                                               view_f32(mean.data(), {N}), view_f32(rstd.data(), {N}),
                                               view_f32(x.data(), {N, H}), view_f32(ctxo.data(), {N, H}), {},
                                               view_f32(lnw.data(), {H}), view_f32(lnb.data(), {H}), 0.1f,
                                               RngStream{1, 2}, 0, 1e-5f);
        }, reps), 0);

    {
        auto logits = rnd(N * V), wte = rnd(V * H, 0.05f), dwte = rnd(V * H);
        std::vector<int32_t> targets(static_cast<std::size_t>(N));
        for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 7919) % V);
        std::vector<float> m(N), s(N), tl(N), scale(N, 1.0f / N);
        const double head = 2.0 * N * H * V;
        row("LM head fwd (N,H)x(V,H)^T", time_it([&] {
                ops::linear_forward(ctx, view_f32(logits.data(), {N, V}), view_f32(x.data(), {N, H}),
                                    view_f32(wte.data(), {V, H}), {});
            }, reps), head);
        row("cross-entropy partials (N,V)", time_it([&] {
                ops::cross_entropy_partials(ctx, view_f32(m.data(), {N}), view_f32(s.data(), {N}), view_f32(tl.data(), {N}),
                                            view_f32(logits.data(), {N, V}), view_i32(targets.data(), {N}), 0);
            }, reps), 0);
        std::vector<float> lse(N, 12.0f);
        auto saved = logits;
        row("cross-entropy backward (N,V)", time_it([&] {
                logits = saved;
                ops::cross_entropy_backward(ctx, view_f32(logits.data(), {N, V}), view_i32(targets.data(), {N}),
                                            view_f32(lse.data(), {N}), view_f32(scale.data(), {N}), 0);
            }, reps), 0);
        row("  (copy of the logits, subtract)", time_it([&] { logits = saved; }, reps), 0);
        row("LM head bwd (dx, dW)", time_it([&] {
                ops::linear_backward(ctx, view_f32(x.data(), {N, H}), view_f32(dwte.data(), {V, H}), {},
                                     view_f32(logits.data(), {N, V}), view_f32(out.data(), {N, H}),
                                     view_f32(wte.data(), {V, H}));
            }, reps), 2 * head);
        auto mo = rnd(V * H), vo = rnd(V * H, 0.01f);
        for (auto& e : vo) e = std::abs(e);
        AdamWParams p;
        p.lr = 1e-4f;
        row("adamw (V·H parameters)", time_it([&] {
                ops::adamw_update(ctx, view_f32(wte.data(), {V * H}), view_f32(dwte.data(), {V * H}),
                                  view_f32(mo.data(), {V * H}), view_f32(vo.data(), {V * H}), p);
            }, reps), 0);
    }
    return 0;
}
