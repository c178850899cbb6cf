#pragma once
// Which devices this build and this machine offer, for `--device cpu|cuda|auto`.
#include <string>
#include <vector>

namespace mwb {

struct DeviceReport {
    bool cuda_runtime_built = false;   ///< the build linked the CUDA runtime (nvcc was found)
    bool cuda_kernels_built = false;   ///< the build has CUDA implementations of the ops
    int cuda_devices = 0;              ///< usable GPUs found at run time
    std::vector<std::string> names;    ///< their names
    std::string reason;                ///< why no GPU is usable, in words (empty when one is)
};

/// Probes the CUDA runtime (without ever linking the driver stub): never throws.
DeviceReport probe_devices();

}  // namespace mwb
