#pragma once
// The group of one process: collectives are copies, nothing is sent. Used for every group of a
// single-process run (no MPI needed) and for groups of size one in a parallel run.
#include "backend/parallel/communicator.h"

namespace mwb {

class SelfCommunicator final : public Communicator {
public:
    explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}
    int rank() const override { return 0; }
    int size() const override { return 1; }
    const std::string& name() const override { return name_; }
    void all_reduce_sum(float*, int64_t) override {}
    void all_reduce_sum(double*, int64_t) override {}
    void all_reduce_max(float*, int64_t) override {}
    void all_gather(const float* in, float* out, int64_t n) override;
    void reduce_scatter_sum(const float* in, float* out, int64_t n) override;
    void all_reduce_sum_f16(uint16_t*, int64_t) override {}
    void reduce_scatter_sum_f16(const uint16_t* in, uint16_t* out, int64_t n) override;
    void broadcast(void*, int64_t, int) override {}
    void gather(const void* in, void* out, int64_t bytes, int root) override;
    std::unique_ptr<PendingSend> exchange(std::span<const Message> sends, std::span<const Message> recvs) override;
    void barrier() override {}

private:
    std::string name_;
};

}  // namespace mwb
