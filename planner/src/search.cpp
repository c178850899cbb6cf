#include "mwb/planner/search.h"

#include "backend/config/validate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

namespace mwb::planner {

namespace {

std::vector<int> divisors(int64_t n) {
    std::vector<int> d;
    for (int64_t i = 1; i <= n; ++i)
        if (n % i == 0) d.push_back(static_cast<int>(i));
    return d;
}

struct Recipe {
    const char* granularity;
    const char* method;
    int layers;
};

/// What costs `p` time against `best`: the components that grew most, and what `p` saves.
std::string explain(const Plan& p, const Plan& best) {
    const Timing &a = p.time, &b = best.time;
    if (&p == &best) {
        return fmt::format("fastest: compute {:.0f}% of the iteration, bubble {:.1f}%, TP/SP {:.1f}%, DP {:.1f}%",
                           100 * a.compute_s / a.iteration_s, 100 * a.bubble_s / a.iteration_s,
                           100 * a.tp_s / a.iteration_s, 100 * a.dp_s / a.iteration_s);
    }
    struct Part {
        const char* name;
        double delta;
        std::string detail;
    };
    std::vector<Part> parts = {
        {"compute", a.compute_s - b.compute_s,
         std::abs(p.flops.hardware / best.flops.hardware - 1) > 1e-4
             ? fmt::format("hardware FLOPs ×{:.3f}", p.flops.hardware / best.flops.hardware)
             : fmt::format("slowest stage {}: {} layers{}", a.slowest_stage, p.layout.layers_per_stage,
                           a.slowest_stage == p.layout.pp - 1 ? " + output layer" : "")},
        {"pipeline bubble", a.bubble_s - b.bubble_s,
         fmt::format("(p−1)/(v·m) {:.3f} vs {:.3f}", a.bubble_fraction, b.bubble_fraction)},
        {"TP/SP communication", a.tp_s - b.tp_s, fmt::format("TP {} vs {}", p.layout.tp, best.layout.tp)},
        {"pipeline sends", a.pp_s - b.pp_s, ""},
        {"gradient reductions", a.dp_s - b.dp_s, fmt::format("DP {} vs {}", p.layout.dp, best.layout.dp)},
        {"optimizer step", a.optimizer_s - b.optimizer_s, ""},
    };
    std::sort(parts.begin(), parts.end(), [](const Part& x, const Part& y) { return x.delta > y.delta; });
    std::string s = fmt::format("{:+.1f}% throughput:", 100 * (a.tokens_per_s / b.tokens_per_s - 1));
    int shown = 0;
    for (const Part& part : parts) {
        if (part.delta <= 1e-3 * b.iteration_s || shown == 2) break;
        s += fmt::format("{} {} +{:.3g} s{}", shown ? ";" : "", part.name, part.delta,
                         part.detail.empty() ? "" : " (" + part.detail + ")");
        ++shown;
    }
    if (shown == 0) s += " about as fast";
    const int64_t saved = best.most_loaded().peak_total - p.most_loaded().peak_total;
    if (saved > 0) s += fmt::format("; needs {:.1f} GiB less memory", static_cast<double>(saved) / (1 << 30));
    return s;
}

}  // namespace

std::string describe_layout(const Plan& p) {
    const Layout& l = p.layout;
    const auto& t = p.config.training;
    std::string recompute = t.recompute_granularity.empty() ? "no recompute" : t.recompute_granularity;
    if (t.recompute_granularity == "full")
        recompute = fmt::format("full {} {}", t.recompute_method, t.recompute_num_layers);
    return fmt::format("TP {} · PP {} · DP {}{}{} · mb {} · {}{}", l.tp, l.pp, l.dp, l.sp ? " · SP" : "",
                       l.vp > 1 ? fmt::format(" · v{}", l.vp) : "", l.micro_batch, recompute,
                       l.distributed_optimizer ? " · distopt" : "");
}

SearchResult search(const Config& base, const Cluster& cluster, const SearchOptions& o) {
    const auto start = std::chrono::steady_clock::now();
    SearchResult result;
    const int world = cluster.world_size();
    Config resolved = base;
    resolve(resolved, world, tokenizer_vocab_size(resolved.data.tokenizer_type));
    const auto& m = resolved.model;
    const int64_t global = resolved.training.global_batch_size;
    const int max_tp = o.max_tp > 0 ? o.max_tp : cluster.gpus_per_node;
    std::map<std::string, int64_t> rejected;
    std::vector<RankedLayout> ok, too_big;

    const auto consider = [&](Config c) {
        Plan p = plan(c, cluster, o.plan);
        ++result.evaluated;
        if (p.runnable()) {
            ok.push_back({std::move(p), "", ""});
            return true;
        }
        if (p.estimated && !p.fits && std::none_of(p.issues.begin(), p.issues.end(), [](const ConfigIssue& i) {
                return is_layout_field(i.field) && i.field != "memory";
            })) {
            ++rejected["exceeds the device memory"];
            too_big.push_back({std::move(p), "", ""});
        } else {
            const auto it = std::find_if(p.issues.begin(), p.issues.end(),
                                         [](const ConfigIssue& i) { return is_layout_field(i.field); });
            ++rejected[it != p.issues.end() ? "invalid " + it->field : "invalid"];
        }
        return false;
    };

    for (int tp : divisors(world)) {
        // Each tensor-parallel rank holds whole heads, whole key/value groups and equal MLP slices.
        if (tp > max_tp || m.num_attention_heads % tp != 0 || m.ffn_hidden_size % tp != 0 ||
            m.num_query_groups % tp != 0)
            continue;
        for (int pp : divisors(world / tp)) {
            if (m.num_layers % pp != 0) continue;
            const int dp = world / (tp * pp);
            if (global % dp != 0) {
                ++rejected["global_batch_size not divisible by the data-parallel size"];
                continue;
            }
            const int per_stage = m.num_layers / pp;
            std::vector<int> chunk_layers = {0};  // 0 = plain 1F1B
            if (o.interleaving && pp > 1)
                for (int c : divisors(per_stage))
                    if (c < per_stage) chunk_layers.push_back(c);
            for (int mb = 1; mb <= o.max_micro_batch; mb *= 2) {
                if ((global / dp) % mb != 0) continue;
                for (int chunk : chunk_layers) {
                    if (chunk > 0 && (global / dp / mb) % pp != 0) continue;  // interleaving needs m % p == 0
                    for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
                        for (int dist = 0; dist <= (dp > 1 ? 1 : 0); ++dist) {
                            Config c = resolved;
                            c.parallel.tensor_model_parallel_size = tp;
                            c.parallel.pipeline_model_parallel_size = pp;
                            c.parallel.num_layers_per_virtual_pipeline_stage = chunk;
                            c.parallel.sequence_parallel = sp == 1;
                            c.parallel.use_distributed_optimizer = dist == 1;
                            c.training.micro_batch_size = mb;
                            c.model.make_vocab_size_divisible_by = base.model.make_vocab_size_divisible_by;
                            // Recomputation, cheapest first; full block with the fewest layers that fit.
                            bool fitted = false;
                            for (const Recipe r : {Recipe{"", "", 0}, Recipe{"selective", "", 0}}) {
                                c.training.recompute_granularity = r.granularity;
                                c.training.recompute_method = r.method;
                                c.training.recompute_num_layers = r.layers;
                                fitted = consider(c) || fitted;
                            }
                            if (fitted) continue;
                            const int chunk_len = chunk > 0 ? chunk : per_stage;
                            int lo = 1, hi = chunk_len;
                            c.training.recompute_granularity = "full";
                            c.training.recompute_method = "block";
                            while (lo < hi) {  // smallest block that fits (memory falls as it grows)
                                const int mid = (lo + hi) / 2;
                                c.training.recompute_num_layers = mid;
                                const Plan probe = plan(c, cluster, o.plan);
                                if (probe.runnable())
                                    hi = mid;
                                else
                                    lo = mid + 1;
                            }
                            c.training.recompute_num_layers = lo;
                            if (consider(c) && lo == chunk_len) continue;
                            c.training.recompute_method = "uniform";
                            c.training.recompute_num_layers = 1;
                            consider(c);
                        }
                    }
                }
            }
        }
    }

