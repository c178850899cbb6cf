// GPU detection through the CUDA runtime API. Without a driver cudaGetDeviceCount returns
// cudaErrorInsufficientDriver (35); with only the driver stub, cudaErrorStubLibrary (34): both mean
// "no GPU here", never a crash.
#include "mwb/kernels/device.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

namespace mwb {

DeviceReport probe_devices() {
    DeviceReport r;
    r.cuda_runtime_built = true;
    r.cuda_kernels_built = true;   // kernels/cuda: every op of ops.h
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        r.reason = fmt::format("no usable GPU: {} ({})", cudaGetErrorString(err), static_cast<int>(err));
        return r;
    }
    r.cuda_devices = count;
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) r.names.emplace_back(prop.name);
    }
    if (count == 0) r.reason = "no GPU found by the CUDA runtime";
    return r;
}

}  // namespace mwb
