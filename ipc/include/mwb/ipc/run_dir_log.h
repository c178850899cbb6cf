#pragma once
// Reading back the message stream a run directory holds (metrics.jsonl + events.jsonl + samples.jsonl,
// one JSON object per line, one gap-free seq over the files; docs/run-directory.md). The publisher uses it to
// reload history after a restart and to serve sequence numbers it no longer keeps in memory;
// `mwb-record import` uses it to load a finished run.
#include "mwb/ipc/message.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace mwb::ipc {

/// One line of the stream.
struct LogEntry {
    int64_t seq = -1;
    std::string topic;
    std::string json;
};

/// The files of the stream, in the order RunDirLog numbers them (samples.jsonl exists only in runs
/// that sampled text).
inline constexpr const char* kRunDirStreams[3] = {"metrics.jsonl", "events.jsonl", "samples.jsonl"};
inline constexpr int kRunDirStreamCount = 3;

/// An index over the files (seq -> file, offset), grown as the files grow.
class RunDirLog {
public:
    explicit RunDirLog(std::filesystem::path run_dir);

    /// Indexes the lines appended since the last call. A last line without its newline (being
    /// written, or torn by a crash) is left for later; lines that are not messages are counted.
    /// Safe while a RunDir appends: only seqs that cannot be preceded by a message still unread are
    /// "settled" and visible through last_seq() and read().
    void refresh();
    /// Settled entries with seq >= from in seq order: at most max_count, and no more than max_bytes
    /// unless the first entry alone is larger.
    std::vector<LogEntry> read(int64_t from, std::size_t max_count, std::size_t max_bytes) const;

    /// The lowest seq from which the messages to the end add up to at most max_bytes (-1 if none).
    int64_t tail_start(std::size_t max_bytes) const;

    int64_t first_seq() const { return index_.empty() ? -1 : index_.front().seq; }
    int64_t last_seq() const;
    std::size_t size() const { return index_.size(); }
    std::size_t malformed_lines() const { return malformed_; }
    const std::filesystem::path& dir() const { return dir_; }

private:
    struct Loc {
        int64_t seq;
        uint64_t offset;
        uint32_t length;
        uint32_t file;
    };
    std::filesystem::path dir_;
    std::vector<Loc> index_;  // sorted by seq, unique
    uint64_t scanned_[kRunDirStreamCount] = {};
    int64_t file_last_[kRunDirStreamCount] = {-1, -1, -1};
    int64_t settled_ = -1;
    std::size_t malformed_ = 0;
};

/// Calls `f` for every message of the run directory in seq order, streaming the files (constant
/// memory). Lines that are not valid messages are skipped and counted in `malformed` (if given).
/// Returns the number of messages. Throws Error when neither metrics.jsonl nor events.jsonl exists.
std::size_t for_each_run_dir_message(const std::filesystem::path& run_dir, const std::function<void(Message&&)>& f,
                                     std::size_t* malformed = nullptr);

}  // namespace mwb::ipc
