#include "backend/train/evaluation.h"

#include "backend/telemetry/run_dir.h"
#include "backend/train/records.h"
#include "backend/telemetry/tensorboard.h"
#include "backend/train/clock.h"

#include <spdlog/spdlog.h>

#include <cmath>

namespace mwb {

void Evaluation::run(const data::SampleSource& source, bool test, Progress& p) {
    const auto t0 = Clock::now();
    const int64_t gbs = cfg_.training.global_batch_size;
    const int64_t first = test ? 0 : p.consumed_valid_samples;
    double sum = 0;
    for (int64_t k = 0; k < cfg_.data.eval_iters; ++k) sum += step_.forward_loss(source, first + k * gbs);
    const double loss = sum / static_cast<double>(cfg_.data.eval_iters);
    const int64_t samples = cfg_.data.eval_iters * gbs;
    if (!test) p.consumed_valid_samples += samples;
    if (TensorBoardWriter* tb = log_.tensorboard()) {  // Megatron-LM writes the test split under the same tags
        tensorboard_scalar(*tb, "lm loss validation", loss, p);
        if (cfg_.logging.log_validation_ppl_to_tensorboard)
            tensorboard_scalar(*tb, "lm loss validation ppl", std::exp(std::min(20.0, loss)), p);
        tb->flush();
    }
    const int64_t seq = cfg_.model.seq_length;
    ipc::EvalRecord eval;
    eval.iteration = p.iteration;
    eval.consumed_tokens = p.consumed_samples * seq;
    eval.consumed_samples = p.consumed_samples;
    eval.split = test ? "test" : "valid";
    eval.consumed_valid_samples = p.consumed_valid_samples;
    eval.lm_loss = loss;
    eval.ppl = std::exp(std::min(loss, 700.0));
    eval.samples = samples;
    eval.time_s = seconds_since(t0);
    publish_record(dir_, eval);
    if (print_progress_ && dir_)
        spdlog::info("{} at iter {}: loss {:.4f} | ppl {:.3f} ({} samples, {:.1f} s)", test ? "test" : "validation",
                     p.iteration, loss, std::exp(std::min(loss, 700.0)), samples, seconds_since(t0));
}

}  // namespace mwb
