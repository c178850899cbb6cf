#pragma once
// The few device-runtime services the layers above the ops need, without including CUDA headers:
// raw device memory (for the backend's caching Allocator), host<->device copies, streams,
// synchronisation and the GPU's memory totals. Builds without CUDA get versions that fail with a
// message naming the call (kernels/src/device_nocuda.cpp).
#include <cstdint>

namespace mwb::device {

/// Device memory of the current GPU, straight from the runtime (cudaMalloc / cudaFree). Callers
/// cache blocks (backend/core/memory.h): these are never called in the step loop once it is warm.
void* cuda_malloc(int64_t bytes);
void cuda_free(void* ptr);

/// cudaMemGetInfo of the current GPU.
struct MemoryInfo {
    int64_t free_bytes = 0;
    int64_t total_bytes = 0;
};
MemoryInfo cuda_memory_info();

/// Blocking copies between host and device memory of the current GPU.
void copy_to_device(void* device_dst, const void* host_src, int64_t bytes);
void copy_to_host(void* host_dst, const void* device_src, int64_t bytes);

/// Page-locked host memory (cudaHostAlloc): a copy from it queued on a stream returns at once.
void* pinned_malloc(int64_t bytes);
void pinned_free(void* ptr);
/// Queues a host -> device copy from pinned memory on `stream` (no host wait); the source must stay
/// unchanged until the copy ran (an event recorded after it says when).
void copy_to_device_async(void* device_dst, const void* pinned_src, int64_t bytes, void* stream);

/// Events: recorded on a stream after some work, waited for by the host.
void* create_event();
void destroy_event(void* event);
void record_event(void* event, void* stream);
/// Blocks the host until the work before the event's last record ran (at once if never recorded).
void wait_event(void* event);

/// Waits for all work queued on `stream` (nullptr: the legacy default stream) and raises any
/// asynchronous kernel error as mwb::Error.
void synchronize(void* stream = nullptr);

/// A new non-blocking stream, and its release. With `ordered_with_default` the stream is a blocking
/// one instead (cudaStreamDefault): work on it and on the legacy default stream is ordered implicitly,
/// so the blocking copies outside a training step stay behind the step's work on its own stream.
void* create_stream(bool ordered_with_default = false);
void destroy_stream(void* stream);

/// CUDA graphs of the work queued on one stream (backend/train/step_graph.h): begin_capture starts
/// capturing `stream` (cudaStreamCaptureModeThreadLocal: this thread's unsafe calls fail the capture,
/// other threads' do not), end_capture ends it and returns the instantiated graph (a cudaGraphExec_t),
/// failing by name when the capture was invalidated; abort_capture ends a capture and discards it
/// (after an error inside it; never throws). launch_graph queues one replay on `stream`.
void begin_capture(void* stream);
void* end_capture(void* stream);
void abort_capture(void* stream) noexcept;
void launch_graph(void* graph, void* stream);
void destroy_graph(void* graph);

/// Makes GPU `index` current for this thread.
void set_device(int index);

/// Deterministic mode: every CUDA op is already written without order-changing atomics; this also
/// keeps cuBLAS off TF32 and pins its reductions (no split-K atomics), so two runs are bit-identical.
/// TF32 for fp32 GEMMs is off by default (results within fp32 tolerance of the CPU).
void set_deterministic(bool on);
bool deterministic();
void set_allow_tf32(bool on);

/// The cuBLASLt epilogue GEMMs (bias, GELU, GELU', bias gradients) this thread has asked for so far:
/// queued fused, and not fused (cuBLASLt had no algorithm, or an operand's alignment or dtype ruled
/// the epilogue out; the unfused GEMM + kernel ran). All zero without CUDA.
struct FusedGemmCounts {
    int64_t fused = 0;
    int64_t unfused = 0;
};
FusedGemmCounts fused_gemm_counts();

}  // namespace mwb::device
