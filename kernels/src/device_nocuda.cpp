#include "mwb/kernels/device.h"

namespace mwb {

DeviceReport probe_devices() {
    DeviceReport r;
    r.reason = "this build has no CUDA support (nvcc was not found when it was configured)";
    return r;
}

}  // namespace mwb