    const auto faster = [](const RankedLayout& a, const RankedLayout& b) {
        if (a.plan.time.tokens_per_s != b.plan.time.tokens_per_s)
            return a.plan.time.tokens_per_s > b.plan.time.tokens_per_s;
        return a.plan.most_loaded().peak_total < b.plan.most_loaded().peak_total;
    };
    std::sort(ok.begin(), ok.end(), faster);
    std::sort(too_big.begin(), too_big.end(), faster);
    result.runnable = static_cast<int64_t>(ok.size());
    if (ok.size() > static_cast<std::size_t>(o.top)) ok.resize(static_cast<std::size_t>(o.top));
    if (too_big.size() > 3) too_big.resize(3);
    for (RankedLayout& r : ok) {
        r.summary = describe_layout(r.plan);
        r.reason = explain(r.plan, ok.front().plan);
    }
    for (RankedLayout& r : too_big) {
        r.summary = describe_layout(r.plan);
        const StageMemory& s = r.plan.most_loaded();
        r.reason = fmt::format("needs {:.1f} GiB on stage {}, {:.1f} GiB more than the {:.1f} GiB available",
                               static_cast<double>(s.peak_total) / (1 << 30), s.stage,
                               static_cast<double>(s.peak_total - r.plan.memory_limit) / (1 << 30),
                               static_cast<double>(r.plan.memory_limit) / (1 << 30));
    }
    result.ranked = std::move(ok);
    result.too_big = std::move(too_big);
    for (const auto& [reason, count] : rejected) result.rejected.push_back({reason, count});
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
}

}  // namespace mwb::planner
