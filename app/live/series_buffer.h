#pragma once
// The hand-over between the receiver thread and the GUI (PlotJuggler's pattern): the receiver digests
// messages into a pending Update under a mutex and signals only when the GUI has nothing pending yet;
// the GUI's timer takes the whole Update under the lock (a swap) and draws from its own copy.
// Qt-free.
#include "app/live/digest.h"

#include <atomic>
#include <mutex>
#include <span>
#include <string>

namespace mwb::app {

/// How the connection to the run is doing (the receiver's view).
struct LinkState {
    bool connected = false;  ///< a follower exists (the endpoint was usable)
    bool live = false;       ///< heartbeats arrive and no gap is being filled
    std::string state;       ///< last heartbeat's state: running | ended | ""
    std::string endpoint, publish, snapshot, control;
    uint64_t delivered = 0, from_snapshots = 0, from_files = 0, gaps_filled = 0, reconnects = 0, lost = 0,
             malformed = 0;
    int64_t next_seq = 0;
    double last_message = 0;  ///< Unix seconds of the last message or heartbeat handed over
    bool recording = false;   ///< messages go into the store
    std::string store_file, store_error, error;
    bool loading_history = false;
    /// The run went silent past the store's gone-after time and was marked interrupted there.
    std::string gone_reason;
};

class SeriesBuffer {
public:
    /// Receiver: digests messages in order. Messages of a different run than the last start a new
    /// Update with reset set. Out-of-order seqs are counted (seq_breaks; the Follower prevents them).
    void add(std::span<const ipc::Message> messages);
    /// Receiver: an Update made elsewhere (history reloaded from the store), whose messages end just
    /// before `next_seq`.
    void add_history(Update&& u, int64_t next_seq);
    void set_link(const LinkState& link);

    /// True when the GUI must be told (the first data since its last take()).
    bool mark_pending();
    /// GUI: everything pending, leaving the buffer empty.
    Update take();
    LinkState link() const;
    /// Seqs that did not follow the one before (0 unless the stream had a gap or a duplicate).
    int64_t seq_breaks() const;

private:
    mutable std::mutex mutex_;
    Update pending_;
    LinkState link_;
    std::string run_id_;
    int64_t next_seq_ = -1;
    int64_t seq_breaks_ = 0;
    std::atomic<bool> pending_flag_{false};
};

}  // namespace mwb::app
