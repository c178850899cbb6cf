#include "backend/core/host_staging.h"

#include "mwb/kernels/device_runtime.h"

namespace mwb {

HostStaging::~HostStaging() {
    for (Slot& s : slots_) {
        if (s.event) {
            device::wait_event(s.event);  // a queued copy may still read the host buffer
            device::destroy_event(s.event);
        }
        device::pinned_free(s.host);
    }
}

void* HostStaging::next(int64_t bytes) {
    current_ = 1 - current_;
    Slot& s = slots_[current_];
    if (!s.event) s.event = device::create_event();
    device::wait_event(s.event);  // the copies of this buffer's previous use ran
    if (s.capacity < bytes) {
        device::pinned_free(s.host);
        s.host = nullptr;
        s.capacity = 0;
        s.host = static_cast<char*>(device::pinned_malloc(bytes));
        s.capacity = bytes;
    }
    return s.host;
}

void HostStaging::upload(void* device_dst, int64_t offset, int64_t bytes, void* stream) {
    device::copy_to_device_async(device_dst, slots_[current_].host + offset, bytes, stream);
}

void HostStaging::uploaded(void* stream) {
    device::record_event(slots_[current_].event, stream);
}

}  // namespace mwb
