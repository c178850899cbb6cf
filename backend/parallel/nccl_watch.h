#pragma once
// What NcclCommunicator's host waits check and say when they give up (a peer's asynchronous error,
// or no completion within --distributed-timeout-minutes): plain text and arithmetic, no NCCL, so the
// wording and the validation are tested on machines without a GPU (tests/parallel/test_nccl_watch.cpp).
#include <string>
#include <string_view>
#include <vector>

namespace mwb {

/// Who was waiting for what: the group's name, the operation ("all-reduce of 4096 floats"), the
/// world ranks of the group in group order, and this process's rank in the group.
struct NcclWait {
    std::string group;
    std::string op;
    std::vector<int> world_ranks;
    int rank = 0;
};

/// "world ranks 0, 2, 4 and 6 (this is group rank 1, world rank 2)".
std::string describe_ranks(const std::vector<int>& world_ranks, int rank);

/// The error when a wait passed its timeout; the communicator has been aborted.
std::string nccl_timeout_message(const NcclWait& w, double waited_s, double timeout_s);

/// The error when NCCL reported an asynchronous failure (`nccl_error`: ncclGetErrorString's text, and
/// ncclGetLastError's where it has one); the communicator has been aborted.
std::string nccl_async_error_message(const NcclWait& w, std::string_view nccl_error);

/// The timeout of every host wait of the group `group`: `seconds` when it is finite and positive,
/// else an Error naming distributed_timeout_minutes (the configuration field it comes from).
double checked_nccl_timeout(double seconds, std::string_view group);

}  // namespace mwb
