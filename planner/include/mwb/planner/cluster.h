#pragma once
// The hardware a plan runs on: one device type from the catalogue (resources/gpus.json), how many per
// node, how many nodes. Bandwidths are per device and per direction; FLOP/s are dense (no sparsity).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace mwb::planner {

struct DeviceSpec {
    std::string name;                  ///< catalogue key, e.g. "A100-80GB", "cpu"
    std::vector<std::string> aliases;  ///< other names it is found by (case-insensitive)
    std::string description;
    double peak_flops_16bit = 0;      ///< dense bf16/fp16 matmul FLOP/s (bf16 and fp16 runs)
    double peak_flops_fp32 = 0;       ///< FP32 FLOP/s (fp32 runs: the engine computes fp32, not TF32)
    double peak_flops_tf32 = 0;       ///< informative
    int64_t memory_bytes = 0;         ///< device memory; 0 = not checked
    double memory_bandwidth = 0;      ///< bytes/s (optimizer step time)
    double intra_node_bandwidth = 0;  ///< bytes/s per device, one direction (NVLink)
    double inter_node_bandwidth = 0;  ///< bytes/s per device, one direction (its network adapter)
    double intra_node_latency_s = 0;  ///< per ring step of a collective, or per send
    double inter_node_latency_s = 0;
    int gpus_per_node = 8;              ///< the usual node of this device
    bool emulated_16bit = false;        ///< CPU backend: bf16/fp16 values live in fp32 buffers (4 bytes)
    int threads = 0;                    ///< CPU backend: threads per rank (the attention scratch scales with it)
    double compute_efficiency = 0.5;    ///< fraction of peak the training GEMMs reach (an assumption)
    double comm_efficiency = 0.8;       ///< fraction of link bandwidth collectives reach (an assumption)
    int64_t workspace_bytes = 0;        ///< fixed library workspace (cuBLAS), counted as workspace
    int64_t runtime_reserve_bytes = 0;  ///< not tracked by the allocator: CUDA context, NCCL, fragmentation
};

struct Cluster {
    DeviceSpec device;
    int gpus_per_node = 1;  ///< ranks per node
    int nodes = 1;

    int world_size() const { return gpus_per_node * nodes; }
    /// Bytes one rank may allocate: memory_bytes − runtime_reserve_bytes; 0 means "not checked".
    int64_t memory_limit() const;
};

/// Parses the catalogue (the JSON of resources/gpus.json); errors name `source` and the entry.
std::vector<DeviceSpec> parse_device_catalogue(std::string_view json_text, std::string_view source);
std::vector<DeviceSpec> load_device_catalogue(const std::filesystem::path& file);
/// The catalogue in resources_dir() (read once, then cached; thread-safe).
const std::vector<DeviceSpec>& device_catalogue();
/// The device named `name` or one of its aliases (case-insensitive); the error lists the known names.
const DeviceSpec& find_device(const std::vector<DeviceSpec>& catalogue, std::string_view name);
/// A cluster of `nodes` nodes of `gpus_per_node` devices (0 = the device's usual node).
Cluster make_cluster(const DeviceSpec& device, int gpus_per_node = 0, int nodes = 1);

/// resources/: $MWB_RESOURCES_DIR, else ../share/mwb or ../../resources next to the running program,
/// else the source tree's (compiled in).
std::filesystem::path resources_dir();

}  // namespace mwb::planner
