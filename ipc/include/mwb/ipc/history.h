#pragma once
// Every message of the run, for "everything since seq N" (the clone pattern's snapshot). The newest
// messages stay in memory up to a byte budget; older ones are read back from the run directory, the
// durable copy. Owned by the publisher's thread (not thread-safe).
#include "mwb/ipc/run_dir_log.h"

#include <deque>
#include <functional>
#include <optional>

namespace mwb::ipc {

class History {
public:
    /// `run_dir` may be empty: then nothing is reloaded and evicted messages are gone.
    History(std::size_t memory_budget_bytes, std::filesystem::path run_dir);

    /// Appends a message whose seq is above last_seq(); returns false (and keeps nothing) otherwise.
    bool append(int64_t seq, std::string topic, std::string json);
    /// Indexes what the run directory already holds (a resumed run) and keeps its newest messages in
    /// memory, up to the budget; the older ones are served from the files.
    void load_run_dir();
    /// Appends what the run directory holds beyond last_seq(), to recover messages dropped on the
    /// way in; calls `added` for each. Returns how many were added.
    std::size_t catch_up_from_run_dir(const std::function<void(const LogEntry&)>& added = {});

    /// Up to max_count messages with seq >= since in seq order, no more than max_bytes unless the
    /// first alone is larger.
    std::vector<LogEntry> since(int64_t since, std::size_t max_count, std::size_t max_bytes);

    int64_t last_seq() const { return last_seq_; }
    /// The lowest seq that can still be served (-1 when empty).
    int64_t first_seq() const;
    std::size_t memory_count() const { return memory_.size(); }
    std::size_t memory_bytes() const { return bytes_; }

private:
    void evict();

    std::size_t budget_;
    std::deque<LogEntry> memory_;  // contiguous newest part, sorted by seq
    std::size_t bytes_ = 0;
    int64_t last_seq_ = -1;
    mutable std::optional<RunDirLog> log_;  // refreshed lazily, also from const queries
};

}  // namespace mwb::ipc
