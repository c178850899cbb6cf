#include "app/live/series_buffer.h"

namespace mwb::app {

void SeriesBuffer::add(std::span<const ipc::Message> messages) {
    std::lock_guard lock(mutex_);
    for (const auto& m : messages) {
        if (m.is_heartbeat()) continue;
        if (!run_id_.empty() && m.run_id != run_id_) {  // another run in the same place
            pending_ = Update{};
            pending_.reset = true;
            next_seq_ = -1;
        }
        run_id_ = m.run_id;
        if (next_seq_ >= 0 && m.seq != next_seq_) ++seq_breaks_;
        next_seq_ = m.seq + 1;
        digest(pending_, m);
    }
}

void SeriesBuffer::add_history(Update&& u, int64_t next_seq) {
    std::lock_guard lock(mutex_);
    if (!run_id_.empty() && u.run_id != run_id_) {
        pending_ = Update{};
        u.reset = true;
    }
    run_id_ = u.run_id;
    next_seq_ = next_seq;
    pending_.merge(std::move(u));
}

void SeriesBuffer::set_link(const LinkState& link) {
    std::lock_guard lock(mutex_);
    link_ = link;
}

bool SeriesBuffer::mark_pending() {
    return !pending_flag_.exchange(true);
}

Update SeriesBuffer::take() {
    Update out;
    std::lock_guard lock(mutex_);
    pending_flag_.store(false);  // before the swap: data added after it signals again
    std::swap(out, pending_);
    return out;
}

LinkState SeriesBuffer::link() const {
    std::lock_guard lock(mutex_);
    return link_;
}

int64_t SeriesBuffer::seq_breaks() const {
    std::lock_guard lock(mutex_);
    return seq_breaks_;
}

}  // namespace mwb::app
