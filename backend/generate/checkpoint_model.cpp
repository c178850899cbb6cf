#include "generate/checkpoint_model.h"

#include "checkpoint/checkpoint.h"
#include "config/config_io.h"
#include "mwb/kernels/error.h"

#include <nlohmann/json.hpp>

namespace mwb::generate {

GptDims generation_dims(const Config& config) {
    GptDims d = GptDims::from_config(config);
    d.micro_batch = 1;
    d.seq = 1;  // the model's own forward does not run; the decoder sizes its cache itself
    d.hidden_dropout = d.attention_dropout = 0;
    return d;
}

std::unique_ptr<CheckpointModel> load_checkpoint_model(const fs::path& load, std::optional<int64_t> step) {
    auto m = std::make_unique<CheckpointModel>();
    fs::path dir;
    if (step) {
        const std::string name = iteration_dir_name(*step);
        dir = fs::is_directory(load / name) ? load / name : load.parent_path() / name;
        MWB_CHECK(fs::is_regular_file(dir / "metadata.json"), "--ckpt-step {}: '{}' is not a checkpoint", *step,
                  dir.string());
    } else {
        dir = resolve_checkpoint_dir(load);
    }
    const CheckpointState state = read_checkpoint_state(dir);
    apply_json(m->config, state.config, (dir / "metadata.json").string());
    m->iteration = state.iteration;
    m->dir = dir;
    m->model =
        std::make_unique<GptModel>(generation_dims(m->config), RecomputePolicy{}, DType::F32, m->ctx, m->alloc, false);
    std::vector<CheckpointTensor> tensors;
    const ParamLayout& layout = m->model->layout();
    for (const ParamInfo& p : layout) {
        CheckpointTensor t;
        t.name = "param/" + p.name;
        t.global_shape = p.global_shape;
        t.shape = p.shape;
        t.dest = m->model->params().f32() + p.offset;
        t.padded_rows = role_is_vocabulary(p.role);
        tensors.push_back(std::move(t));
    }
    load_checkpoint(dir, tensors, nullptr, true);
    return m;
}

}  // namespace mwb::generate
