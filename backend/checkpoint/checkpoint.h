#pragma once
// Checkpoints: what a run needs to continue bit-identically (weights, Adam moments, step counts, loss
// scaler, data position, iteration), written as
//   <dir>/iter_NNNNNNN/metadata.json        layout, tensors (name, shape, file, offset), checksums
//   <dir>/iter_NNNNNNN/rank_RRRRR.bin       this rank's tensors, fp32, 64-byte aligned
//   <dir>/latest                            "iter_NNNNNNN", written last
// The iteration folder is assembled under a temporary name and renamed into place, so a crash never
// leaves a half-written checkpoint behind `latest`. Every file is checksummed (XXH3-64) and verified
// on load; mismatches are errors naming the file. Format: docs/checkpoint.md.
#include "core/files.h"
#include "mwb/kernels/tensor.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mwb {

struct ParamLayout;

/// One named tensor of the checkpoint.
struct CheckpointTensor {
    std::string name;             ///< e.g. "param/decoder.final_layernorm.weight", "exp_avg/..."
    std::vector<int64_t> shape;
    const float* data = nullptr;  ///< saving: where the values are
    float* dest = nullptr;        ///< loading: where they go
};

/// The scalar state saved beside the tensors.
struct CheckpointState {
    int64_t iteration = 0;
    int64_t consumed_samples = 0;
    int64_t optimizer_steps = 0;
    int64_t skipped_iterations = 0;
    nlohmann::json loss_scaler;
    nlohmann::json config;  ///< the resolved configuration of the run that saved it
};

/// "iter_0000100"
std::string iteration_dir_name(int64_t iteration);

/// Writes the checkpoint of `iteration` under `dir` (replacing one of the same iteration) and then
/// the `latest` marker. Returns the iteration folder.
fs::path save_checkpoint(const fs::path& dir, const CheckpointState& state, const std::vector<CheckpointTensor>& tensors);

/// Resolves a --load argument: a checkpoint directory (follows `latest`) or one iteration folder.
fs::path resolve_checkpoint_dir(const fs::path& load);

/// Reads metadata.json of an iteration folder, verifies every file's size and checksum, fills each
/// tensor's `dest` (every tensor must be present with the same shape) and returns the state.
CheckpointState load_checkpoint(const fs::path& iteration_dir, const std::vector<CheckpointTensor>& tensors);

}  // namespace mwb
