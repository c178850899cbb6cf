#include "backend/parallel/parallel_context.h"

#include "mwb/kernels/error.h"
#include "backend/parallel/mpi_communicator.h"
#if defined(MWB_WITH_CUDA)
#include "backend/parallel/nccl_communicator.h"
#endif
#include "backend/parallel/self_communicator.h"

#include <mpi.h>

#include <cstdlib>

namespace mwb {

namespace {

bool launched_by_mpi() {
    for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
        if (std::getenv(var)) return true;
    if (const char* v = std::getenv("MWB_MPI")) return std::string(v) == "1";
    // srun without an MPI environment of its own still sets SLURM_NTASKS.
    if (const char* n = std::getenv("SLURM_NTASKS"); n && std::atoi(n) > 1 && std::getenv("SLURM_PROCID")) return true;
    return false;
}

P2PSemantics p2p_semantics() {
    const char* v = std::getenv("MWB_P2P_SEMANTICS");
    if (!v || std::string(v).empty() || std::string(v) == "mpi") return P2PSemantics::Mpi;
    MWB_CHECK(std::string(v) == "nccl", "MWB_P2P_SEMANTICS is '{}'; expected mpi (the default) or nccl", v);
    return P2PSemantics::Nccl;
}

std::unique_ptr<Communicator> split(bool mpi, int color, int key, const char* name, P2PSemantics p2p,
                                    OperationTracker* tracker) {
    if (!mpi) return std::make_unique<SelfCommunicator>(name);
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm);
    if (comm == MPI_COMM_NULL) return std::make_unique<SelfCommunicator>(name);
    int size = 1;
    MPI_Comm_size(comm, &size);
    if (size == 1) {
        MPI_Comm_free(&comm);
        return std::make_unique<SelfCommunicator>(name);
    }
    return std::make_unique<MpiCommunicator>(comm, name, p2p, tracker);
}

}  // namespace

int gpu_of_rank(int local_rank, int local_size, int visible_gpus, bool visible_set_by_launcher) {
    if (local_rank < 0 || local_rank >= local_size || visible_gpus < 1) return -1;
    if (visible_gpus >= local_size) return local_rank;
    return visible_gpus == 1 && visible_set_by_launcher ? 0 : -1;
}

World::World(int* argc, char*** argv) {
    if (!launched_by_mpi()) return;
    int provided = 0;
    // Multiple: the watchdog's thread sends and receives heartbeats while the main thread waits in a
    // collective (Open MPI provides it; without it only each rank's own waits are timed).
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank_);
    MPI_Comm_size(node, &local_size_);
    MPI_Comm_free(&node);
    mpi_ = true;
}

