#pragma once
// The run history: one SQLite file (WAL, so a recorder writes while the app reads) holding runs,
// step metrics, per-rank memory, evaluations and events as received from the wire or a run
// directory (docs/store.md). Ingesting is idempotent on (run, seq): replays never duplicate.
#include "mwb/ipc/message.h"
#include "mwb/store/sqlite.h"
#include "mwb/store/types.h"

#include <filesystem>
#include <map>
#include <memory>
#include <set>

namespace mwb::store {

/// $XDG_DATA_HOME/mwb/history.sqlite (default ~/.local/share/mwb/history.sqlite): the same data
/// directory as core/files.h user_data_dir().
std::filesystem::path default_store_path();

class Store {
public:
    /// Opens or creates `file`, migrating an older schema. Throws Error naming the file.
    explicit Store(const std::filesystem::path& file);
    ~Store();
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    // ---- writing --------------------------------------------------------------------------------
    /// Groups ingests into one transaction (much faster, and readers see all or nothing). The
    /// downsampling blocks of what changed are brought up to date on commit.
    class Transaction {
    public:
        explicit Transaction(Store& store);
        ~Transaction();  ///< rolls back unless committed
        void commit();

    private:
        Store& store_;
        bool done_ = false;
    };

    /// Stores one message; false when (run, seq) was already stored. Outside a Transaction each
    /// call commits on its own. Unknown topics and fields are kept (events.body, steps.extra).
    bool ingest(const ipc::Message& message);
    /// The first seq of run `uid` not stored yet (every seq below it is): where to resume.
    int64_t next_seq(const std::string& uid);

    // ---- liveness (src/liveness.cpp) -------------------------------------------------------------
    /// A follower heard from run `uid` at `now` (Unix seconds, this machine's clock): messages or
    /// heartbeats. A run marked interrupted for its silence is running again.
    void note_alive(const std::string& uid, double now);
    /// The run's process is known to be gone without a run.end (a local process that crashed or was
    /// killed): sets `status` ("interrupted" or "failed") and `reason` if the run is still "running".
    /// Returns whether it changed anything.
    bool mark_gone(const std::string& uid, const std::string& status, const std::string& reason, double now);
    /// Every "running" run not heard from for more than `gone_after_s` before `now` becomes
    /// "interrupted" with reason kSilentReason + the time; returns their uids.
    std::vector<std::string> mark_silent_runs(double now, double gone_after_s);
    /// The start of the reason mark_silent_runs() writes (note_alive() undoes only those).
    static constexpr const char* kSilentReason = "no message from the run for ";
    /// How long a run may be silent before followers call it gone (heartbeats come every second).
    static constexpr double kDefaultGoneAfterS = 60;

    void set_name(const std::string& uid, const std::string& name);
    void set_notes(const std::string& uid, const std::string& notes);
    void add_tag(const std::string& uid, const std::string& tag);
    void remove_tag(const std::string& uid, const std::string& tag);
    void delete_run(const std::string& uid);

    // ---- reading --------------------------------------------------------------------------------
    std::vector<RunSummary> runs(const RunFilter& filter = {});
    std::optional<RunRecord> run(const std::string& uid);
    /// A step metric (step_metrics() or any numeric field of the step records) over iterations,
    /// min/max/mean per bucket; throws Error for an unknown run.
    Series series(const std::string& uid, const std::string& metric, const SeriesQuery& query = {});
    std::vector<Series> series(const std::vector<std::string>& uids, const std::string& metric,
                               const SeriesQuery& query = {});
    /// The same without the block index: every point read and bucketed (the reference in tests).
    Series series_brute_force(const std::string& uid, const std::string& metric, const SeriesQuery& query = {});
    /// Wall-clock time against iteration at about `anchors` iterations spread evenly over the run's
    /// timed steps (first and last included); one index seek each, not a scan of the run.
    std::vector<WallClockPoint> wall_clock(const std::string& uid, int anchors = 2000);
    std::vector<EvalPoint> evals(const std::string& uid);
    std::vector<EventRecord> events(const std::string& uid, const std::string& topic = {});
    std::vector<MemorySample> memory(const std::string& uid, std::optional<int64_t> rank = std::nullopt);
    // ---- samples (src/samples.cpp) ----------------------------------------------------------------
    /// Text samples of run `uid`: newest iteration first, then by prompt_index.
    std::vector<SampleRecord> samples(const std::string& uid, const SampleQuery& query = {});
    /// The prompts sampled in any of the runs, each once, by prompt_index (then first seen).
    std::vector<std::string> sample_prompts(const std::vector<std::string>& uids);
    /// Per run, in order: its newest sample of `prompt` at or before iteration `at_most` (the newest
    /// of all when unset); nullopt where it has none. One index seek per run.
    std::vector<std::optional<SampleRecord>> prompt_samples(const std::vector<std::string>& uids,
                                                            const std::string& prompt,
                                                            std::optional<int64_t> at_most = std::nullopt);

    /// Keys of the runs' configurations (and topology, as "topology.KEY") whose values differ.
    std::vector<ConfigDifference> config_diff(const std::vector<std::string>& uids);
    /// Counts per table for run `uid` (tests, mwb-record's summary): messages, steps, evals, events,
    /// memory, samples.
    std::map<std::string, int64_t> counts(const std::string& uid);

    Database& database() { return db_; }
    const std::string& file() const { return db_.file(); }

    struct Statements;

private:
    int64_t run_row(const std::string& uid, bool create);
    int64_t run_row_or_throw(const std::string& uid);
    void ingest_unlocked(const ipc::Message& m, bool& inserted);
    void refresh_blocks();
    void rebuild_missing_blocks();
    int64_t block_iters(int64_t run);

    Database db_;
    std::unique_ptr<Statements> st_;
    std::map<std::string, int64_t> run_ids_;
    std::set<std::pair<int64_t, int64_t>> dirty_;  // (run, block) with new steps since the last commit
    std::map<int64_t, int64_t> block_iters_;
    int depth_ = 0;  // open Transactions
};

/// A follower's side of liveness (the app's TelemetryWorker and mwb-record): call tick() from the
/// receive loop; at most every gone_after / 4 (and 5 s) it notes the runs heard from since the last
/// time and marks the silent ones (Store::mark_silent_runs), returning the runs it marked.
class LivenessTicker {
public:
    explicit LivenessTicker(double gone_after_s = Store::kDefaultGoneAfterS) : gone_after_s_(gone_after_s) {}
    /// `heard`: a message or heartbeat of `run_id` arrived since the last call.
    std::vector<std::string> tick(Store& store, const std::string& run_id, bool heard, double now);
    double gone_after_s() const { return gone_after_s_; }

private:
    double gone_after_s_;
    double last_tick_ = 0;
    std::set<std::string> heard_;
};

}  // namespace mwb::store
