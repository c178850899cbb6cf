#pragma once
// A process group on MPI (Open MPI from Debian), for host buffers.
#include "parallel/communicator.h"

#include <mpi.h>

namespace mwb {

class MpiCommunicator final : public Communicator {
public:
    /// Takes ownership of `comm` (freed on destruction unless it is MPI_COMM_WORLD).
    MpiCommunicator(MPI_Comm comm, std::string name);
    ~MpiCommunicator() override;
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const std::string& name() const override { return name_; }
    MPI_Comm comm() const { return comm_; }

    void all_reduce_sum(float* data, int64_t n) override;
    void all_reduce_sum(double* data, int64_t n) override;
    void all_reduce_max(float* data, int64_t n) override;
    void all_gather(const float* in, float* out, int64_t n) override;
    void reduce_scatter_sum(const float* in, float* out, int64_t n) override;
    void broadcast(void* data, int64_t bytes, int root) override;
    void gather(const void* in, void* out, int64_t bytes, int root) override;
    std::unique_ptr<PendingSend> send(const float* data, int64_t n, int peer, int tag) override;
    void recv(float* data, int64_t n, int peer, int tag) override;
    void barrier() override;

private:
    MPI_Comm comm_;
    std::string name_;
    int rank_ = 0, size_ = 1;
};

}  // namespace mwb
