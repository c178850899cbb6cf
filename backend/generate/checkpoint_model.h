#pragma once
// The weights of any checkpoint, whatever tensor/pipeline layout saved them, as the whole model on
// this process: the checkpoint loader reshards every "param/" tensor to tensor-parallel size 1 (the
// optimizer's moments are not read).
#include "config/config.h"
#include "core/files.h"
#include "core/memory.h"
#include "model/gpt_model.h"

#include <memory>
#include <optional>

namespace mwb::generate {

struct CheckpointModel {
    Config config;  ///< the configuration the checkpoint was saved with
    int64_t iteration = 0;
    fs::path dir;   ///< the iteration folder read
    OpContext ctx;  // the CPU
    Allocator alloc{Device::CPU};
    std::unique_ptr<GptModel> model;  ///< no gradient arena
};

/// `load`: a checkpoint directory (its `latest`, or iteration `step` when given) or an iteration folder.
/// Errors name the directory and what is missing.
std::unique_ptr<CheckpointModel> load_checkpoint_model(const fs::path& load, std::optional<int64_t> step = {});

/// The whole-model dimensions generation uses for `config` (one process, one sequence at a time).
GptDims generation_dims(const Config& config);

}  // namespace mwb::generate
