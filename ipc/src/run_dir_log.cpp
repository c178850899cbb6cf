#include "mwb/ipc/run_dir_log.h"

#include "mwb/ipc/error.h"
#include "mwb/ipc/message.h"

#include <algorithm>
#include <charconv>
#include <fstream>

namespace mwb::ipc {

namespace fs = std::filesystem;

namespace {

/// The top-level seq of a line written by RunDir (envelope first), else a full parse.
std::optional<int64_t> line_seq(std::string_view line) {
    const auto at = line.find("\"seq\":");
    if (at != std::string_view::npos) {
        int64_t v = -1;
        const char* p = line.data() + at + 6;
        const char* end = line.data() + line.size();
        while (p < end && *p == ' ') ++p;
        const auto [stop, ec] = std::from_chars(p, end, v);
        if (ec == std::errc() && stop < end && (*stop == ',' || *stop == '}' || *stop == ' ') && v >= 0) return v;
    }
    if (auto m = parse_message(line)) return m->seq;
    return std::nullopt;
}

/// Reads the next complete line of `in` into `line`; false at end of file or before a torn last line.
bool next_line(std::ifstream& in, std::string& line) {
    if (!std::getline(in, line)) return false;
    return !in.eof();  // getline hit EOF without a newline: the line is incomplete
}

}  // namespace

RunDirLog::RunDirLog(fs::path run_dir) : dir_(std::move(run_dir)) {}

void RunDirLog::refresh() {
    const std::size_t before = index_.size();
    auto scan = [&](uint32_t f) {
        std::ifstream in(dir_ / kRunDirStreams[f], std::ios::binary);
        if (!in) return;
        in.seekg(static_cast<std::streamoff>(scanned_[f]));
        std::string line;
        uint64_t offset = scanned_[f];
        while (next_line(in, line)) {
            const uint64_t length = line.size();
            if (const auto seq = line_seq(line); seq && length < UINT32_MAX) {
                index_.push_back({*seq, offset, static_cast<uint32_t>(length), f});
                file_last_[f] = std::max(file_last_[f], *seq);
            } else if (!line.empty()) {
                ++malformed_;
            }
            offset += length + 1;
        }
        scanned_[f] = offset;
    };
    // The writer appends in seq order, each message to one of the files, while we read. A file's last
    // seq L, read at time T, settles every seq up to L once every other file has been read to its end
    // after T (anything below L was written before T). So: one pass over all files, then a second
    // over all but the last; each file's first-pass last seq is then settled.
    int64_t first_pass[kRunDirStreamCount];
    for (uint32_t f = 0; f < kRunDirStreamCount; ++f) {
        scan(f);
        first_pass[f] = file_last_[f];
    }
    for (uint32_t f = 0; f + 1 < kRunDirStreamCount; ++f) scan(f);
    for (int64_t last : first_pass) settled_ = std::max(settled_, last);
    if (index_.size() == before) return;
    auto by_seq = [](const Loc& a, const Loc& b) { return a.seq < b.seq; };
    std::sort(index_.begin() + static_cast<std::ptrdiff_t>(before), index_.end(), by_seq);
    std::inplace_merge(index_.begin(), index_.begin() + static_cast<std::ptrdiff_t>(before), index_.end(), by_seq);
    index_.erase(std::unique(index_.begin(), index_.end(), [](const Loc& a, const Loc& b) { return a.seq == b.seq; }),
                 index_.end());
}

int64_t RunDirLog::last_seq() const {
    // Only what is settled: a seq above it may still be followed by an earlier one in the other file.
    auto it =
        std::upper_bound(index_.begin(), index_.end(), settled_, [](int64_t s, const Loc& l) { return s < l.seq; });
    return it == index_.begin() ? -1 : std::prev(it)->seq;
}

std::vector<LogEntry> RunDirLog::read(int64_t from, std::size_t max_count, std::size_t max_bytes) const {
    std::vector<LogEntry> out;
    auto it = std::lower_bound(index_.begin(), index_.end(), from, [](const Loc& l, int64_t s) { return l.seq < s; });
    std::ifstream files[2];
    std::size_t bytes = 0;
    for (; it != index_.end() && out.size() < max_count && it->seq <= settled_; ++it) {
        if (!out.empty() && bytes + it->length > max_bytes) break;
        std::ifstream& in = files[it->file];
        if (!in.is_open()) in.open(dir_ / kRunDirStreams[it->file], std::ios::binary);
        std::string line(it->length, '\0');
        in.seekg(static_cast<std::streamoff>(it->offset));
        if (!in.read(line.data(), it->length)) break;
        auto m = parse_message(line);
        if (!m || m->seq != it->seq) continue;
        bytes += line.size();
        out.push_back({m->seq, std::move(m->topic), std::move(line)});
    }
    return out;
}

int64_t RunDirLog::tail_start(std::size_t max_bytes) const {
    int64_t from = -1;
    std::size_t bytes = 0;
    for (auto it = index_.rbegin(); it != index_.rend(); ++it) {
        bytes += it->length;
        if (bytes > max_bytes) break;
        from = it->seq;
    }
    return from;
}

std::size_t for_each_run_dir_message(const fs::path& run_dir, const std::function<void(Message&&)>& f,
                                     std::size_t* malformed) {
    std::ifstream in[kRunDirStreamCount];
    bool any = false;
    for (int i = 0; i < kRunDirStreamCount; ++i) {
        in[i].open(run_dir / kRunDirStreams[i], std::ios::binary);
        any = any || (i < 2 && in[i].is_open());
    }
    if (!any)
        throw Error("run directory '" + run_dir.string() + "': neither metrics.jsonl nor events.jsonl can be read");
    std::optional<Message> head[kRunDirStreamCount];
    std::size_t bad = 0, count = 0;
    auto advance = [&](int i) {
        head[i].reset();
        std::string line;
        while (in[i].is_open() && next_line(in[i], line)) {
            if (auto m = parse_message(line); m && !m->is_heartbeat()) {
                head[i] = std::move(m);
                return;
            }
            if (!line.empty()) ++bad;
        }
    };
    for (int i = 0; i < kRunDirStreamCount; ++i) advance(i);
    int64_t last = -1;
    while (true) {
        int i = -1;  // the file whose next message has the lowest seq
        for (int k = 0; k < kRunDirStreamCount; ++k)
            if (head[k] && (i < 0 || head[k]->seq < head[i]->seq)) i = k;
        if (i < 0) break;
        Message& m = *head[i];
        if (m.seq > last) {  // a duplicate seq (a file copied twice) is skipped
            last = m.seq;
            ++count;
            f(std::move(m));
        }
        advance(i);
    }
    if (malformed) *malformed = bad;
    return count;
}

}  // namespace mwb::ipc
