#pragma once
// Text samples during training (--sample-interval, docs/generation.md): the ranks of data-parallel
// replica 0 generate a completion for each prompt of --sample-prompts from their current weights —
// each rank's part of the model (its tensor-parallel slice of its pipeline stage) read in place from
// the model's parameter arena through a Decoder (no copy; on a GPU run from a host copy made at each
// sampling point), every rank taking the same steps — and
// rank 0 publishes one `sample` record per prompt (docs/protocol.md), which the run directory keeps in
// samples.jsonl. The other replicas wait at the next iteration's collectives.
#include "backend/config/config.h"
#include "backend/generate/decoder.h"
#include "backend/generate/generation.h"

#include <nlohmann/json.hpp>

#include <cstdint>
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
    /// Every rank of data-parallel replica 0 of a run with sample_interval > 0; `groups` its host
    /// tensor-parallel and pipeline groups. Without a prompts file it publishes one warning event and
    /// then does nothing. On a GPU run it decodes on the CPU from a host copy of the rank's weights. `publish` is called on every rank (the trainer's writes
    /// on rank 0 only).
    TrainingSamples(const Config& config, const GptModel& model, DecoderGroups groups, Publish publish);
    ~TrainingSamples();

    /// After training iteration `iteration`: samples when the interval divides it, or at the last one
    /// (collective over the groups).
    void after_iteration(int64_t iteration, int64_t consumed_tokens, bool last);

private:
    void sample(int64_t iteration, int64_t consumed_tokens);

    const Config& config_;
    Publish publish_;
    std::unique_ptr<data::Tokenizer> tokenizer_;
    std::unique_ptr<Decoder> decoder_;
    /// The model's weights when the decoder cannot read them in place: a GPU run's, or a CPU run's 16-bit
    /// working copy (host_params_ copies or widens them at each sample).
    TensorView model_params_;
    std::unique_ptr<float[]> host_params_;  ///< null on fp32 CPU runs, which read their weights in place
    /// A GPU run's 16-bit working copy as downloaded (2 bytes an element), widened into host_params_.
    std::unique_ptr<uint16_t[]> host_bits_;
    std::vector<std::string> prompts_;
    std::vector<std::vector<int32_t>> ids_;
    GenerateOptions options_;
    int64_t last_sampled_ = -1;
};

}  // namespace mwb::generate
