#include "backend/generate/checkpoint_model.h"

#include "backend/checkpoint/checkpoint.h"
#include "backend/config/config_io.h"
#include "mwb/kernels/error.h"
#include "backend/parallel/parallel_context.h"

#include <nlohmann/json.hpp>

namespace mwb::generate {

GptDims generation_dims(const Config& config) {
    GptDims d = GptDims::from_config(config);
    d.micro_batch = 1;
    d.seq = 1;  // the model's own forward does not run; the decoder sizes its cache itself
    d.hidden_dropout = d.attention_dropout = 0;
    return d;
}

fs::path checkpoint_dir(const fs::path& load, std::optional<int64_t> step) {
    if (!step) return resolve_checkpoint_dir(load);
    const std::string name = iteration_dir_name(*step);
    const fs::path dir = fs::is_directory(load / name) ? load / name : load.parent_path() / name;
    MWB_CHECK(fs::is_regular_file(dir / "metadata.json"), "--ckpt-step {}: '{}' is not a checkpoint", *step,
              dir.string());
    return dir;
}

std::unique_ptr<CheckpointModel> load_checkpoint_model(const fs::path& load, std::optional<int64_t> step,
                                                       ParallelContext* par) {
    auto m = std::make_unique<CheckpointModel>();
    const fs::path dir = checkpoint_dir(load, step);
    const CheckpointState state = read_checkpoint_state(dir);
    apply_json(m->config, state.config, (dir / "metadata.json").string());
    m->iteration = state.iteration;
    m->dir = dir;
    if (par && par->tp_size() * par->pp_size() > 1) {
        MWB_CHECK(par->dp_size() == 1, "generation: {} ranks for tensor-parallel {} x pipeline {}", par->world_size(),
                  par->tp_size(), par->pp_size());
        // The saved padded vocabulary when the ranks divide it (the model then is the one a single
        // process loads), else the padding of this layout.
        const int64_t saved_vocab = generation_dims(m->config).vocab;
        ParallelConfig& p = m->config.parallel;
        p.tensor_model_parallel_size = par->tp_size();
        p.pipeline_model_parallel_size = par->pp_size();
        p.num_layers_per_virtual_pipeline_stage = 0;
        p.sequence_parallel = false;
        p.use_distributed_optimizer = false;
        GptDims d = generation_dims(m->config);
        if (saved_vocab % par->tp_size() == 0) d.vocab = saved_vocab;
        MWB_CHECK(d.heads % par->tp_size() == 0 && d.kv_groups() % par->tp_size() == 0 && d.ffn % par->tp_size() == 0,
                  "--tensor-model-parallel-size {} must divide the model's {} attention heads, {} key/value groups "
                  "and MLP width {}",
                  par->tp_size(), d.heads, d.kv_groups(), d.ffn);
        MWB_CHECK(d.layers % par->pp_size() == 0, "--pipeline-model-parallel-size {} must divide the model's {} layers",
                  par->pp_size(), d.layers);
        m->tp = std::make_unique<TensorParallel>(par->host_tp(), par->host_tp(), false, m->ctx);
        m->model = std::make_unique<GptModel>(d, ModelPartition::for_stage(d, par->pp_size(), par->coord().pp, 0),
                                              *m->tp, RecomputePolicy{}, DType::F32, m->ctx, m->alloc, 1, false);
        m->groups = {&par->host_tp(), &par->host_pp()};
    } else {
        m->model = std::make_unique<GptModel>(generation_dims(m->config), RecomputePolicy{}, DType::F32, m->ctx,
                                              m->alloc, false);
    }
    std::vector<CheckpointTensor> tensors;
    const ParamLayout& layout = m->model->layout();
    for (std::size_t i = 0; i < layout.size(); ++i)
        for (CheckpointTensor& t : parameter_slices(layout, i, "param/", m->model->params().f32() + layout[i].offset))
            tensors.push_back(std::move(t));
    load_checkpoint(dir, tensors, nullptr, true);
    return m;
}

}  // namespace mwb::generate
