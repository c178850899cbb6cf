#include "mwb/planner/cluster.h"

#include "mwb/kernels/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

namespace mwb::planner {

namespace {

std::string lower(std::string_view s) {
    std::string r(s);
    std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return r;
}

template <typename T>
void read(const nlohmann::json& e, const char* key, T& out, bool required, std::string_view where) {
    const auto it = e.find(key);
    if (it == e.end()) {
        if (required) throw Error(fmt::format("{}: missing \"{}\"", where, key));
        return;
    }
    try {
        out = it->get<T>();
    } catch (const nlohmann::json::exception&) {
        throw Error(fmt::format("{}: \"{}\" has the wrong type ({})", where, key, it->dump()));
    }
}

DeviceSpec parse_device(const nlohmann::json& e, std::string_view source, std::size_t index) {
    DeviceSpec d;
    std::string where = fmt::format("{}: devices[{}]", source, index);
    read(e, "name", d.name, true, where);
    where = fmt::format("{}: device \"{}\"", source, d.name);
    read(e, "aliases", d.aliases, false, where);
    read(e, "description", d.description, false, where);
    read(e, "peak_flops_16bit", d.peak_flops_16bit, true, where);
    read(e, "peak_flops_fp32", d.peak_flops_fp32, true, where);
    read(e, "peak_flops_tf32", d.peak_flops_tf32, false, where);
    read(e, "memory_bytes", d.memory_bytes, true, where);
    read(e, "memory_bandwidth", d.memory_bandwidth, true, where);
    read(e, "intra_node_bandwidth", d.intra_node_bandwidth, true, where);
    read(e, "inter_node_bandwidth", d.inter_node_bandwidth, true, where);
    read(e, "intra_node_latency_s", d.intra_node_latency_s, false, where);
    read(e, "inter_node_latency_s", d.inter_node_latency_s, false, where);
    read(e, "gpus_per_node", d.gpus_per_node, false, where);
    read(e, "emulated_16bit", d.emulated_16bit, false, where);
    read(e, "threads", d.threads, false, where);
    read(e, "compute_efficiency", d.compute_efficiency, false, where);
    read(e, "comm_efficiency", d.comm_efficiency, false, where);
    read(e, "workspace_bytes", d.workspace_bytes, false, where);
    read(e, "runtime_reserve_bytes", d.runtime_reserve_bytes, false, where);
    const auto positive = [&](double v, const char* key) {
        if (!(v > 0)) throw Error(fmt::format("{}: \"{}\" must be positive (got {})", where, key, v));
    };
    positive(d.peak_flops_16bit, "peak_flops_16bit");
    positive(d.peak_flops_fp32, "peak_flops_fp32");
    positive(d.memory_bandwidth, "memory_bandwidth");
    positive(d.intra_node_bandwidth, "intra_node_bandwidth");
    positive(d.inter_node_bandwidth, "inter_node_bandwidth");
    positive(d.gpus_per_node, "gpus_per_node");
    if (!(d.compute_efficiency > 0 && d.compute_efficiency <= 1))
        throw Error(fmt::format("{}: \"compute_efficiency\" must be in (0, 1] (got {})", where, d.compute_efficiency));
    if (!(d.comm_efficiency > 0 && d.comm_efficiency <= 1))
        throw Error(fmt::format("{}: \"comm_efficiency\" must be in (0, 1] (got {})", where, d.comm_efficiency));
    if (d.memory_bytes < 0 || d.workspace_bytes < 0 || d.runtime_reserve_bytes < 0)
        throw Error(fmt::format("{}: byte counts must not be negative", where));
    return d;
}

}  // namespace

int64_t Cluster::memory_limit() const {
    if (device.memory_bytes <= 0) return 0;
    return std::max<int64_t>(1, device.memory_bytes - device.runtime_reserve_bytes);
}

std::vector<DeviceSpec> parse_device_catalogue(std::string_view json_text, std::string_view source) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(fmt::format("{}: not valid JSON ({})", source, e.what()));
    }
    if (!j.is_object() || !j.contains("devices") || !j["devices"].is_array())
        throw Error(fmt::format("{}: expected an object with a \"devices\" array", source));
    std::vector<DeviceSpec> out;
    for (std::size_t i = 0; i < j["devices"].size(); ++i) out.push_back(parse_device(j["devices"][i], source, i));
    return out;
}

std::vector<DeviceSpec> load_device_catalogue(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in) throw Error(fmt::format("cannot read the device catalogue '{}'", file.string()));
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_device_catalogue(ss.str(), file.string());
}

const std::vector<DeviceSpec>& device_catalogue() {
    static std::once_flag once;
    static std::vector<DeviceSpec> catalogue;
    std::call_once(once, [] { catalogue = load_device_catalogue(resources_dir() / "gpus.json"); });
    return catalogue;
}

const DeviceSpec& find_device(const std::vector<DeviceSpec>& catalogue, std::string_view name) {
    const std::string key = lower(name);
    for (const DeviceSpec& d : catalogue) {
        if (lower(d.name) == key) return d;
        for (const std::string& a : d.aliases)
            if (lower(a) == key) return d;
    }
    std::string known;
    for (const DeviceSpec& d : catalogue) known += (known.empty() ? "" : ", ") + d.name;
    throw Error(fmt::format("unknown cluster device \"{}\" (known: {})", name, known));
}

Cluster make_cluster(const DeviceSpec& device, int gpus_per_node, int nodes) {
    if (gpus_per_node < 0) throw Error(fmt::format("gpus_per_node must be positive (got {})", gpus_per_node));
    if (nodes < 1) throw Error(fmt::format("nodes must be at least 1 (got {})", nodes));
    return Cluster{device, gpus_per_node == 0 ? device.gpus_per_node : gpus_per_node, nodes};
}

std::filesystem::path resources_dir() {
    namespace fs = std::filesystem;
    if (const char* env = std::getenv("MWB_RESOURCES_DIR"); env && *env) return env;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        for (const fs::path& candidate :
             {exe.parent_path() / ".." / "share" / "mwb", exe.parent_path() / ".." / ".." / "resources"})
            if (fs::exists(candidate / "gpus.json", ec)) return fs::weakly_canonical(candidate, ec);
    }
    return MWB_PLANNER_RESOURCES_DIR;
}

}  // namespace mwb::planner
