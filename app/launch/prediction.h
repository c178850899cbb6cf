#pragma once
// The planner's prediction as the Monitor draws it: peak bytes per global rank. Every rank of a
// pipeline stage is alike (docs/planner.md), and ranks are numbered tp + TP·(dp + DP·pp)
// (backend/parallel/parallel_context.h), so rank r sits on stage r / (TP·DP).
#include "mwb/planner/plan.h"

#include <vector>

namespace mwb::app {

/// Peak bytes of every global rank (empty when the plan has no estimate).
std::vector<double> predicted_peak_per_rank(const planner::Plan& plan);
/// The device's dense peak in TFLOP/s for this precision (16-bit for bf16/fp16 runs, else fp32): what
/// mwb-train reports MFU against (--peak-tflops-per-device), the same peak the planner's MFU uses.
double device_peak_tflops(const planner::DeviceSpec& device, const Config& config);
/// The device's memory in bytes; 0 for the CPU (ranks share the machine's memory) and unchecked devices.
double predicted_capacity(const planner::Plan& plan);

}  // namespace mwb::app
