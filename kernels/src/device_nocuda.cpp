// Device probing and runtime services for builds without CUDA: probing reports why, every runtime
// call fails with a message naming it (callers only reach these after asking for a CUDA device).
#include "mwb/kernels/attention_backend.h"
#include "mwb/kernels/device.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/error.h"

namespace mwb {

DeviceReport probe_devices() {
    DeviceReport r;
    r.reason = "this build has no CUDA support (nvcc was not found when it was configured)";
    return r;
}

namespace device {
namespace {
[[noreturn]] void no_cuda(const char* call) {
    MWB_FAIL("{}: this build has no CUDA support (nvcc was not found when it was configured)", call);
}
}  // namespace

void* cuda_malloc(int64_t) { no_cuda("device::cuda_malloc"); }
void cuda_free(void* ptr) {
    if (ptr) no_cuda("device::cuda_free");
}
MemoryInfo cuda_memory_info() { no_cuda("device::cuda_memory_info"); }
void copy_to_device(void*, const void*, int64_t) { no_cuda("device::copy_to_device"); }
void copy_to_host(void*, const void*, int64_t) { no_cuda("device::copy_to_host"); }
void* pinned_malloc(int64_t) {
    no_cuda("device::pinned_malloc");
}
void pinned_free(void* ptr) {
    if (ptr) no_cuda("device::pinned_free");
}
void copy_to_device_async(void*, const void*, int64_t, void*) {
    no_cuda("device::copy_to_device_async");
}
void* create_event() {
    no_cuda("device::create_event");
}
void destroy_event(void*) {}
void record_event(void*, void*) {
    no_cuda("device::record_event");
}
void wait_event(void*) {
    no_cuda("device::wait_event");
}
void synchronize(void*) { no_cuda("device::synchronize"); }
void* create_stream(bool) {
    no_cuda("device::create_stream");
}
void destroy_stream(void*) {}
void begin_capture(void*) { no_cuda("device::begin_capture"); }
void* end_capture(void*) { no_cuda("device::end_capture"); }
void abort_capture(void*) noexcept {}
void launch_graph(void*, void*) { no_cuda("device::launch_graph"); }
void destroy_graph(void*) {}
void set_device(int) { no_cuda("device::set_device"); }
void set_deterministic(bool) {}
bool deterministic() { return false; }
void set_allow_tf32(bool) {}
FusedGemmCounts fused_gemm_counts() { return {}; }

}  // namespace device

std::string cudnn_attention_refusals() { return {}; }

AttentionBackendChoice resolve_attention_backend(const std::string& requested, bool, bool) {
    if (requested == "own") return {AttentionBackend::Own, "own: the own kernels, as asked"};
    return {AttentionBackend::Own, requested + ": the own kernels (this build has no CUDA support)"};
}

}  // namespace mwb
