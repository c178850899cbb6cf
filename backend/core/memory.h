#pragma once
// Tracked memory: every buffer the engine allocates (weights, gradients, optimizer state, activations,
// workspace, data) is counted by category, so current and peak bytes are known at any time. These
// figures are the "per-GPU memory" that telemetry publishes and the planner predicts.
#include "mwb/ipc/memory_categories.h"
#include "mwb/kernels/tensor.h"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mwb {

/// The categories are the wire's (ipc/memory_categories.h): one enum, one list of names.
using MemCategory = ipc::MemoryCategory;
inline constexpr int kMemCategories = static_cast<int>(ipc::kMemoryCategoryCount);
inline constexpr std::string_view category_name(MemCategory c) {
    return ipc::memory_category_name(c);
}

struct MemoryStats {
    std::array<int64_t, kMemCategories> current{};  ///< bytes of live tensors now, per category (exact sizes)
    std::array<int64_t, kMemCategories> peak{};     ///< highest `current` since the last reset
    int64_t total_current = 0;                      ///< Σ current
    int64_t total_peak = 0;                         ///< highest Σ current (not Σ peak)
    int64_t reserved = 0;                           ///< bytes held from the system, in use or cached

    int64_t of(MemCategory c) const { return current[static_cast<int>(c)]; }
    int64_t peak_of(MemCategory c) const { return peak[static_cast<int>(c)]; }
};

/// Free and total bytes of the allocator's GPU as the CUDA runtime reports them (cudaMemGetInfo);
/// zeros for the CPU.
struct DeviceMemoryTotals {
    int64_t free_bytes = 0;
    int64_t total_bytes = 0;
};

/// Allocates memory of one device and counts it. Freed blocks are cached by size and reused, as a
/// GPU caching allocator does: the shapes of a training step repeat, so the step loop never reaches
/// the system allocator (aligned_alloc, or cudaMalloc for Device::CUDA) after the first iteration.
class Allocator {
public:
    explicit Allocator(Device device = Device::CPU) : device_(device) {}
    ~Allocator();
    Allocator(const Allocator&) = delete;
    Allocator& operator=(const Allocator&) = delete;

    Device device() const { return device_; }
    void* allocate(int64_t bytes, MemCategory category);
    void release(void* ptr, int64_t bytes, MemCategory category);

    MemoryStats stats() const;
    /// The device's own totals (cudaMemGetInfo) for a CUDA allocator; zeros on the CPU.
    DeviceMemoryTotals device_totals() const;
    /// Peaks restart from the current values (e.g. to measure one iteration).
    void reset_peaks();
    /// Raises the peaks to at least `s`'s (a replayed CUDA graph's step: the peaks its capture reached).
    void raise_peaks(const MemoryStats& s);
    /// Returns cached blocks to the system (not the capture pool's).
    void empty_cache();

    /// The capture pool of a CUDA graph (StepGraph): between begin_capture() and end_capture() every
    /// block handed out, from the cache or new, and every block freed, joins the pool, which owns it
    /// until release_pool(): the graph replays with those addresses, so no one outside it may get them.
    /// Blocks freed into the pool are handed out again only during a capture (the pool's own reuse).
    /// A later capture joins the same pool (StepGraph's graph per micro-batch count): graphs that
    /// share it replay one at a time on one stream, so one's temporaries may be another's.
    /// After end_capture() allocations come from the cache again; a pool block freed later (a buffer
    /// allocated while capturing and kept) returns to the pool. release_pool() (the graph is gone)
    /// puts the pool's free blocks back into the cache and forgets the pool.
    void begin_capture();
    void end_capture();
    void release_pool();
    bool capturing() const;
    /// Bytes of blocks the pool owns (free or in use), and of those free.
    int64_t pool_bytes() const;
    int64_t pool_free_bytes() const;

private:
    void account(MemCategory category, int64_t delta);

    Device device_;
    mutable std::mutex mutex_;
    MemoryStats stats_;
    std::unordered_multimap<int64_t, void*> cache_;  // size -> free block
    bool capturing_ = false;
    std::unordered_map<void*, int64_t> pool_;             // every block the pool owns -> its size
    std::unordered_multimap<int64_t, void*> pool_free_;  // size -> free pool block
};

/// An owning, move-only, 64-byte-aligned buffer of `numel` elements, counted under one category.
class Buffer {
public:
    Buffer() = default;
    Buffer(Allocator& allocator, MemCategory category, int64_t numel, DType dtype = DType::F32);
    ~Buffer() { reset(); }
    Buffer(Buffer&& other) noexcept;
    Buffer& operator=(Buffer&& other) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    void reset();
    bool empty() const { return data_ == nullptr; }
    int64_t numel() const { return numel_; }
    int64_t bytes() const { return numel_ * static_cast<int64_t>(dtype_size(dtype_)); }
    DType dtype() const { return dtype_; }
    MemCategory category() const { return category_; }
    void* data() const { return data_; }
    float* f32() const { return static_cast<float*>(data_); }
    int32_t* i32() const { return static_cast<int32_t*>(data_); }

    /// The whole buffer as a 1-D view, or with a shape (of at most numel elements).
    TensorView view() const;
    TensorView view(std::initializer_list<int64_t> shape) const;

private:
    Allocator* allocator_ = nullptr;
    void* data_ = nullptr;
    int64_t numel_ = 0;
    DType dtype_ = DType::F32;
    MemCategory category_ = MemCategory::Workspace;
};

}  // namespace mwb
