#pragma once
// Every CUDA op against its CPU twin on random inputs, as plain C++ (no Qt): used by the Qt suite
// test_kernels_cuda and by the Qt-free `mwb-gpu-check` that runs on the bare GPU machine.
#include <string>
#include <vector>

namespace mwb::test {

struct CudaCheckResult {
    std::string name;
    bool passed = false;
    double error = 0;       ///< the worst normwise error max|gpu − cpu| / max|cpu| over the outputs (0: bit-exact)
    double tolerance = 0;   ///< the bound it is held to (0: bit for bit)
    std::string detail;     ///< which output was worst, or the exception message
};

/// Why CUDA checks cannot run here ("" when a GPU is usable): no CUDA build, no driver, no device.
std::string cuda_unavailable_reason();

/// Names of all checks, in run order.
std::vector<std::string> cuda_check_names();

/// Runs one check (exceptions become a failed result with the message in detail).
CudaCheckResult run_cuda_check(const std::string& name);

}  // namespace mwb::test
