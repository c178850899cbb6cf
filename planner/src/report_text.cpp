#include "mwb/planner/report.h"

#include "backend/config/validate.h"

#include <algorithm>
#include <cmath>

namespace mwb::planner {

namespace {

/// A plain-text table; `align` has one letter per column, 'l' or 'r' (default: first left, others right).
class Table {
public:
    explicit Table(std::vector<std::string> header, std::string align = "") : align_(std::move(align)) {
        rows_.push_back(std::move(header));
    }
    void row(std::vector<std::string> r) { rows_.push_back(std::move(r)); }
    std::string str() const {
        std::vector<std::size_t> w;
        for (const auto& r : rows_)
            for (std::size_t i = 0; i < r.size(); ++i) {
                if (w.size() <= i) w.push_back(0);
                w[i] = std::max(w[i], width(r[i]));
            }
        std::string out;
        for (std::size_t k = 0; k < rows_.size(); ++k) {
            const auto& r = rows_[k];
            std::string line = "  ";
            for (std::size_t i = 0; i < r.size(); ++i) {
                const std::string pad(w[i] - width(r[i]), ' ');
                const bool left = i < align_.size() ? align_[i] == 'l' : i == 0;
                line += (i == 0 ? "" : "  ") + (left ? r[i] + pad : pad + r[i]);
            }
            while (!line.empty() && line.back() == ' ') line.pop_back();
            out += line + "\n";
            if (k == 0) {
                std::size_t total = 0;
                for (std::size_t x : w) total += x + 2;
                out += "  " + std::string(total - 2, '-') + "\n";
            }
        }
        return out;
    }

private:
    /// Display width: UTF-8 continuation bytes take no column.
    static std::size_t width(const std::string& s) {
        return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
    }
    std::string align_;
    std::vector<std::vector<std::string>> rows_;
};

/// Bytes in `unit` (1 << 30 for GiB, 1 << 20 for MiB).
std::string in_unit(int64_t b, double unit) {
    return fmt::format("{:.2f}", static_cast<double>(b) / unit);
}
std::string gib(int64_t b) {
    return in_unit(b, 1024.0 * 1024 * 1024);
}

std::string seconds(double s) {
    if (s >= 1) return fmt::format("{:.3f} s", s);
    if (s >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
    return fmt::format("{:.1f} µs", s * 1e6);
}

std::string recompute_name(const Config& c) {
    const auto& t = c.training;
    if (t.recompute_granularity.empty()) return "none";
    if (t.recompute_granularity == "selective") return "selective (attention core)";
    return fmt::format("full, {} {}", t.recompute_method, t.recompute_num_layers);
}

void issues_and_notes(std::string& out, const Plan& p) {
    if (!p.issues.empty()) {
        out += fmt::format("\nProblems ({}):\n", p.issues.size());
        for (const ConfigIssue& i : p.issues) out += fmt::format("  - {}: {}\n", i.field, i.message);
    }
    for (const std::string& n : p.notes) out += fmt::format("note: {}\n", n);
}

/// 8030261248 -> "8,030,261,248": a count to compare with a published one digit by digit.
std::string digits_grouped(int64_t n) {
    std::string d = std::to_string(n < 0 ? -n : n), out;
    for (std::size_t i = 0; i < d.size(); ++i) {
        if (i > 0 && (d.size() - i) % 3 == 0) out += ',';
        out += d[i];
    }
    return n < 0 ? "-" + out : out;
}

/// "32 heads", or "32 heads (8 key/value groups, head dim 128)" when they differ from GPT's.
std::string describe_attention(const ModelShape& m) {
    if (m.G == m.a && m.d * m.a == m.h) return fmt::format("{} heads", m.a);
    if (m.G == m.a) return fmt::format("{} heads (head dim {})", m.a, m.d);
    return fmt::format("{} heads ({} key/value group{}, head dim {})", m.a, m.G, m.G == 1 ? "" : "s", m.d);
}

}  // namespace

std::string format_bytes(double b) {
    const double a = std::fabs(b);
    if (a >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
    if (a >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
    if (a >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
    return fmt::format("{:.0f} B", b);
}

std::string format_count(double n) {
    const double a = std::fabs(n);
    if (a >= 1e12) return fmt::format("{:.2f} T", n / 1e12);
    if (a >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
    if (a >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
    if (a >= 1e3) return fmt::format("{:.1f} K", n / 1e3);
    return fmt::format("{:.0f}", n);
}

std::string text_report(const Plan& p) {
    const Cluster& c = p.cluster;
    std::string out =
        fmt::format("cluster  {} × {} ({} node{} × {}), {:.4g} TFLOP/s 16-bit, {} per device\n", c.world_size(),
                    c.device.name, c.nodes, c.nodes == 1 ? "" : "s", c.gpus_per_node, c.device.peak_flops_16bit / 1e12,
                    format_bytes(static_cast<double>(c.device.memory_bytes)));
    if (!p.estimated) {
        out += "\nNo estimate: the model or layout is not valid.\n";
        issues_and_notes(out, p);
        return out;
    }
    const ModelShape& m = p.model;
    const Layout& l = p.layout;
    const auto& t = p.config.training;
    const auto& mc = p.config.model;
    out += fmt::format(
        "model    {} layers, hidden {}, {}, {}ffn {}, seq {}, vocab {} (padded {}), {} embeddings, {}, {}{}\n", m.L,
        m.h, describe_attention(m), m.swiglu ? "SwiGLU " : "", m.f, m.s, model_vocab_size(p.config), m.V,
        m.tied ? "tied" : "untied", mc.normalization,
        mc.position_embedding_type == "rope"               ? fmt::format("RoPE (base {})", mc.rotary_base)
        : mc.position_embedding_type == "learned_absolute" ? std::string("learned positions")
                                                           : std::string("no positions"),
        !m.qkv_bias ? ", no biases"
        : !m.bias   ? ", QKV bias only"
                    : "");
    out += fmt::format("layout   {} (world {}), {}, micro-batch {} × {} micro-batches × DP {} = global batch {}\n",
                       describe_layout(p), l.world,
                       l.vp > 1 ? fmt::format("interleaved 1F1B, {} chunks per rank", l.vp) : "1F1B", l.micro_batch,
                       l.micro_batches, l.dp, l.global_batch);
    out += fmt::format("         recompute {}, {}{}, activations counted as {}\n", recompute_name(p.config),
                       t.bf16   ? "bf16"
                       : t.fp16 ? "fp16"
                                : "fp32",
                       c.device.emulated_16bit && p.precision.half ? " (activations 16-bit; weights, attention probabilities, logits and partial sums fp32)" : "",
                       p.options.accounting == Accounting::Engine ? "mwb-train allocates them"
                                                                  : "Megatron-LM (Korthikanti et al. 2022)");
    const ParameterCounts& pc = p.parameters;
    out += fmt::format(
        "params   {} total ({}{}), {} per layer, {} on the most loaded rank\n",
        format_count(static_cast<double>(pc.unpadded())), digits_grouped(pc.unpadded()),
        pc.vocabulary_padding > 0 ? fmt::format("; {} with the vocabulary padded to {}", digits_grouped(pc.total), m.V)
                                  : "",
        format_count(static_cast<double>(pc.per_layer)), format_count(static_cast<double>(pc.max_per_rank())));

    const bool small = p.most_loaded().peak_total < (int64_t{1} << 30);
    const double unit = small ? 1024.0 * 1024 : 1024.0 * 1024 * 1024;
    out +=
        fmt::format("\nMemory per rank ({}; peak per category, then the simultaneous peak)\n", small ? "MiB" : "GiB");
    Table mem({"stage", "layers", "in flight", "weights", "gradients", "optimizer", "activations", "workspace", "data",
               "peak"});
    for (const StageMemory& s : p.memory) {
        std::vector<std::string> r = {fmt::format("{}{}", s.stage, s.stage == p.most_loaded_stage ? " *" : ""),
                                      std::to_string(s.layers), std::to_string(s.in_flight)};
        for (int k = 0; k < kMemCategories; ++k) r.push_back(in_unit(s.peak[static_cast<std::size_t>(k)], unit));
        r.push_back(in_unit(s.peak_total, unit));
        mem.row(r);
    }
    out += mem.str();
    out +=
        p.memory_limit > 0
            ? fmt::format(
                  "  most loaded: stage {}, {} of {} available: {}\n", p.most_loaded_stage,
                  format_bytes(static_cast<double>(p.most_loaded().peak_total)),
                  format_bytes(static_cast<double>(p.memory_limit)),
                  p.fits ? fmt::format("fits ({} free)",
                                       format_bytes(static_cast<double>(p.memory_limit - p.most_loaded().peak_total)))
                         : fmt::format("does NOT fit ({} too much)",
                                       format_bytes(static_cast<double>(p.most_loaded().peak_total - p.memory_limit))))
            : "  (device memory not checked)\n";

    out += fmt::format("\nFLOPs per iteration: model {:.4g}, hardware {:.4g} (recompute ×{:.4f})\n", p.flops.model,
                       p.flops.hardware, p.flops.hardware / p.flops.model);

    out += "\nCommunication per rank per iteration (ring algorithm; the busiest stage of each group)\n";
    Table comm({"group", "collectives", "calls", "payload", "bytes sent"});
    for (int g = 0; g < kGroups; ++g) {
        int64_t calls = 0, payload = 0, sent = 0;
        std::string ops;
        for (const StageCommunication& s : p.communication) {
            if (s.bytes_sent[static_cast<std::size_t>(g)] < sent || s.bytes_sent[static_cast<std::size_t>(g)] == 0)
                continue;
            sent = s.bytes_sent[static_cast<std::size_t>(g)];
            payload = s.payload[static_cast<std::size_t>(g)];
            calls = 0;
            ops.clear();
            for (const Collective& col : s.collectives) {
                if (static_cast<int>(col.group) != g) continue;
                calls += col.calls;
                const std::string op(op_name(col.op));
                if (ops.find(op) == std::string::npos) ops += (ops.empty() ? "" : ", ") + op;
            }
        }
        if (sent > 0)
            comm.row({std::string(group_name(static_cast<Group>(g))), ops, std::to_string(calls),
                      format_bytes(static_cast<double>(payload)), format_bytes(static_cast<double>(sent))});
    }
    out += p.layout.world > 1 ? comm.str() : "  none: one rank\n";

    const Timing& tm = p.time;
    out += fmt::format("\nTime per iteration (compute at {:.0f}% of {:.4g} TFLOP/s; communication not overlapped)\n",
                       100 * tm.compute_efficiency, tm.peak_flops / 1e12);
    Table time({"part", "time", "share"});
    const auto add = [&](const char* what, double s) {
        if (s > 0) time.row({what, seconds(s), fmt::format("{:.1f}%", 100 * s / tm.iteration_s)});
    };
    add("compute", tm.compute_s);
    add("TP/SP communication", tm.tp_s);
    add("pipeline sends", tm.pp_s);
    add(fmt::format("pipeline bubble ((p−1)/(v·m) = {:.3f})", tm.bubble_fraction).c_str(), tm.bubble_s);
    add("gradient reductions (DP, SP norms)", tm.dp_s);
    add("tied-embedding and scalar reductions", tm.embedding_s);
    add("optimizer step", tm.optimizer_s);
    time.row({"iteration", seconds(tm.iteration_s), "100%"});
    out += time.str();
    out +=
        fmt::format("  {} tokens/s, {:.1f} model TFLOP/s per device, MFU {:.1f}%, HFU {:.1f}%\n",
                    format_count(tm.tokens_per_s), tm.model_flops_per_s_per_device / 1e12, 100 * tm.mfu, 100 * tm.hfu);
    if (tm.train_tokens > 0)
        out += tm.days >= 1 ? fmt::format("  {} tokens in {:.1f} days\n", format_count(tm.train_tokens), tm.days)
               : tm.days >= 1.0 / 24
                   ? fmt::format("  {} tokens in {:.1f} hours\n", format_count(tm.train_tokens), tm.days * 24)
                   : fmt::format("  {} tokens in {:.1f} minutes\n", format_count(tm.train_tokens), tm.days * 1440);
    issues_and_notes(out, p);
    return out;
}

std::string text_search_report(const SearchResult& r, const Plan& base) {
    const Cluster& c = base.cluster;
    std::string out = fmt::format("search   {} × {}: {} layouts evaluated in {:.2f} s, {} run and fit\n",
                                  c.world_size(), c.device.name, r.evaluated, r.seconds, r.runnable);
    if (r.ranked.empty())
        out += "\nNo layout runs on this cluster.\n";
    else {
        out += "\n";
        Table t({"#", "layout", "tokens/s", "iteration", "MFU", "memory (GiB)"}, "rlrrrr");
        int k = 0;
        for (const RankedLayout& l : r.ranked)
            t.row({std::to_string(++k), l.summary, format_count(l.plan.time.tokens_per_s),
                   seconds(l.plan.time.iteration_s), fmt::format("{:.1f}%", 100 * l.plan.time.mfu),
                   fmt::format("{} / {}", gib(l.plan.most_loaded().peak_total), gib(l.plan.memory_limit))});
        out += t.str() + "\nWhy:\n";
        k = 0;
        for (const RankedLayout& l : r.ranked) out += fmt::format("  {:>2}. {}\n", ++k, l.reason);
    }
    if (!r.too_big.empty()) {
        out += "\nFastest layouts that do not fit:\n";
        for (const RankedLayout& l : r.too_big)
            out += fmt::format("  {}: {} tokens/s, {}\n", l.summary, format_count(l.plan.time.tokens_per_s), l.reason);
    }
    if (!r.rejected.empty()) {
        out += "\nRejected:\n";
        for (const Rejection& x : r.rejected) out += fmt::format("  {} × {}\n", x.count, x.reason);
    }
    return out;
}

}  // namespace mwb::planner
