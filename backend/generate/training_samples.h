#pragma once
// Text samples during training (--sample-interval, docs/generation.md): rank 0 generates a completion
// for each prompt of --sample-prompts from its current weights — the model's own parameter arena,
// read in place through a Decoder (no copy) — and publishes one `sample` record per prompt
// (docs/protocol.md), which the run directory keeps in samples.jsonl. Runs whose model is split
// (tensor or pipeline parallel) are refused at validation; data-parallel rank 0 holds the whole model.
#include "config/config.h"
#include "generate/decoder.h"
#include "generate/generation.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mwb {
class GptModel;
namespace data {
class Tokenizer;
}
}  // namespace mwb

namespace mwb::generate {

/// read_prompts_file() for the field sample_prompts: throws ConfigError naming the file and line.
std::vector<std::string> read_sample_prompts(const std::string& path);

class TrainingSamples {
public:
    using Publish = std::function<void(std::string_view topic, nlohmann::json fields)>;
    /// Rank 0 of a run with sample_interval > 0. Without a prompts file (or on a GPU run) it publishes
    /// one warning event and then does nothing.
    TrainingSamples(const Config& config, const GptModel& model, Publish publish);
    ~TrainingSamples();

    /// After training iteration `iteration`: samples when the interval divides it, or at the last one.
    void after_iteration(int64_t iteration, int64_t consumed_tokens, bool last);

private:
    void sample(int64_t iteration, int64_t consumed_tokens);

    const Config& config_;
    Publish publish_;
    std::unique_ptr<data::Tokenizer> tokenizer_;
    std::unique_ptr<Decoder> decoder_;
    std::vector<std::string> prompts_;
    std::vector<std::vector<int32_t>> ids_;
    GenerateOptions options_;
    int64_t last_sampled_ = -1;
};

}  // namespace mwb::generate