World::~World() {
    watchdog_.reset();
    if (!mpi_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

bool World::all_agree(bool mine) const {
    if (!mpi_ || size_ == 1) return mine;
    int all = mine ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return all != 0;
}

double World::node_sum(double mine) const {
    if (!mpi_ || size_ == 1) return mine;
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    double sum = mine;
    MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, node);
    MPI_Comm_free(&node);
    return sum;
}

void World::start_watchdog(double timeout_s, std::function<void(const std::string&)> report) {
    if (!mpi_ || size_ == 1 || watchdog_) return;
    watchdog_ = std::make_unique<Watchdog>(tracker_, timeout_s, rank_, size_, thread_multiple_, std::move(report));
}

void World::set_watchdog_report(std::function<void(const std::string&)> report) {
    if (watchdog_) watchdog_->set_report(std::move(report));
}

void World::abort(int code) {
    if (mpi_ && size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
}

ParallelContext::ParallelContext(World& world, const ParallelConfig& p)
    : world_rank_(world.rank()), world_size_(world.size()), tp_size_(p.tensor_model_parallel_size),
      pp_size_(p.pipeline_model_parallel_size), dp_size_(world.size() / (p.tensor_model_parallel_size * p.pipeline_model_parallel_size)),
      sequence_parallel_(p.sequence_parallel && p.tensor_model_parallel_size > 1),
      timeout_s_(p.distributed_timeout_minutes * 60) {
    MWB_CHECK(tp_size_ >= 1 && pp_size_ >= 1 && world_size_ % (tp_size_ * pp_size_) == 0,
              "tensor_model_parallel_size ({}) x pipeline_model_parallel_size ({}) must divide the {} ranks", tp_size_,
              pp_size_, world_size_);
    coord_.tp = world_rank_ % tp_size_;
    coord_.dp = (world_rank_ / tp_size_) % dp_size_;
    coord_.pp = world_rank_ / (tp_size_ * dp_size_);
    const bool mpi = world.uses_mpi();
    const P2PSemantics p2p = p2p_semantics();
    OperationTracker* const t = world.tracker();
    const auto [tp, dp, pp] = coord_;
    tp_ = split(mpi, dp + dp_size_ * pp, tp, "tp", p2p, t);
    sp_ = split(mpi, dp + dp_size_ * pp, tp, "sp", p2p, t);
    dp_ = split(mpi, tp + tp_size_ * pp, dp, "dp", p2p, t);
    pp_ = split(mpi, tp + tp_size_ * dp, pp, "pp", p2p, t);
    model_ = split(mpi, dp, tp + tp_size_ * pp, "model", p2p, t);
    const bool holds_embedding = pp == 0 || pp == pp_size_ - 1;
    embedding_ = split(mpi, holds_embedding ? tp + tp_size_ * dp : MPI_UNDEFINED, pp, "embedding", p2p, t);
    world_comm_ = mpi && world_size_ > 1 ? std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", P2PSemantics::Mpi, t)
                                         : std::unique_ptr<Communicator>(std::make_unique<SelfCommunicator>("world"));
}

ParallelContext::~ParallelContext() = default;

void ParallelContext::use_device_collectives(void* compute_stream) {
#if defined(MWB_WITH_CUDA)
    if (device_collectives()) return;
    // Every rank builds the six in the same order: each NCCL init waits for its group's ranks only.
    // Not blocking: the ops that read the results are queued behind them on the compute stream, and
    // host reads of device memory go through that stream too.
    const auto make = [&](Communicator& host) {
        return std::make_unique<NcclCommunicator>(host, compute_stream, false, timeout_s_);
    };
    dev_tp_ = make(*tp_);
    dev_sp_ = make(*sp_);
    dev_dp_ = make(*dp_);
    dev_pp_ = make(*pp_);
    dev_embedding_ = make(*embedding_);
    dev_model_ = make(*model_);
#else
    (void)compute_stream;
    MWB_FAIL("device collectives need NCCL, and this build has no CUDA (nvcc was not found when it was configured)");
#endif
}

void ParallelContext::await_device_step(void* compute_stream) {
#if defined(MWB_WITH_CUDA)
    if (!device_collectives()) return;
    std::vector<NcclCommunicator*> groups;
    for (const auto& c : {&dev_tp_, &dev_sp_, &dev_dp_, &dev_pp_, &dev_embedding_, &dev_model_})
        groups.push_back(static_cast<NcclCommunicator*>(c->get()));
    NcclCommunicator::await(compute_stream, groups);
#else
    (void)compute_stream;
#endif
}

std::map<std::string, CommStats> ParallelContext::stats() const {
#if defined(MWB_WITH_CUDA)
    // The pipeline receives' waits are timed by events on the GPU: add those that have fired.
    if (dev_pp_) static_cast<NcclCommunicator*>(dev_pp_.get())->settle_waits();
#endif
    std::map<std::string, CommStats> s{{"tp", tp_->stats()},       {"sp", sp_->stats()},
                                       {"dp", dp_->stats()},       {"pp", pp_->stats()},
                                       {"embedding", embedding_->stats()}, {"model", model_->stats()},
                                       {"world", world_comm_->stats()}};
    for (const Communicator* c :
         {dev_tp_.get(), dev_sp_.get(), dev_dp_.get(), dev_pp_.get(), dev_embedding_.get(), dev_model_.get()})
        if (c) s[c->name()].add(c->stats());
    return s;
}

void ParallelContext::reset_stats() {
    for (Communicator* c : {tp_.get(), sp_.get(), dp_.get(), pp_.get(), embedding_.get(), model_.get(), world_comm_.get(),
                            dev_tp_.get(), dev_sp_.get(), dev_dp_.get(), dev_pp_.get(), dev_embedding_.get(),
                            dev_model_.get()})
        if (c) c->reset_stats();
}

}  // namespace mwb
