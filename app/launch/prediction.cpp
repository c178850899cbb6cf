#include "app/launch/prediction.h"

#include <algorithm>

namespace mwb::app {

std::vector<double> predicted_peak_per_rank(const planner::Plan& plan) {
    if (!plan.estimated || plan.memory.empty()) return {};
    const int tp = std::max(1, plan.layout.tp), dp = std::max(1, plan.layout.dp);
    const int pp = std::max(1, static_cast<int>(plan.memory.size()));
    std::vector<double> peaks(static_cast<std::size_t>(tp * dp * pp));
    for (std::size_t r = 0; r < peaks.size(); ++r) {
        const std::size_t stage = r / static_cast<std::size_t>(tp * dp);
        peaks[r] = static_cast<double>(plan.memory[stage].peak_total);
    }
    return peaks;
}

double device_peak_tflops(const planner::DeviceSpec& device, const Config& config) {
    const bool half = config.training.bf16 || config.training.fp16;
    return (half ? device.peak_flops_16bit : device.peak_flops_fp32) / 1e12;
}

double predicted_capacity(const planner::Plan& plan) {
    // CPU ranks share the machine's memory: no per-device capacity worth drawing (the bars then scale
    // to the data instead of showing megabytes against the catalogue's gigabytes)
    if (plan.cluster.device.name == "cpu") return 0;
    return static_cast<double>(plan.cluster.device.memory_bytes);
}

}  // namespace mwb::app
