#include "backend/core/memory.h"

#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/error.h"

#include <cstdlib>
#include <utility>

namespace mwb {

namespace {
constexpr int64_t kAlignment = 64;
int64_t rounded(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
}  // namespace

Allocator::~Allocator() {
    try {
        capturing_ = false;
        release_pool();
        empty_cache();
    } catch (const Error&) {
        // A GPU whose context is already gone at exit: the driver reclaims the memory anyway.
    }
}

void* Allocator::allocate(int64_t bytes, MemCategory category) {
    MWB_CHECK(bytes >= 0, "allocation of {} bytes", bytes);
    const int64_t size = rounded(std::max<int64_t>(bytes, 1));
    std::lock_guard lock(mutex_);
    void* ptr = nullptr;
    if (auto it = capturing_ ? pool_free_.find(size) : pool_free_.end(); it != pool_free_.end()) {
        ptr = it->second;  // the capture's own reuse
        pool_free_.erase(it);
    } else if (auto cached = cache_.find(size); cached != cache_.end()) {
        ptr = cached->second;
        cache_.erase(cached);
    } else if (device_ == Device::CUDA) {
        // A GPU caching allocator: cudaMalloc only on a cache miss (the first iteration's shapes).
        try {
            ptr = device::cuda_malloc(size);
        } catch (const Error& e) {
            MWB_FAIL("{} (allocating {} for {}; {} bytes already reserved by this allocator)", e.what(), size,
                     category_name(category), stats_.reserved);
        }
        stats_.reserved += size;
    } else {
        ptr = std::aligned_alloc(kAlignment, static_cast<std::size_t>(size));
        MWB_CHECK(ptr != nullptr, "out of host memory allocating {} bytes of {} ({} bytes already reserved)", size,
                  category_name(category), stats_.reserved);
        stats_.reserved += size;
    }
    if (capturing_) pool_.emplace(ptr, size);  // the graph's from now on
    account(category, bytes);  // tensors' exact bytes; the alignment slack shows only in `reserved`
    return ptr;
}

void Allocator::release(void* ptr, int64_t bytes, MemCategory category) {
    if (!ptr) return;
    const int64_t size = rounded(std::max<int64_t>(bytes, 1));
    std::lock_guard lock(mutex_);
    // While capturing, a block freed (even one allocated before) may still be read by the graph's
    // later work at its address: the pool keeps it.
    if (capturing_) pool_.emplace(ptr, size);
    if (pool_.contains(ptr))
        pool_free_.emplace(size, ptr);
    else
        cache_.emplace(size, ptr);
    account(category, -bytes);
}

void Allocator::begin_capture() {
    std::lock_guard lock(mutex_);
    MWB_CHECK(!capturing_, "allocator: a capture is running already (one capture at a time)");
    capturing_ = true;
}

void Allocator::end_capture() {
    std::lock_guard lock(mutex_);
    capturing_ = false;
}

void Allocator::release_pool() {
    std::lock_guard lock(mutex_);
    MWB_CHECK(!capturing_, "allocator: release_pool during a capture");
    for (auto& [size, ptr] : pool_free_) cache_.emplace(size, ptr);
    pool_free_.clear();
    pool_.clear();  // blocks still in use return to the cache when freed
}

bool Allocator::capturing() const {
    std::lock_guard lock(mutex_);
    return capturing_;
}

int64_t Allocator::pool_bytes() const {
    std::lock_guard lock(mutex_);
    int64_t n = 0;
    for (const auto& [ptr, size] : pool_) n += size;
    return n;
}

int64_t Allocator::pool_free_bytes() const {
    std::lock_guard lock(mutex_);
    int64_t n = 0;
    for (const auto& [size, ptr] : pool_free_) n += size;
    return n;
}

void Allocator::raise_peaks(const MemoryStats& s) {
    std::lock_guard lock(mutex_);
    for (int c = 0; c < kMemCategories; ++c) stats_.peak[c] = std::max(stats_.peak[c], s.peak[c]);
    stats_.total_peak = std::max(stats_.total_peak, s.total_peak);
}

void Allocator::account(MemCategory category, int64_t delta) {
    const int c = static_cast<int>(category);
    stats_.current[c] += delta;
    stats_.total_current += delta;
    stats_.peak[c] = std::max(stats_.peak[c], stats_.current[c]);
    stats_.total_peak = std::max(stats_.total_peak, stats_.total_current);
}

DeviceMemoryTotals Allocator::device_totals() const {
    if (device_ != Device::CUDA) return {};
    const device::MemoryInfo info = device::cuda_memory_info();
    return {info.free_bytes, info.total_bytes};
}

MemoryStats Allocator::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

void Allocator::reset_peaks() {
    std::lock_guard lock(mutex_);
    stats_.peak = stats_.current;
    stats_.total_peak = stats_.total_current;
}

void Allocator::empty_cache() {
    std::lock_guard lock(mutex_);
    for (auto& [size, ptr] : cache_) {
        if (device_ == Device::CUDA)
            device::cuda_free(ptr);
        else
            std::free(ptr);
        stats_.reserved -= size;
    }
    cache_.clear();
}

Buffer::Buffer(Allocator& allocator, MemCategory category, int64_t numel, DType dtype)
    : allocator_(&allocator), numel_(numel), dtype_(dtype), category_(category) {
    data_ = allocator.allocate(bytes(), category);
}

Buffer::Buffer(Buffer&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)), data_(std::exchange(other.data_, nullptr)),
      numel_(std::exchange(other.numel_, 0)), dtype_(other.dtype_), category_(other.category_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
    if (this != &other) {
        reset();
        allocator_ = std::exchange(other.allocator_, nullptr);
        data_ = std::exchange(other.data_, nullptr);
        numel_ = std::exchange(other.numel_, 0);
        dtype_ = other.dtype_;
        category_ = other.category_;
    }
    return *this;
}

void Buffer::reset() {
    if (data_) allocator_->release(data_, bytes(), category_);
    data_ = nullptr;
    numel_ = 0;
}

TensorView Buffer::view() const { return make_view(data_, dtype_, {numel_}, allocator_ ? allocator_->device() : Device::CPU); }

TensorView Buffer::view(std::initializer_list<int64_t> shape) const {
    TensorView v = make_view(data_, dtype_, shape, allocator_ ? allocator_->device() : Device::CPU);
    MWB_CHECK(v.numel() <= numel_, "view {} exceeds its buffer of {} elements", v.describe(), numel_);
    return v;
}

}  // namespace mwb
