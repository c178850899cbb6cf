#pragma once
// The statistics of one log interval (sums over its training steps, reset as a whole when the
// interval is logged) and their report at the interval's end: every rank's times, traffic and memory
// gathered to rank 0, the "step" and "memory" records, the TensorBoard scalars and the progress line.
#include "backend/config/config.h"
#include "backend/core/memory.h"
#include "backend/parallel/communicator.h"
#include "backend/telemetry/flops.h"
#include "backend/train/progress.h"

#include "mwb/ipc/schema.h"

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>

namespace mwb {

class ParallelContext;
class RunDir;
class TensorBoardWriter;

/// Traffic accumulated over the training steps of one log interval (evaluation and checkpoints excluded).
struct IntervalComm {
    std::map<std::string, CommStats> by_group;
    void add_delta(const std::map<std::string, CommStats>& before, const std::map<std::string, CommStats>& after);
};

/// Sums over the iterations of one log interval.
struct IntervalStats {
    double loss = 0;         ///< Σ of the finite iteration losses
    int64_t loss_count = 0;  ///< how many there were
    double time = 0;         ///< seconds in training steps
    double forward_s = 0, backward_s = 0, reduce_s = 0, optimizer_s = 0, data_s = 0;
    int64_t iterations = 0, skipped = 0, samples = 0;
    IntervalComm comm;
    void reset() { *this = IntervalStats{}; }
};

/// The run's allocator statistics as run.end and the "step" record carry them.
ipc::MemoryStats memory_record(const MemoryStats& m);

/// Megatron-LM's training_log scalars, each also "... vs samples" (x = consumed samples).
void tensorboard_scalar(TensorBoardWriter& tb, const std::string& tag, double value, const Progress& p);

/// The interval statistics of one rank and their report. Rank 0 (`dir` not null) publishes, writes
/// TensorBoard (with tensorboard_dir) and prints; log_interval is a collective of every rank.
class IntervalLog {
public:
    IntervalLog(const Config& cfg, ParallelContext& par, const Allocator& alloc, const FlopCounts& flops, int64_t seq,
                RunDir* dir, bool print_progress);
    ~IntervalLog();

    IntervalStats& stats() { return stats_; }
    /// Rank 0's event file with tensorboard_dir, else null (evaluation writes its scalars there too).
    TensorBoardWriter* tensorboard() { return tensorboard_.get(); }

    /// After each training step: its scalars every tensorboard_log_interval iterations.
    void tensorboard_step(double loss, const Progress& p);
    /// Reports the interval ending at p.iteration and starts the next one.
    void log_interval(const Progress& p);

private:
    struct RankReport;
    RankReport report() const;
    ipc::RankRecord rank_record(int rank, const RankReport& r, double n) const;
    ipc::RankMemoryRecord rank_memory_record(int rank, const RankReport& r) const;
    bool leader() const;
    void publish(std::string_view topic, nlohmann::json fields);

    const Config& cfg_;
    ParallelContext& par_;
    const Allocator& alloc_;
    const FlopCounts& flops_;
    int64_t seq_;
    RunDir* dir_;
    bool print_progress_;
    std::unique_ptr<TensorBoardWriter> tensorboard_;
    IntervalStats stats_;
};

}  // namespace mwb
