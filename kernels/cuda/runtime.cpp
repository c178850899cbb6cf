// The device runtime services of mwb/kernels/device_runtime.h and the ops' internal helpers
// (runtime.h): memory, copies, streams, handles, scratch, deterministic mode.
#include "runtime.h"

#include "mwb/kernels/device_runtime.h"

#include <algorithm>
#include <atomic>

namespace mwb {

namespace {
std::atomic<bool> g_deterministic{false};
std::atomic<bool> g_allow_tf32{false};

struct ScratchSlot {
    void* ptr = nullptr;
    int64_t bytes = 0;
    bool pooled = false;            // from cudaMallocAsync (the device's default memory pool)
    cudaStream_t stream = nullptr;  // the stream of the slot's last user
};

/// cuBLAS's workspace, given to it so that it never allocates one itself (which a CUDA graph capture
/// cannot hold): 32 MiB, NVIDIA's recommendation for Hopper.
constexpr size_t kCublasWorkspace = size_t{32} << 20;

struct ThreadState {
    cublasHandle_t blas = nullptr;
    void* blas_workspace = nullptr;
    cublasLtHandle_t lt = nullptr;
    ScratchSlot slots[7];
    // No destructor: these live until the process ends (the ops run on the main thread), and freeing
    // them from a thread_local destructor at exit can race the CUDA runtime's own teardown.
};

ThreadState& state() {
    thread_local ThreadState s;
    return s;
}
}  // namespace

namespace device {

void* cuda_malloc(int64_t bytes) {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, static_cast<size_t>(bytes));
    if (err != cudaSuccess) {
        cudaGetLastError();
        // Out of memory only when CUDA says so: a missing GPU, a failed context or a capture in progress
        // fail here too, and an "out of memory" would send the reader the wrong way.
        if (err == cudaErrorMemoryAllocation) {
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            cudaGetLastError();
            MWB_FAIL("out of GPU memory allocating {} bytes: {} ({} of {} bytes free)", bytes, cudaGetErrorString(err),
                     free_b, total_b);
        }
        const bool capture = err == cudaErrorStreamCaptureUnsupported || err == cudaErrorStreamCaptureInvalidated ||
                             err == cudaErrorStreamCaptureImplicit;
        MWB_FAIL("cudaMalloc of {} bytes failed: {} ({}){}", bytes, cudaGetErrorString(err), static_cast<int>(err),
                 capture ? ": a new device allocation inside a CUDA graph capture (the caching allocator missed; "
                           "the eager warm-up steps should have filled its cache)"
                         : "");
    }
    return p;
}

void cuda_free(void* ptr) {
    if (ptr) MWB_CUDA_CHECK(cudaFree(ptr));
}

MemoryInfo cuda_memory_info() {
    size_t free_b = 0, total_b = 0;
    MWB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return {static_cast<int64_t>(free_b), static_cast<int64_t>(total_b)};
}

void copy_to_device(void* device_dst, const void* host_src, int64_t bytes) {
    if (bytes > 0) MWB_CUDA_CHECK(cudaMemcpy(device_dst, host_src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice));
}

void copy_to_host(void* host_dst, const void* device_src, int64_t bytes) {
    if (bytes > 0) MWB_CUDA_CHECK(cudaMemcpy(host_dst, device_src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost));
}

void* pinned_malloc(int64_t bytes) {
    void* p = nullptr;
    MWB_CUDA_CHECK(cudaHostAlloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)), cudaHostAllocDefault));
    return p;
}

void pinned_free(void* ptr) {
    if (ptr) MWB_CUDA_CHECK(cudaFreeHost(ptr));
}

void copy_to_device_async(void* device_dst, const void* pinned_src, int64_t bytes, void* stream) {
    if (bytes > 0)
        MWB_CUDA_CHECK(cudaMemcpyAsync(device_dst, pinned_src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                       static_cast<cudaStream_t>(stream)));
}

void* create_event() {
    cudaEvent_t e = nullptr;
    MWB_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
}

void destroy_event(void* event) {
    if (event) MWB_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}

void record_event(void* event, void* stream) {
    MWB_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}

void wait_event(void* event) {
    MWB_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

void synchronize(void* stream) {
    MWB_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    MWB_CUDA_CHECK(cudaGetLastError());
}

void* create_stream(bool ordered_with_default) {
    cudaStream_t s = nullptr;
    MWB_CUDA_CHECK(cudaStreamCreateWithFlags(&s, ordered_with_default ? cudaStreamDefault : cudaStreamNonBlocking));
    return s;
}

void destroy_stream(void* stream) {
    if (stream) MWB_CUDA_CHECK(cudaStreamDestroy(static_cast<cudaStream_t>(stream)));
}

void begin_capture(void* stream) {
    MWB_CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal));
}

