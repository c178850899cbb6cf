// Runs whose process is gone without saying so (killed, crashed, node lost) must not stay "running":
// followers (the app's and mwb-record) note when they last heard from a run, and mark it
// interrupted once it has been silent for a stated time, or failed/interrupted when they know its
// local process ended. A run that speaks again is running again.
#include "mwb/store/error.h"
#include "mwb/store/store.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace mwb::store {

namespace {

std::string silent_reason(double seconds) {
    char text[64];
    std::snprintf(text, sizeof text, "%.0f s (its process is gone)", seconds);
    return Store::kSilentReason + std::string(text);
}

}  // namespace

void Store::note_alive(const std::string& uid, double now) {
    const int64_t id = run_row(uid, false);
    if (id < 0) return;  // not stored yet: its run.start will create it
    Transaction t(*this);
    db_.prepare("UPDATE runs SET last_seen = max(coalesce(last_seen, ?2), ?2) WHERE id = ?1").bind(1, id).bind(2, now).run();
    db_.prepare("UPDATE runs SET status = 'running', reason = '', finished = NULL "
                "WHERE id = ?1 AND status = 'interrupted' AND substr(reason, 1, length(?2)) = ?2")
        .bind(1, id)
        .bind(2, std::string(kSilentReason))
        .run();
    t.commit();
}

bool Store::mark_gone(const std::string& uid, const std::string& status, const std::string& reason, double now) {
    if (status != "interrupted" && status != "failed")
        throw Error("mark_gone: status must be interrupted or failed, not '" + status + "'");
    const int64_t id = run_row(uid, false);
    if (id < 0) return false;
    Transaction t(*this);
    db_.prepare("UPDATE runs SET status = ?2, reason = ?3, finished = ?4 WHERE id = ?1 AND status = 'running'")
        .bind(1, id)
        .bind(2, status)
        .bind(3, reason)
        .bind(4, now)
        .run();
    const bool changed = db_.changes() > 0;
    t.commit();
    return changed;
}

std::vector<std::string> Store::mark_silent_runs(double now, double gone_after_s) {
    Transaction t(*this);
    std::vector<std::pair<std::string, double>> silent;
    {
        Statement s = db_.prepare(
            "SELECT uid, coalesce(last_seen, created, 0) FROM runs WHERE status = 'running' AND "
            "coalesce(last_seen, created, 0) < ?1");
        s.bind(1, now - gone_after_s);
        while (s.step()) silent.emplace_back(s.text(0), s.real(1));
    }
    std::vector<std::string> uids;
    for (const auto& [uid, seen] : silent) {
        db_.prepare("UPDATE runs SET status = 'interrupted', reason = ?2, finished = ?3 WHERE uid = ?1 AND "
                    "status = 'running'")
            .bind(1, uid)
            .bind(2, silent_reason(std::floor(now - seen)))
            .bind(3, seen)
            .run();
        uids.push_back(uid);
    }
    t.commit();
    return uids;
}

std::vector<std::string> LivenessTicker::tick(Store& store, const std::string& run_id, bool heard, double now) {
    if (heard && !run_id.empty()) heard_.insert(run_id);
    if (now - last_tick_ < std::min(5.0, gone_after_s_ / 4)) return {};
    last_tick_ = now;
    for (const auto& uid : heard_) store.note_alive(uid, now);  // before marking: a run heard now stays
    heard_.clear();
    return store.mark_silent_runs(now, gone_after_s_);
}

}  // namespace mwb::store
