#pragma once
// The weights of any checkpoint, whatever tensor/pipeline layout saved them, as the model generation
// runs: the whole model on this process, or under mpirun this rank's part of a tensor/pipeline layout
// of its own. The checkpoint loader reshards every "param/" tensor to that layout (the optimizer's
// moments are not read).
#include "backend/config/config.h"
#include "backend/core/files.h"
#include "backend/core/memory.h"
#include "backend/generate/decoder.h"
#include "backend/model/gpt_model.h"

#include <memory>
#include <optional>

namespace mwb {
class ParallelContext;
}

namespace mwb::generate {

struct CheckpointModel {
    Config config;  ///< the configuration the checkpoint was saved with (its parallel sizes: generation's)
    int64_t iteration = 0;
    fs::path dir;   ///< the iteration folder read
    OpContext ctx;  // the CPU
    Allocator alloc{Device::CPU};
    std::unique_ptr<TensorParallel> tp;  ///< split layouts: this rank's tensor-parallel group
    std::unique_ptr<GptModel> model;     ///< no gradient arena
    DecoderGroups groups;                ///< what a Decoder of this model decodes with
};

/// `load`: a checkpoint directory (its `latest`, or iteration `step` when given) or an iteration folder.
/// `par`: generation's layout (its data-parallel size 1; nullptr: the whole model on this process);
/// every rank reads its own slices. Errors name the directory and what is missing.
std::unique_ptr<CheckpointModel> load_checkpoint_model(const fs::path& load, std::optional<int64_t> step = {},
                                                       ParallelContext* par = nullptr);

/// The checkpoint folder `load` names (`step`: iteration `step` instead of the latest); errors name it.
fs::path checkpoint_dir(const fs::path& load, std::optional<int64_t> step);

/// The whole-model dimensions generation uses for `config` (one sequence at a time).
GptDims generation_dims(const Config& config);

}  // namespace mwb::generate
