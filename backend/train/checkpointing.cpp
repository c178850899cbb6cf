#include "backend/train/checkpointing.h"

#include "backend/config/config_io.h"
#include "backend/config/null_vocabulary.h"
#include "backend/config/validate.h"
#include "backend/core/files.h"
#include "mwb/kernels/error.h"
#include "backend/telemetry/run_dir.h"
#include "backend/train/records.h"
#include "backend/train/clock.h"

#include <spdlog/spdlog.h>

#include <cstdio>

namespace mwb {

void Checkpointing::publish(std::string_view topic, nlohmann::json fields) {
    if (dir_) dir_->publish(topic, std::move(fields));
}

/// Where checkpoints go: --save, else <run_dir>/checkpoints when saving at intervals or on request.
/// Every rank must agree: the run directory's path is broadcast once from rank 0.
fs::path Checkpointing::save_dir(bool requested) {
    if (!o_.cfg.checkpoint.save.empty()) return o_.cfg.checkpoint.save;
    if (o_.cfg.checkpoint.save_interval > 0 || requested) return run_dir_path() / "checkpoints";
    return {};
}

fs::path Checkpointing::run_dir_path() {
    if (run_dir_path_.empty()) {
        char path[4096] = {0};
        if (leader()) std::snprintf(path, sizeof path, "%s", dir_->path().c_str());
        o_.par.world().broadcast(path, sizeof path, 0);
        run_dir_path_ = path;
    }
    return run_dir_path_;
}

bool Checkpointing::should_save(bool last, const Progress& p) {
    if (save_dir().empty()) return false;
    return last || (o_.cfg.checkpoint.save_interval > 0 && p.iteration % o_.cfg.checkpoint.save_interval == 0);
}

/// The three fp32 arenas of the checkpoint in host memory, each as large as the whole parameter
/// arena: the optimizer's own arenas on a CPU without the distributed optimizer, otherwise host
/// copies. For a save (`gather`), this rank's shard (downloaded from the GPU) lands at its place
/// and the data-parallel group's other shards around it; a load fills them from the files and
/// copies this rank's shard back (copied).
struct Checkpointing::FullState {
    Buffer master, exp_avg, exp_avg_sq;
    TensorView views[3];
    bool copied = false;
};

Checkpointing::FullState Checkpointing::full_state(bool gather) {
    FullState s;
    const TensorView shards[3] = {o_.optimizer->master(), o_.optimizer->exp_avg(), o_.optimizer->exp_avg_sq()};
    const ArenaShard& shard = o_.optimizer->shard();
    const int64_t arena = o_.model.params().numel();
    if (o_.ctx.device == Device::CPU && shard.size() == arena) {
        for (int i = 0; i < 3; ++i) s.views[i] = shards[i];
        return s;
    }
    Buffer* bufs[3] = {&s.master, &s.exp_avg, &s.exp_avg_sq};
    for (int i = 0; i < 3; ++i) {
        *bufs[i] = Buffer(o_.host_allocator(), MemCategory::Workspace, arena);
        s.views[i] = bufs[i]->view();
        if (!gather) continue;
        const TensorView mine = slice_1d(s.views[i], shard.begin, shard.size());
        ops::copy(o_.ctx, mine, shards[i]);
        // In place: each rank's block already sits at its offset (the host group: no GPU copy).
        if (shard.size() != arena) o_.par.host_dp().all_gather(mine.f32(), s.views[i].f32(), shard.size());
    }
    s.copied = true;
    return s;
}

std::vector<CheckpointTensor> Checkpointing::checkpoint_tensors(const FullState& s) {
    std::vector<CheckpointTensor> t;
    const ParamLayout& layout = o_.model.layout();
    const char* prefixes[3] = {"param/", "exp_avg/", "exp_avg_sq/"};
    for (int k = 0; k < 3; ++k)
        for (std::size_t i = 0; i < layout.size(); ++i) {
            const ParamInfo& p = layout[i];
            for (CheckpointTensor& c : parameter_slices(layout, i, prefixes[k], layout.view(s.views[k], i).f32())) {
                c.save = !p.tied_copy && (p.split_dim >= 0 || o_.par.coord().tp == 0) &&
                         (k == 0 || !o_.cfg.checkpoint.no_save_optim);
                t.push_back(std::move(c));
            }
        }
    return t;
}

fs::path Checkpointing::save(const Progress& p, bool requested) {
    const auto t0 = Clock::now();
    CheckpointState s;
    s.iteration = p.iteration;
    s.consumed_samples = p.consumed_samples;
    s.optimizer_steps = o_.optimizer->steps();
    s.skipped_iterations = p.skipped;
    s.scheduler_samples = p.scheduled_samples;
    s.consumed_valid_samples = p.consumed_valid_samples;
    s.loss_scaler = o_.scaler.state();
    s.config = to_json(o_.cfg);
    FullState full = full_state(true);
    const fs::path where =
        save_checkpoint(save_dir(requested), s, checkpoint_tensors(full), o_.par, o_.par.coord().dp == 0);
    saved_iteration_ = p.iteration;
    publish_event(dir_, ipc::CheckpointSavedEvent{p.iteration, where.string(), seconds_since(t0)});
    if (print_progress_ && leader())
        spdlog::info("saved checkpoint {} ({:.2f} s)", where.string(), seconds_since(t0));
    return where;
}

/// Resumes from --load; a directory without a checkpoint yet starts the run fresh (Megatron-LM's
/// behaviour: one job script serves the first submission and every requeue).
void Checkpointing::load(const fs::path& from, Progress& p) {
    const std::optional<fs::path> found = find_checkpoint(from);
    if (!found) {
        publish_event(dir_, ipc::CheckpointNotFoundEvent{from.string()});
        if (print_progress_ && leader())
            spdlog::info("no checkpoint in {} yet: starting from iteration 0", from.string());
        return;
    }
    const fs::path& dir = *found;
    check_compatible(read_checkpoint_state(dir).config, dir);  // before any tensor is read
    FullState full = full_state(false);
    // A checkpoint saved with no_save_optim holds the weights only: the optimizer then starts over.
    // (A metadata.json that does not parse is load_checkpoint's to report.)
    const nlohmann::json meta = nlohmann::json::parse(read_file(dir / "metadata.json", 256 << 20), nullptr, false);
    bool has_optimizer = !meta.is_object() || !meta.contains("tensors") || !meta["tensors"].is_array();
    if (!has_optimizer)
        for (const auto& t : meta["tensors"])
            has_optimizer |= t.is_object() && t.value("name", "").starts_with("exp_avg/");
    std::vector<CheckpointTensor> tensors = checkpoint_tensors(full);
    if (!has_optimizer)
        std::erase_if(tensors, [](const CheckpointTensor& t) { return !t.name.starts_with("param/"); });
    const CheckpointState s = load_checkpoint(dir, tensors, &o_.par.world());
    if (full.copied) {
        const ArenaShard& shard = o_.optimizer->shard();
        const TensorView shards[3] = {o_.optimizer->master(), o_.optimizer->exp_avg(), o_.optimizer->exp_avg_sq()};
        for (int k = 0; k < 3; ++k) ops::copy(o_.ctx, shards[k], slice_1d(full.views[k], shard.begin, shard.size()));
    }
    o_.optimizer->set_steps(s.optimizer_steps);
    o_.optimizer->sync_params_from_master();
    const auto& l = o_.cfg.checkpoint;
    if (!l.finetune && !l.no_load_optim && has_optimizer) o_.scaler.load_state(s.loss_scaler);
    if (l.finetune || l.no_load_optim ||
        !has_optimizer) {  // Megatron-LM: optimizer, loss scale and scheduler start over
        for (const TensorView v : {o_.optimizer->exp_avg(), o_.optimizer->exp_avg_sq()}) ops::fill(o_.ctx, v, 0.0f);
        o_.optimizer->set_steps(0);
    }
    if (!l.finetune) {
        p.iteration = s.iteration;
        p.consumed_samples = s.consumed_samples;
        p.skipped = s.skipped_iterations;
    }
    // The scheduler's position and the validation samples read are in the checkpoint (as Megatron-LM
    // saves its opt_param_scheduler and consumed_valid_samples), so a resumed run repeats the
    // uninterrupted one exactly, batch ramp and skipped steps included. A checkpoint from before
    // they were saved: the scheduler's count follows from the successful steps (exact for a constant
    // batch), validation from eval_iters batches per evaluation (Megatron-LM's own fallback).
    const int64_t gbs = o_.cfg.training.global_batch_size;
    const bool constant_batch =
        o_.cfg.training.rampup_batch_size.empty() && o_.cfg.training.step_batch_size_schedule.empty();
    if (s.scheduler_samples >= 0)
        p.scheduled_samples = s.scheduler_samples;
    else
        p.scheduled_samples =
            constant_batch ? o_.optimizer->steps() * gbs
                           : p.consumed_samples -
                                 p.skipped * global_batch_size_at(o_.cfg, p.consumed_samples);
    if (l.finetune || l.no_load_optim || !has_optimizer) p.scheduled_samples = 0;
    if (l.finetune)
        p.consumed_valid_samples = 0;
    else if (s.consumed_valid_samples >= 0)
        p.consumed_valid_samples = s.consumed_valid_samples;
    else if (o_.cfg.data.eval_interval > 0)
        p.consumed_valid_samples =
            p.iteration / o_.cfg.data.eval_interval * o_.cfg.data.eval_iters * gbs;
    publish_event(dir_, ipc::CheckpointLoadedEvent{p.iteration, dir.string()});
    if (print_progress_ && leader())
        spdlog::info("resumed from {} at iteration {}", dir.string(), p.iteration);
}

/// A checkpoint of another model is refused by name, before any surprise: the architecture's keys
/// and the vocabulary (padded rows may differ with the tensor-parallel size, the ids may not).
void Checkpointing::check_compatible(const nlohmann::json& saved, const fs::path& dir) const {
    const nlohmann::json now = to_json(o_.cfg);
    for (const char* key :
         {"num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "max_position_embeddings",
          "normalization", "untie_embeddings_and_output_weights", "num_query_groups", "kv_channels", "swiglu",
          "add_bias_linear", "add_qkv_bias", "position_embedding_type", "rotary_base", "rotary_percent",
          "rotary_interleaved", "use_rope_scaling", "rope_scaling_factor"}) {
        if (!saved.contains(key)) continue;
        MWB_CHECK(saved[key] == now[key], "checkpoint '{}' was saved by a model with {} {}, this run has {}",
                  dir.string(), key, saved[key].dump(), now[key].dump());
    }
    if (saved.contains("vocab_size") && saved["vocab_size"].is_number_integer()) {
        const bool legacy_null = saved_legacy_null_vocabulary(saved);
        const int64_t saved_vocab = saved["vocab_size"].get<int64_t>() + (legacy_null ? 1 : 0);
        MWB_CHECK(saved_vocab == model_vocab_size(o_.cfg),
                  "checkpoint '{}' was saved by a model with a vocabulary of {} ids, this run has {} (vocab_size, "
                  "tokenizer_type{})",
                  dir.string(), saved_vocab, model_vocab_size(o_.cfg),
                  legacy_null ? fmt::format("; it has the NullTokenizer's legacy vocabulary: pass "
                                            "--null-tokenizer-legacy-eod, or --vocab-size {}",
                                            saved_vocab)
                              : "");
    }
}

}  // namespace mwb
