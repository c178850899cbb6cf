// mwb-plan: predicts memory per rank, FLOPs, communication and speed of a configuration on a cluster,
// and searches for the fastest layout that fits. See docs/planner.md.
//
//   mwb-plan --preset gpt3-175b --cluster A100-80GB --nodes 128 [--json]
//   mwb-plan search --config run.json --cluster H100 --nodes 16 [--top 10]
//
// Exit status: 0 the configuration runs and fits (search: some layout does), 2 unusable input (bad
// flag, unreadable or unknown file, preset or device), 3 the configuration would not run.
#include "backend/config/cli.h"
#include "mwb/planner/cluster.h"
#include "mwb/planner/plan.h"
#include "mwb/planner/presets.h"
#include "mwb/planner/report.h"
#include "mwb/planner/search.h"

#include <iostream>

namespace {

using namespace mwb::planner;

struct Args {
    std::string config_file, preset, cluster, accounting = "engine";
    int gpus_per_node = 0, nodes = 0, top = 10, max_tp = 0;
    double memory_gib = 0, intra_gbps = 0, inter_gbps = 0, peak_tflops = 0, efficiency = 0, tokens = 0;
    bool json = false;
};

/// The fewest nodes that hold one replica of the model (TP × PP ranks) when --nodes is not given.
int default_nodes(const mwb::Config& c, int gpus_per_node) {
    const int replica =
        std::max(1, c.parallel.tensor_model_parallel_size) * std::max(1, c.parallel.pipeline_model_parallel_size);
    int nodes = std::max(1, (replica + gpus_per_node - 1) / gpus_per_node);
    while ((nodes * gpus_per_node) % replica != 0 && nodes < replica) ++nodes;
    return nodes;
}

Cluster build_cluster(const Args& a, const mwb::Config& c, std::vector<std::string>& notes) {
    const std::string name = !a.cluster.empty() ? a.cluster : "cpu";
    DeviceSpec d = find_device(device_catalogue(), name);
    if (a.memory_gib > 0) d.memory_bytes = static_cast<int64_t>(a.memory_gib * 1024 * 1024 * 1024);
    if (a.intra_gbps > 0) d.intra_node_bandwidth = a.intra_gbps * 1e9;
    if (a.inter_gbps > 0) d.inter_node_bandwidth = a.inter_gbps * 1e9;
    if (a.peak_tflops > 0) d.peak_flops_16bit = d.peak_flops_fp32 = a.peak_tflops * 1e12;
    if (c.runtime.threads > 0) d.threads = c.runtime.threads;
    const int gpn = a.gpus_per_node > 0 ? a.gpus_per_node : d.gpus_per_node;
    int nodes = a.nodes;
    if (nodes <= 0) {
        nodes = default_nodes(c, gpn);
        if (nodes > 1 || gpn > 1)
            notes.push_back(
                fmt::format("--nodes not given: {} node(s) of {}, the fewest that hold one replica", nodes, gpn));
    }
    if (a.cluster.empty() && gpn * nodes > 1)
        notes.push_back(
            "--cluster not given: planning for the CPU backend; pass --cluster A100-80GB (mwb-plan --list)");
    return make_cluster(d, gpn, nodes);
}

void list_catalogue() {
    std::cout << "devices (resources/gpus.json):\n";
    for (const DeviceSpec& d : device_catalogue())
        std::cout << fmt::format("  {:<10} {:>7.1f} TFLOP/s 16-bit, {}  {}\n", d.name, d.peak_flops_16bit / 1e12,
                                 format_bytes(static_cast<double>(d.memory_bytes)), d.description);
    std::cout << "presets (resources/presets/):\n";
    for (const std::string& n : preset_names()) std::cout << "  " << n << "\n";
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "mwb-plan: predict memory per rank, FLOPs, communication and speed of a configuration on a "
        "cluster; `mwb-plan search` ranks the layouts that fit. See docs/planner.md.",
        "mwb-plan"};
    Args a;
    app.add_option("--config", a.config_file, "Configuration JSON (the schema of docs/config.md)");
    app.add_option("--preset", a.preset, "A preset of resources/presets by name, e.g. gpt3-175b");
    app.add_option("--cluster", a.cluster, "Device type from resources/gpus.json (default: cpu)");
    app.add_option("--gpus-per-node", a.gpus_per_node, "Devices (ranks) per node (default: the device's usual node)");
    app.add_option("--nodes", a.nodes, "Nodes (default: the fewest that hold one model replica)");
    app.add_option("--memory-gib", a.memory_gib, "Override the device memory, GiB");
    app.add_option("--intra-node-gbps", a.intra_gbps,
                   "Override the intra-node bandwidth, GB/s per device per direction");
    app.add_option("--inter-node-gbps", a.inter_gbps,
                   "Override the inter-node bandwidth, GB/s per device per direction");
    app.add_option("--peak-tflops", a.peak_tflops, "Override the device's peak TFLOP/s");
    app.add_option("--efficiency", a.efficiency, "Fraction of peak the GEMMs reach (default: the device's)");
    app.add_option("--tokens", a.tokens, "Tokens to train, for days to train (default: train_iters x batch x seq)");
    app.add_option("--accounting", a.accounting,
                   "Activations as mwb-train allocates them (engine) or as "
                   "Korthikanti et al. 2022 count Megatron-LM's (megatron)")
        ->check(CLI::IsMember({"engine", "megatron"}));
    app.add_flag("--json", a.json, "Print JSON instead of tables");
    app.add_option("--top", a.top, "search: layouts to show")->check(CLI::PositiveNumber);
    app.add_option("--max-tp", a.max_tp, "search: largest tensor-parallel size (default: devices per node)");
    app.add_flag_callback(
        "--list",
        [] {
            list_catalogue();
            std::exit(0);
        },
        "List the devices and presets, then exit");
    app.add_flag_callback(
        "--version",
        [] {
            std::cout << "mwb-plan " << MWB_VERSION << "\n";
            std::exit(0);
        },
        "Print the version and exit");
    CLI::App* search_cmd =
        app.add_subcommand("search", "Rank the layouts of the model that run and fit on the cluster");
    search_cmd->fallthrough();