void* end_capture(void* stream) {
    cudaGraph_t graph = nullptr;
    const cudaError_t err = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
    if (err != cudaSuccess) {
        cudaGetLastError();
        if (graph) cudaGraphDestroy(graph);
        MWB_FAIL("CUDA graph capture of the training step failed: {} (a call inside the step that a capture "
                 "cannot hold: a host wait, a synchronous copy, a free)",
                 cudaGetErrorString(err));
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (inst != cudaSuccess) {
        cudaGetLastError();
        MWB_FAIL("CUDA graph instantiation of the training step failed: {}", cudaGetErrorString(inst));
    }
    return exec;
}

void abort_capture(void* stream) noexcept {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
        cudaGraph_t graph = nullptr;
        cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
        if (graph) cudaGraphDestroy(graph);
    }
    cudaGetLastError();
}

void launch_graph(void* graph, void* stream) {
    MWB_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), static_cast<cudaStream_t>(stream)));
}

void destroy_graph(void* graph) {
    if (graph) MWB_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)));
}

void set_device(int index) { MWB_CUDA_CHECK(cudaSetDevice(index)); }

void set_deterministic(bool on) { g_deterministic.store(on); }
bool deterministic() { return g_deterministic.load(); }
void set_allow_tf32(bool on) { g_allow_tf32.store(on); }

}  // namespace device

namespace cuda {

void check_launch(const char* op) {
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) MWB_FAIL("{}: CUDA kernel launch failed: {}", op, cudaGetErrorString(err));
}

namespace {
/// Whether the current device has the stream-ordered allocator (every device since CUDA 11.2 on Linux
/// reports it; asked once per device).
bool memory_pools_supported() {
    thread_local int device = -1, supported = 0;
    int d = 0;
    MWB_CUDA_CHECK(cudaGetDevice(&d));
    if (d != device) {
        device = d;
        if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, d) != cudaSuccess) {
            cudaGetLastError();
            supported = 0;
        }
    }
    return supported != 0;
}
}  // namespace

void* scratch(int slot, int64_t bytes, cudaStream_t stream) {
    ScratchSlot& s = state().slots[slot];
    if (s.bytes < bytes) {
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        MWB_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
        MWB_CHECK(capture == cudaStreamCaptureStatusNone,
                  "scratch slot {} must grow from {} to {} bytes while its stream is captured into a CUDA graph: "
                  "run the step once before capturing it",
                  slot, s.bytes, bytes);
        const bool pools = memory_pools_supported();
        if (s.ptr) {
            // Kernels queued earlier may still read the old area. On the same stream a stream-ordered
            // free waits for them on the GPU; queued on another stream, only a device-wide wait knows.
            if (!(s.pooled && pools && s.stream == stream)) MWB_CUDA_CHECK(cudaDeviceSynchronize());
            if (s.pooled) MWB_CUDA_CHECK(cudaFreeAsync(s.ptr, stream));
            else MWB_CUDA_CHECK(cudaFree(s.ptr));
            s.ptr = nullptr;
        }
        // Sized only once allocated: a failed allocation (caught by a caller that carries on) must
        // not leave a slot that claims bytes it does not have, nor its error for the next launch check.
        const int64_t want = std::max<int64_t>(bytes, 1 << 20);
        s.bytes = 0;
        const cudaError_t err = pools ? cudaMallocAsync(&s.ptr, static_cast<size_t>(want), stream)
                                      : cudaMalloc(&s.ptr, static_cast<size_t>(want));
        if (err != cudaSuccess) {
            cudaGetLastError();
            s.ptr = nullptr;
            MWB_FAIL("scratch slot {}: {} {} bytes: {}", slot,
                     err == cudaErrorMemoryAllocation ? "out of GPU memory allocating" : "could not allocate", want,
                     cudaGetErrorString(err));
        }
        s.pooled = pools;
        s.bytes = want;
    }
    s.stream = stream;
    return s.ptr;
}

cublasHandle_t cublas_handle(cudaStream_t stream) {
    ThreadState& s = state();
    if (!s.blas) {
        MWB_CUBLAS_CHECK(cublas().cublasCreate(&s.blas));
        // Never split reductions over atomics: GEMMs give the same bits run to run.
        MWB_CUBLAS_CHECK(cublas().cublasSetAtomicsMode(s.blas, CUBLAS_ATOMICS_NOT_ALLOWED));
        MWB_CUDA_CHECK(cudaMalloc(&s.blas_workspace, kCublasWorkspace));
    }
    MWB_CUBLAS_CHECK(cublas().cublasSetStream(s.blas, stream));
    // After every cublasSetStream: it resets the handle to cuBLAS's own workspace pool.
    MWB_CUBLAS_CHECK(cublas().cublasSetWorkspace(s.blas, s.blas_workspace, kCublasWorkspace));
    return s.blas;
}

cublasLtHandle_t cublaslt_handle() {
    ThreadState& s = state();
    if (!s.lt) MWB_CUBLAS_CHECK(cublas().cublasLtCreate(&s.lt));
    return s.lt;
}

bool allow_tf32() { return g_allow_tf32.load() && !g_deterministic.load(); }

void require(const char* op, const char* name, const TensorView& t, DType dtype, bool optional) {
    if (optional && t.empty()) return;
    MWB_CHECK(!t.empty() && t.device == Device::CUDA && t.dtype == dtype, "{}: {} must be a {} CUDA tensor, got {}",
              op, name, dtype_name(dtype), t.describe());
}

}  // namespace cuda
}  // namespace mwb
