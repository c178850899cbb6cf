#pragma once
// Evaluation: eval_iters global batches of the validation or test split, forward only, reported as an
// "eval" record, TensorBoard scalars and a line.
#include "backend/data/sample_source.h"
#include "backend/train/interval_stats.h"
#include "backend/train/progress.h"
#include "backend/train/train_step.h"

namespace mwb {

class RunDir;

class Evaluation {
public:
    Evaluation(const Config& cfg, TrainStep& step, IntervalLog& log, RunDir* dir, bool print_progress)
        : cfg_(cfg), step_(step), log_(log), dir_(dir), print_progress_(print_progress) {}

    /// Validation reads fresh samples each time (p.consumed_valid_samples, Megatron-LM's), the test
    /// split from its start, once.
    void run(const data::SampleSource& source, bool test, Progress& p);

private:
    const Config& cfg_;
    TrainStep& step_;
    IntervalLog& log_;
    RunDir* dir_;
    bool print_progress_;
};

}  // namespace mwb
