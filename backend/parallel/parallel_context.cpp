#include "parallel/parallel_context.h"

#include "mwb/kernels/error.h"
#include "parallel/mpi_communicator.h"
#include "parallel/self_communicator.h"

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

std::unique_ptr<Communicator> split(bool mpi, int color, int key, const char* name) {
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
    return std::make_unique<MpiCommunicator>(comm, name);
}

}  // namespace

World::World(int* argc, char*** argv) {
    if (!launched_by_mpi()) return;
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    mpi_ = true;
}

World::~World() {
    if (!mpi_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

void World::abort(int code) {
    if (mpi_ && size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
}

ParallelContext::ParallelContext(const World& world, const ParallelConfig& p)
    : world_rank_(world.rank()), world_size_(world.size()), tp_size_(p.tensor_model_parallel_size),
      pp_size_(p.pipeline_model_parallel_size), dp_size_(world.size() / (p.tensor_model_parallel_size * p.pipeline_model_parallel_size)),
      sequence_parallel_(p.sequence_parallel && p.tensor_model_parallel_size > 1) {
    MWB_CHECK(tp_size_ >= 1 && pp_size_ >= 1 && world_size_ % (tp_size_ * pp_size_) == 0,
              "tensor_model_parallel_size ({}) x pipeline_model_parallel_size ({}) must divide the {} ranks", tp_size_,
              pp_size_, world_size_);
    coord_.tp = world_rank_ % tp_size_;
    coord_.dp = (world_rank_ / tp_size_) % dp_size_;
    coord_.pp = world_rank_ / (tp_size_ * dp_size_);
    const bool mpi = world.uses_mpi();
    const auto [tp, dp, pp] = coord_;
    tp_ = split(mpi, dp + dp_size_ * pp, tp, "tp");
    sp_ = split(mpi, dp + dp_size_ * pp, tp, "sp");
    dp_ = split(mpi, tp + tp_size_ * pp, dp, "dp");
    pp_ = split(mpi, tp + tp_size_ * dp, pp, "pp");
    model_ = split(mpi, dp, tp + tp_size_ * pp, "model");
    const bool holds_embedding = pp == 0 || pp == pp_size_ - 1;
    embedding_ = split(mpi, holds_embedding ? tp + tp_size_ * dp : MPI_UNDEFINED, pp, "embedding");
    world_comm_ = mpi && world_size_ > 1 ? std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world")
                                         : std::unique_ptr<Communicator>(std::make_unique<SelfCommunicator>("world"));
}

ParallelContext::~ParallelContext() = default;

std::map<std::string, CommStats> ParallelContext::stats() const {
    return {{"tp", tp_->stats()},       {"sp", sp_->stats()},       {"dp", dp_->stats()},
            {"pp", pp_->stats()},       {"embedding", embedding_->stats()}, {"model", model_->stats()},
            {"world", world_comm_->stats()}};
}

void ParallelContext::reset_stats() {
    for (Communicator* c : {tp_.get(), sp_.get(), dp_.get(), pp_.get(), embedding_.get(), model_.get(), world_comm_.get()})
        c->reset_stats();
}

}  // namespace mwb
