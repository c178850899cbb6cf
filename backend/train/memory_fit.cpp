#include "backend/train/memory_fit.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"
#include "mwb/planner/plan.h"

#include <fmt/format.h>

#include <cctype>
#include <fstream>
#include <sstream>

namespace mwb {

namespace {

/// The first number in a file ("max" and unreadable files: -1).
int64_t read_number(const char* path) {
    std::ifstream in(path);
    std::string word;
    if (!(in >> word) || word.empty() || !std::isdigit(static_cast<unsigned char>(word[0]))) return -1;
    try {
        return std::stoll(word);
    } catch (const std::exception&) {
        return -1;  // beyond int64: no limit
    }
}

int64_t mem_available() {
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
        if (!line.starts_with("MemAvailable:")) continue;
        std::istringstream fields(line.substr(13));
        int64_t kib = 0;
        if (fields >> kib) return kib * 1024;
    }
    return 0;
}

}  // namespace

HostMemory host_memory_available() {
    HostMemory h{mem_available(), "MemAvailable"};
    // cgroup v2, then v1; "no limit" reads as max or a huge number.
    for (const auto& [limit_file, usage_file] :
         {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
          std::pair{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
        const int64_t limit = read_number(limit_file), usage = read_number(usage_file);
        if (limit <= 0 || usage < 0 || limit >= (int64_t{1} << 60)) continue;
        const int64_t room = std::max<int64_t>(0, limit - usage);
        if (h.available == 0 || room < h.available) h = {room, fmt::format("cgroup limit {}", format_memory(static_cast<double>(limit)))};
        break;
    }
    return h;
}

std::string format_memory(double b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (b >= 1024 && u < 6) {
        b /= 1024;
        ++u;
    }
    if (b >= 1024) return fmt::format("{:.3g} {}", b, units[u]);
    return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.2f} {}", b, units[u]);
}

PlannedMemory planned_rank_memory(const Config& cfg, int world_size, int world_rank) {
    const auto& m = cfg.model;
    const auto& p = cfg.parallel;
    const int model_ranks = p.tensor_model_parallel_size * p.pipeline_model_parallel_size;
    const int stage = world_rank / (p.tensor_model_parallel_size * (world_size / model_ranks));
    // The planner counts in int64: a model beyond a pebibyte per rank is refused on a double lower bound of its
    // weights, gradients and Adam moments alone (12·h² per layer, 16 bytes per parameter).
    const double h = m.hidden_size;
    const double lower = static_cast<double>(m.num_layers) / p.pipeline_model_parallel_size * 12.0 * h * h /
                         p.tensor_model_parallel_size * 16.0;
    if (lower > 0x1p50)
        return {lower, fmt::format("at least 12·h²·L/(tp·pp) = {:.3g} parameters × 16 bytes of weights, gradients and "
                                   "Adam moments",
                                   lower / 16)};
    const bool cuda = cfg.runtime.device == "cuda";
    const std::vector<planner::DeviceSpec>& catalogue = planner::device_catalogue();
    planner::DeviceSpec device = catalogue.front();
    for (const planner::DeviceSpec& d : catalogue)
        if ((d.name == "cpu") != cuda) {  // the GPUs' entries agree on everything but speed and size
            device = d;
            break;
        }
    if (!cuda) device.threads = cfg.runtime.threads > 0 ? cfg.runtime.threads : ops::num_threads();
    device.memory_bytes = 0;  // the caller compares; the planner need not
    const planner::Plan plan = planner::plan(cfg, planner::make_cluster(device, world_size, 1));
    MWB_CHECK(plan.estimated && stage < static_cast<int>(plan.memory.size()),
              "memory check: the planner could not estimate this configuration");
    const planner::StageMemory& s = plan.memory[static_cast<std::size_t>(stage)];
    const auto cat = [&](MemCategory c) { return format_memory(static_cast<double>(s.peak[static_cast<int>(c)])); };
    return {static_cast<double>(s.peak_total),
            fmt::format("weights {}, gradients {}, optimizer {}, activations {}, workspace {}", cat(MemCategory::Weights),
                        cat(MemCategory::Gradients), cat(MemCategory::Optimizer), cat(MemCategory::Activations),
                        cat(MemCategory::Workspace))};
}

}  // namespace mwb
