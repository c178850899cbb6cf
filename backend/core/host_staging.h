#pragma once
// Small host -> GPU uploads inside a training step (a micro-batch's token ids and targets, the step's
// parameter block): laid out in page-locked host memory and copied on the op stream without a host
// wait. Two host buffers take turns, each with an event recorded after its copies, so a fill never
// overwrites data a queued copy still reads (the host waits only when it runs two uploads ahead of
// the GPU). The CPU path does not use it (its tensors are host memory already).
#include <cstdint>

namespace mwb {

class HostStaging {
public:
    HostStaging() = default;
    ~HostStaging();
    HostStaging(const HostStaging&) = delete;
    HostStaging& operator=(const HostStaging&) = delete;

    /// The next host buffer, of at least `bytes`, once the copies from its last use ran.
    void* next(int64_t bytes);
    /// Queues device_dst <- bytes [offset, offset + bytes) of the buffer next() returned, on `stream`.
    void upload(void* device_dst, int64_t offset, int64_t bytes, void* stream);
    /// After the buffer's uploads: its next fill waits for them.
    void uploaded(void* stream);

private:
    struct Slot {
        char* host = nullptr;
        int64_t capacity = 0;
        void* event = nullptr;  // recorded after the slot's last uploads
    };
    Slot slots_[2];
    int current_ = 1;
};

}  // namespace mwb
