#pragma once
// Who this rank is in the 3D layout and its process groups. Ranks are ordered as Megatron-LM's
// default: tensor-parallel ranks adjacent, then data-parallel, then pipeline
// (world rank = tp + TP·(dp + DP·pp)). Passed explicitly to everything that communicates; no globals.
#include "backend/config/config.h"
#include "backend/parallel/communicator.h"
#include "backend/parallel/watchdog.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mwb {

/// The process world: MPI when launched by mpirun/srun (or MWB_MPI=1), else a single process.
class World {
public:
    /// Initialises MPI when the environment shows a launcher; safe to construct once per process.
    World(int* argc, char*** argv);
    ~World();
    World(const World&) = delete;
    World& operator=(const World&) = delete;
    int rank() const { return rank_; }
    int size() const { return size_; }
    /// This rank among the ranks on its node (shared-memory domain), and how many there are: picks
    /// the GPU of a rank.
    int local_rank() const { return local_rank_; }
    int local_size() const { return local_size_; }
    bool uses_mpi() const { return mpi_; }
    /// True when every rank passes true (collective over the world).
    bool all_agree(bool mine) const;
    /// Σ of `mine` over the ranks of this rank's node (collective over the world): what the ranks
    /// sharing one host's memory need together.
    double node_sum(double mine) const;
    /// Ends every rank consistently (MPI_Abort when ranks cannot agree), for fatal errors.
    [[noreturn]] void abort(int code);

    /// What this rank waits in; every group of the world reports to it (the watchdog's view).
    OperationTracker* tracker() { return mpi_ ? &tracker_ : nullptr; }
    /// Starts the hung-rank watchdog (collective; no-op for a single process). `report` (rank 0)
    /// receives its diagnosis before every rank is aborted; set_watchdog_report replaces it later.
    void start_watchdog(double timeout_s, std::function<void(const std::string&)> report = {});
    void set_watchdog_report(std::function<void(const std::string&)> report);

private:
    bool mpi_ = false, thread_multiple_ = false;
    int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
    OperationTracker tracker_;
    std::unique_ptr<Watchdog> watchdog_;
};

/// The GPU a rank drives, one per rank on each node: with at least as many visible GPUs as
/// node-local ranks, the node's rank i takes GPU i; with one visible GPU and a launcher that set
/// CUDA_VISIBLE_DEVICES (one GPU bound to each rank, as `srun --gpus-per-task=1` does), that one.
/// -1 when neither holds (NCCL needs distinct GPUs, and refuses a GPU shared by two ranks).
int gpu_of_rank(int local_rank, int local_size, int visible_gpus, bool visible_set_by_launcher);

struct RankCoordinates {
    int tp = 0, dp = 0, pp = 0;
};

/// Every group exists twice over the same ranks: host groups (MPI, or a group of one) for host
/// memory — losses, norms, statistics, checkpoints — and data groups for the model's tensors, which
/// are the host groups on CPUs and NCCL communicators on GPUs (use_device_collectives).
class ParallelContext {
public:
    /// Builds the groups for a world and a configuration whose sizes divide it (validate first); the
    /// host groups report to the world's tracker.
    /// MWB_P2P_SEMANTICS=nccl gives the host groups NCCL's point-to-point semantics (P2PSemantics).
    ParallelContext(World& world, const ParallelConfig& parallel);
    ~ParallelContext();

    /// GPU runs: NCCL communicators over the tp, sp, dp, pp, embedding and model groups become the data
    /// groups, their collectives ordered with the ops queued on `compute_stream`. Collective over
    /// the world; the current GPU must be this rank's own.
    void use_device_collectives(void* compute_stream);
    bool device_collectives() const { return dev_tp_ != nullptr; }

    int world_rank() const { return world_rank_; }
    int world_size() const { return world_size_; }
    int tp_size() const { return tp_size_; }
    int pp_size() const { return pp_size_; }
    int dp_size() const { return dp_size_; }
    const RankCoordinates& coord() const { return coord_; }
    bool sequence_parallel() const { return sequence_parallel_; }
    bool first_stage() const { return coord_.pp == 0; }
    bool last_stage() const { return coord_.pp == pp_size_ - 1; }
    int world_rank_of(int tp, int dp, int pp) const { return tp + tp_size_ * (dp + dp_size_ * pp); }

    // Data groups: for tensors in the model's memory.
    Communicator& tp() { return dev_tp_ ? *dev_tp_ : *tp_; }
    /// The tensor-parallel ranks again, for sequence-parallel traffic (counted apart from "tp").
    Communicator& sp() { return dev_sp_ ? *dev_sp_ : *sp_; }
    Communicator& dp() { return dev_dp_ ? *dev_dp_ : *dp_; }
    Communicator& pp() { return dev_pp_ ? *dev_pp_ : *pp_; }
    /// First and last pipeline stage of this (tp, dp) column: holders of the tied word embedding.
    Communicator& embedding() { return dev_embedding_ ? *dev_embedding_ : *embedding_; }
    /// All tp × pp ranks of this data-parallel replica, for device scalars (the gradient norm's Σ x²);
    /// its traffic counts as "model".
    Communicator& model_replica() { return dev_model_ ? *dev_model_ : *model_; }

    // Host groups: for host memory.
    Communicator& host_tp() { return *tp_; }
    Communicator& host_dp() { return *dp_; }
    Communicator& host_pp() { return *pp_; }
    /// All tp × pp ranks of this data-parallel replica, for host values.
    Communicator& model() { return *model_; }
    Communicator& world() { return *world_comm_; }

    /// The six data groups (tp, sp, dp, pp, embedding, model): what a CUDA graph of the step holds.
    std::vector<Communicator*> data_groups() { return {&tp(), &sp(), &dp(), &pp(), &embedding(), &model_replica()}; }
    /// Before a host read of the step's results on `compute_stream`: with NCCL groups, waits for the
    /// work queued on it so far, polling every group's asynchronous errors and its timeout
    /// (NcclCommunicator::await); a no-op without them (the read itself waits).
    void await_device_step(void* compute_stream);

    /// Traffic per group type since the last reset: "tp", "sp", "pp", "dp", "embedding", "model", "world".
    std::map<std::string, CommStats> stats() const;
    void reset_stats();

private:
    int world_rank_, world_size_, tp_size_, pp_size_, dp_size_;
    bool sequence_parallel_;
    double timeout_s_;  // NCCL's waits (the MPI groups' are the World's watchdog)
    RankCoordinates coord_;
    std::unique_ptr<Communicator> tp_, sp_, dp_, pp_, embedding_, model_, world_comm_;
    std::unique_ptr<Communicator> dev_tp_, dev_sp_, dev_dp_, dev_pp_, dev_embedding_, dev_model_;
};

}  // namespace mwb
