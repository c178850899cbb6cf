#include "mwb/ipc/history.h"

#include <algorithm>

namespace mwb::ipc {

History::History(std::size_t memory_budget_bytes, std::filesystem::path run_dir) : budget_(memory_budget_bytes) {
    if (!run_dir.empty()) log_.emplace(std::move(run_dir));
}

bool History::append(int64_t seq, std::string topic, std::string json) {
    if (seq <= last_seq_) return false;
    bytes_ += json.size() + topic.size();
    memory_.push_back({seq, std::move(topic), std::move(json)});
    last_seq_ = seq;
    evict();
    return true;
}

void History::evict() {
    // Keep at least the newest message; the rest is on disk when there is a run directory.
    while (memory_.size() > 1 && bytes_ > budget_) {
        bytes_ -= memory_.front().json.size() + memory_.front().topic.size();
        memory_.pop_front();
    }
}

void History::load_run_dir() {
    if (!log_) return;
    log_->refresh();
    // Messages before the tail that fits the budget stay on disk: treat them as appended and evicted.
    int64_t from = log_->tail_start(budget_);
    if (from < 0) from = log_->last_seq();  // even the newest alone exceeds the budget
    if (from > last_seq_ + 1) last_seq_ = from - 1;
    catch_up_from_run_dir();
}

std::size_t History::catch_up_from_run_dir(const std::function<void(const LogEntry&)>& added) {
    if (!log_) return 0;
    log_->refresh();
    std::size_t n = 0;
    while (log_->last_seq() > last_seq_) {
        auto batch = log_->read(last_seq_ + 1, 4096, std::size_t{64} << 20);
        if (batch.empty()) break;
        for (auto& e : batch) {
            if (e.seq <= last_seq_) continue;
            if (added) added(e);
            append(e.seq, std::move(e.topic), std::move(e.json));
            ++n;
        }
    }
    return n;
}

int64_t History::first_seq() const {
    if (log_ && (memory_.empty() || memory_.front().seq > 0)) log_->refresh();
    if (log_ && log_->size() > 0 && (memory_.empty() || log_->first_seq() < memory_.front().seq))
        return log_->first_seq();
    return memory_.empty() ? -1 : memory_.front().seq;
}

std::vector<LogEntry> History::since(int64_t since, std::size_t max_count, std::size_t max_bytes) {
    std::vector<LogEntry> out;
    if (max_count == 0) return out;
    std::size_t bytes = 0;
    // The part no longer in memory comes from the run directory.
    if (log_ && (memory_.empty() || since < memory_.front().seq)) {
        log_->refresh();
        const int64_t end = memory_.empty() ? last_seq_ + 1 : memory_.front().seq;
        auto batch = log_->read(since, max_count, max_bytes);
        for (auto& e : batch) {
            if (e.seq >= end) break;
            bytes += e.json.size();
            out.push_back(std::move(e));
        }
        // A batch that stopped short of `end` was cut by the limits: this page ends here.
        if (!out.empty() && out.size() == batch.size()) return out;
        since = std::max(since, end);
    }
    auto it =
        std::lower_bound(memory_.begin(), memory_.end(), since, [](const LogEntry& e, int64_t s) { return e.seq < s; });
    for (; it != memory_.end() && out.size() < max_count; ++it) {
        if (!out.empty() && bytes + it->json.size() > max_bytes) break;
        bytes += it->json.size();
        out.push_back(*it);
    }
    return out;
}

}  // namespace mwb::ipc
