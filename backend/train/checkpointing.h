#pragma once
// A rank's part of checkpoints: where and when to save, the optimizer's arenas gathered to whole
// tensors in host memory, the tensors each rank writes or reads, and a resume from --load.
#include "backend/checkpoint/checkpoint.h"
#include "backend/train/progress.h"
#include "backend/train/run_objects.h"

#include <vector>

namespace mwb {

class RunDir;

class Checkpointing {
public:
    /// `dir`: rank 0's run directory, null on the other ranks.
    Checkpointing(RunObjects& objects, RunDir* dir, bool print_progress)
        : o_(objects), dir_(dir), print_progress_(print_progress) {}

    /// Whether to save after this iteration: the last, or every save_interval, when saving at all.
    bool should_save(bool last, const Progress& p);
    /// Saves the state at p.iteration (`requested`: a checkpoint asked for by a stop or a control
    /// request, saved into the run directory without --save); returns its directory.
    fs::path save(const Progress& p, bool requested = false);
    /// Whether the state at p.iteration is saved already.
    bool saved(const Progress& p) const { return saved_iteration_ == p.iteration; }
    /// Resumes from --load; a directory without a checkpoint yet starts the run fresh (Megatron-LM's
    /// behaviour: one job script serves the first submission and every requeue).
    void load(const fs::path& from, Progress& p);

private:
    struct FullState;
    fs::path save_dir(bool requested = false);
    fs::path run_dir_path();
    FullState full_state(bool gather);
    std::vector<CheckpointTensor> checkpoint_tensors(const FullState& s);
    void check_compatible(const nlohmann::json& saved, const fs::path& dir) const;
    bool leader() const { return o_.par.world_rank() == 0; }
    void publish(std::string_view topic, nlohmann::json fields);

    RunObjects& o_;
    RunDir* dir_;
    bool print_progress_;
    fs::path run_dir_path_;
    int64_t saved_iteration_ = -1;
};

}  // namespace mwb
