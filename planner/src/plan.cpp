#include "mwb/planner/plan.h"

#include "backend/config/validate.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace mwb::planner {

namespace {

constexpr std::array<std::string_view, 25> kLayoutFields = {"cluster",
                                                            "num_layers",
                                                            "hidden_size",
                                                            "num_attention_heads",
                                                            "num_query_groups",
                                                            "kv_channels",
                                                            "rotary_percent",
                                                            "rotary_base",
                                                            "use_rope_scaling",
                                                            "rope_scaling_factor",
                                                            "ffn_hidden_size",
                                                            "seq_length",
                                                            "max_position_embeddings",
                                                            "vocab_size",
                                                            "make_vocab_size_divisible_by",
                                                            "tensor_model_parallel_size",
                                                            "pipeline_model_parallel_size",
                                                            "sequence_parallel",
                                                            "num_layers_per_virtual_pipeline_stage",
                                                            "micro_batch_size",
                                                            "global_batch_size",
                                                            "recompute_method",
                                                            "recompute_num_layers",
                                                            "fp16",
                                                            "memory"};

std::string gib(int64_t bytes) {
    return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
}

void memory_check(Plan& p) {
    p.memory_limit = p.cluster.memory_limit();
    p.fits = true;
    if (p.memory_limit <= 0) return;
    for (const StageMemory& s : p.memory) {
        if (s.peak_total <= p.memory_limit) continue;
        p.fits = false;
        const auto cat = [&](MemCategory c) { return gib(s.peak[static_cast<int>(c)]); };
        p.issues.push_back(
            {"memory",
             fmt::format("pipeline stage {} needs {} per {} (weights {}, gradients {}, optimizer {}, "
                         "activations {}, workspace {}) but {} are available ({} less a {} runtime "
                         "reserve): {} too much",
                         s.stage, gib(s.peak_total), p.cluster.device.name, cat(MemCategory::Weights),
                         cat(MemCategory::Gradients), cat(MemCategory::Optimizer), cat(MemCategory::Activations),
                         cat(MemCategory::Workspace), gib(p.memory_limit), gib(p.cluster.device.memory_bytes),
                         gib(p.cluster.device.runtime_reserve_bytes), gib(s.peak_total - p.memory_limit))});
    }
}

}  // namespace

bool is_layout_field(const std::string& field) {
    return std::find(kLayoutFields.begin(), kLayoutFields.end(), field) != kLayoutFields.end();
}

bool Plan::runnable() const {
    if (!estimated || !fits) return false;
    return std::none_of(issues.begin(), issues.end(), [](const ConfigIssue& i) { return is_layout_field(i.field); });
}

std::array<int64_t, kGroups> Plan::max_bytes_sent() const {
    std::array<int64_t, kGroups> out{};
    for (const StageCommunication& s : communication)
        for (int g = 0; g < kGroups; ++g)
            out[static_cast<std::size_t>(g)] =
                std::max(out[static_cast<std::size_t>(g)], s.bytes_sent[static_cast<std::size_t>(g)]);
    return out;
}

Plan plan(const Config& config, const Cluster& cluster, const PlanOptions& options) {
    Plan p;
    p.config = config;
    p.cluster = cluster;
    p.options = options;
    const int world = cluster.world_size();
    if (world < 1) {
        p.issues.push_back({"cluster", fmt::format("the cluster has no devices ({} nodes × {} per node)", cluster.nodes,
                                                   cluster.gpus_per_node)});
        return p;
    }
    p.notes = resolve(p.config, world, tokenizer_vocab_size(p.config.data.tokenizer_type));
    p.issues = validate(p.config, world);
    if (std::any_of(p.issues.begin(), p.issues.end(), [](const ConfigIssue& i) { return is_layout_field(i.field); }))
        return p;

    const Config& c = p.config;
    p.model = ModelShape::from(c);
    p.layout = Layout::from(c, world);
    p.precision = Precision::from(c.training, cluster.device);
    p.parameters = count_parameters(p.model, p.layout);
    p.memory = stage_memory({p.model, p.layout, p.precision, cluster.device, p.parameters, options.accounting});
    p.most_loaded_stage = static_cast<int>(
        std::max_element(p.memory.begin(), p.memory.end(),
                         [](const StageMemory& a, const StageMemory& b) { return a.peak_total < b.peak_total; }) -
        p.memory.begin());
    p.flops = flops_per_iteration(c);
    p.communication = communication(p.model, p.layout, p.precision, p.parameters);
    const double tokens = options.train_tokens > 0
                              ? options.train_tokens
                              : static_cast<double>(c.training.train_iters) *
                                    static_cast<double>(p.layout.global_batch) * static_cast<double>(p.model.s);
    p.time = predict_time(p.model, p.layout, p.precision, cluster, p.communication, p.parameters, p.flops,
                          options.compute_efficiency, tokens);
    memory_check(p);
    if (p.layout.tp > cluster.gpus_per_node)
        p.notes.push_back(
            fmt::format("tensor_model_parallel_size ({}) spans nodes ({} devices per node): its "
                        "collectives run over the network",
                        p.layout.tp, cluster.gpus_per_node));
    p.estimated = true;
    return p;
}

}  // namespace mwb::planner
