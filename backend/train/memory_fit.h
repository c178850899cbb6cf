#pragma once
// Before a run allocates anything: does this rank's part of the model fit? The planner's peak for the
// rank's pipeline stage (what the tracking allocator reaches; docs/planner.md) against what the machine
// offers: on the CPU the host memory the ranks of one node share (MemAvailable, capped by the cgroup's
// limit), on a GPU the device's free memory. The estimate counts only tracked buffers, so a refusal is
// certain; passing does not promise the run fits.
#include "backend/config/config.h"

#include <cstdint>
#include <string>

namespace mwb {

/// What the host can still give this process: MemAvailable, lowered to the room left under the
/// memory limit of its cgroup (v2 memory.max, v1 memory.limit_in_bytes) when there is one.
struct HostMemory {
    int64_t available = 0;  ///< bytes; 0 when nothing could be read
    std::string source;     ///< "MemAvailable" or "cgroup limit"
};
HostMemory host_memory_available();

/// The planner's simultaneous peak of the rank `world_rank` (that of its pipeline stage) of a resolved,
/// validated configuration, and its largest categories for the message.
struct PlannedMemory {
    double peak = 0;  ///< bytes (double: an absurd model must not overflow the comparison)
    std::string detail;
};
PlannedMemory planned_rank_memory(const Config& config, int world_size, int world_rank);

/// "1.23 GiB", "4.0 PiB"
std::string format_memory(double bytes);

}  // namespace mwb