    const mwb::ConfigFlags flags(app);
    if (const auto code = mwb::parse_command_line(app, argc, argv)) return *code;

    try {
        if (!a.config_file.empty() && !a.preset.empty()) throw mwb::Error("give --config or --preset, not both");
        if (a.config_file.empty() && a.preset.empty())
            throw mwb::Error("give --config FILE.json or --preset NAME (mwb-plan --list)");
        mwb::Config cfg = a.preset.empty() ? mwb::load_config_file(a.config_file) : load_preset(a.preset);
        flags.apply(cfg);
        std::vector<std::string> notes;
        const Cluster cluster = build_cluster(a, cfg, notes);
        PlanOptions options;
        options.accounting = a.accounting == "megatron" ? Accounting::MegatronLM : Accounting::Engine;
        options.compute_efficiency = a.efficiency;
        options.train_tokens = a.tokens;

        Plan p = plan(cfg, cluster, options);
        p.notes.insert(p.notes.begin(), notes.begin(), notes.end());
        if (search_cmd->parsed()) {
            SearchOptions so;
            so.top = a.top;
            so.max_tp = a.max_tp;
            so.plan = options;
            const SearchResult r = search(cfg, cluster, so);
            if (a.json)
                std::cout << to_json(r).dump(2) << "\n";
            else
                std::cout << text_search_report(r, p);
            return r.ranked.empty() ? 3 : 0;
        }
        if (a.json)
            std::cout << to_json(p).dump(2) << "\n";
        else
            std::cout << text_report(p);
        return p.runnable() ? 0 : 3;
    } catch (const mwb::Error& e) {
        std::cerr << "mwb-plan: " << e.what() << "\n";
        return 2;
    }
}
