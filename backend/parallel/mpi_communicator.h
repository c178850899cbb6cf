#pragma once
// A process group on MPI (Open MPI from Debian), for host buffers.
#include "backend/parallel/communicator.h"
#include "backend/parallel/watchdog.h"

#include <mpi.h>

#include <memory>
#include <vector>

namespace mwb {

/// How point-to-point messages behave. Mpi: MPI's own (matched by tag, sends buffered as MPI
/// pleases). Nccl: NCCL's, so that CPU runs check the message order the GPU path relies on: tags are
/// ignored (messages between two ranks match in posting order), a send completes only once it is
/// received, and each call starts only after the group's previous point-to-point call has completed,
/// as on one CUDA stream. An order that deadlocks or mismatches on NCCL does so here too.
enum class P2PSemantics { Mpi, Nccl };

class MpiCommunicator final : public Communicator {
public:
    /// Takes ownership of `comm` (freed on destruction unless it is MPI_COMM_WORLD). `tracker`: where
    /// every call says what it waits in (the watchdog's view); may be null.
    MpiCommunicator(MPI_Comm comm, std::string name, P2PSemantics p2p = P2PSemantics::Mpi,
                    OperationTracker* tracker = nullptr);
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
    void all_reduce_sum_f16(uint16_t* data, int64_t n) override;
    void reduce_scatter_sum_f16(const uint16_t* in, uint16_t* out, int64_t n) override;
    void broadcast(void* data, int64_t bytes, int root) override;
    void gather(const void* in, void* out, int64_t bytes, int root) override;
    std::unique_ptr<PendingSend> exchange(std::span<const Message> sends, std::span<const Message> recvs) override;
    void barrier() override;

private:
    MPI_Comm comm_;
    std::string name_;
    int rank_ = 0, size_ = 1;
    P2PSemantics p2p_;
    OperationTracker* tracker_;
    std::vector<std::shared_ptr<MPI_Request>> last_sends_;  // Nccl semantics: what the next call waits for

    void wait_for_last_sends();
};

}  // namespace mwb
