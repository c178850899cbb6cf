#include "backend/parallel/nccl_watch.h"

#include "mwb/kernels/error.h"

#include <cmath>

namespace mwb {

std::string describe_ranks(const std::vector<int>& world_ranks, int rank) {
    std::string list;
    for (std::size_t i = 0; i < world_ranks.size(); ++i) {
        if (i > 0) list += i + 1 == world_ranks.size() ? " and " : ", ";
        list += std::to_string(world_ranks[i]);
    }
    const bool known = rank >= 0 && static_cast<std::size_t>(rank) < world_ranks.size();
    return fmt::format("world rank{} {} (this is group rank {}{})", world_ranks.size() == 1 ? "" : "s", list, rank,
                       known ? fmt::format(", world rank {}", world_ranks[static_cast<std::size_t>(rank)]) : "");
}

std::string nccl_timeout_message(const NcclWait& w, double waited_s, double timeout_s) {
    return fmt::format(
        "NCCL {} on the {} group of {} did not complete in {:.0f} s (timeout {:g} s, "
        "--distributed-timeout-minutes {:g}): a rank of the group is hung, gone or waiting in "
        "another operation; communicator aborted",
        w.op, w.group, describe_ranks(w.world_ranks, w.rank), waited_s, timeout_s, timeout_s / 60);
}

std::string nccl_async_error_message(const NcclWait& w, std::string_view nccl_error) {
    return fmt::format("NCCL {} on the {} group of {} failed asynchronously: {}; communicator aborted", w.op, w.group,
                       describe_ranks(w.world_ranks, w.rank), nccl_error);
}

double checked_nccl_timeout(double seconds, std::string_view group) {
    MWB_CHECK(std::isfinite(seconds) && seconds > 0,
              "distributed_timeout_minutes: the NCCL waits of the {} group need a positive, finite timeout (got {} s)",
              group, seconds);
    return seconds;
}

}  // namespace mwb
