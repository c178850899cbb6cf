#pragma once
// Checkpoints: what a run needs to continue bit-identically (weights, Adam moments, step counts, loss
// scaler, data position, iteration), saved sharded and loadable into any parallel layout:
//   <dir>/iter_NNNNNNN/metadata.json        layout, every tensor slice (name, global shape, slice, file, offset), checksums
//   <dir>/iter_NNNNNNN/tp00_pp00.bin        the tensors of one tensor-/pipeline-parallel shard, fp32, 64-byte aligned
//   <dir>/latest                            "iter_NNNNNNN", written last
// Each tensor is stored once (by data-parallel rank 0 of its shard, replicated tensors by tensor-parallel
// rank 0) with its place in the global tensor, so a loader with other TP/PP/DP sizes assembles its own
// slices from whichever files hold them. The iteration folder is built under a temporary name and
// renamed into place (over an older one of the same iteration by an atomic exchange where the file system
// has one); files are checksummed (XXH3-64) and verified on load. Format: docs/checkpoint.md.
// Saving assumes the ranks share a file system (as Megatron-LM's checkpoints do).
#include "backend/core/files.h"
#include "backend/model/param_layout.h"
#include "mwb/kernels/tensor.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mwb {

class Communicator;
class ParallelContext;

/// One tensor slice of this rank.
struct CheckpointTensor {
    std::string name;                   ///< e.g. "param/decoder.final_layernorm.weight", "exp_avg/..."
    std::vector<int64_t> global_shape;  ///< the whole tensor
    std::vector<int64_t> shape;         ///< this slice
    int split_dim = -1;                 ///< dimension the slice is cut along (-1: the whole tensor)
    int64_t split_begin = 0;            ///< where the slice starts along split_dim
    const float* data = nullptr;        ///< saving: where the values are
    float* dest = nullptr;              ///< loading: where they go
    bool save = true;                   ///< false: a replica that another rank saves
    /// Vocabulary-padded tensors (word embedding, output layer): the saved and the needed number of
    /// rows (dimension 0) may differ when the tensor-parallel size changes the padding; common rows
    /// load, extra padding rows are zero.
    bool padded_rows = false;
};

/// Parameter i of `layout` as checkpoint slices named prefix + its name, its values at `data` (in
/// `layout`'s slice order): one per block of the rank's slice (SwiGLU's fc1 [gate | up]: two), each
/// with its place in the global tensor, so any layout can load it. `save` is left true.
std::vector<CheckpointTensor> parameter_slices(const ParamLayout& layout, std::size_t i, const std::string& prefix,
                                               float* data);

/// The scalar state saved beside the tensors.
struct CheckpointState {
    int64_t iteration = 0;
    int64_t consumed_samples = 0;
    int64_t optimizer_steps = 0;
    int64_t skipped_iterations = 0;
    /// Samples of the successful steps: the learning-rate scheduler's position (Megatron-LM's
    /// opt_param_scheduler num_steps); -1 when the checkpoint predates it.
    int64_t scheduler_samples = -1;
    /// Validation samples read so far (Megatron-LM's consumed_valid_samples); -1 when it predates it.
    int64_t consumed_valid_samples = -1;
    nlohmann::json loss_scaler;
    nlohmann::json config;  ///< the resolved configuration of the run that saved it
};

/// "iter_0000100"
std::string iteration_dir_name(int64_t iteration);

/// Collective over the world of `par`: writes the checkpoint of `state.iteration` under `dir`
/// (replacing one of the same iteration) and then the `latest` marker. `writer`: this rank writes its
/// tensors (data-parallel rank 0 of each shard). Rank 0 first removes what interrupted saves left
/// (temporary folders and marker files) and restores a checkpoint an interrupted replacement moved
/// aside. A failure on any rank (a full disk) fails the save on every rank, removes the partial
/// folder and leaves `latest` as it was. Returns the iteration folder.
fs::path save_checkpoint(const fs::path& dir, const CheckpointState& state, const std::vector<CheckpointTensor>& tensors,
                         ParallelContext& par, bool writer);

/// Resolves a --load argument: a checkpoint directory (follows `latest`) or one iteration folder.
/// nullopt when the directory does not exist yet or holds no `latest` marker (nothing saved yet:
/// the run starts fresh, as Megatron-LM's); an error when `load` names an iteration folder that is not
/// a checkpoint, or `latest` names one that is missing.
std::optional<fs::path> find_checkpoint(const fs::path& load);
/// find_checkpoint() where a checkpoint must exist (a conversion's input): an error naming `load` when
/// there is none.
fs::path resolve_checkpoint_dir(const fs::path& load);

/// Reads and validates metadata.json of an iteration folder without touching the tensor files: the
/// format, non-negative counts consistent with each other and with the folder's name.
CheckpointState read_checkpoint_state(const fs::path& iteration_dir);

/// Reads metadata.json of an iteration folder, verifies the size and checksum of every file it reads,
/// fills each tensor's `dest` from the saved slices (every element must be covered, global shapes must
/// match) and returns the state. Every saved tensor must be one the model has: with `group` (the
/// world; collective over it) among the tensors of any of its ranks, else among `tensors` — unless
/// `subset` (generation reads the weights only): then saved tensors the list does not name are skipped.
CheckpointState load_checkpoint(const fs::path& iteration_dir, const std::vector<CheckpointTensor>& tensors,
                                Communicator* group = nullptr, bool subset = false);

}  // namespace mwb
