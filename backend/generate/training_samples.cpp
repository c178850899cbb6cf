#include "backend/generate/training_samples.h"

#include "backend/config/config_io.h"
#include "backend/data/tokenizer.h"
#include "backend/model/gpt_model.h"
#include "mwb/ipc/schema.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/error.h"

#include <fmt/format.h>

namespace mwb::generate {

std::vector<std::string> read_sample_prompts(const std::string& path) {
    try {
        return read_prompts_file(path, "sample_prompts");
    } catch (const ConfigError&) {
        throw;
    } catch (const Error& e) {
        throw ConfigError({{"sample_prompts", e.what()}}, "sample_prompts");
    }
}

TrainingSamples::TrainingSamples(const Config& config, const GptModel& model, DecoderGroups groups, Publish publish)
    : config_(config), publish_(std::move(publish)) {
    const SamplingConfig& l = config.sampling;
    const auto skip = [&](const std::string& why) {
        publish_(ipc::kEventTopic, ipc::event_json(ipc::SamplingSkippedEvent{why}));
    };
    if (l.sample_prompts.empty()) {
        skip("sample_interval is set but sample_prompts names no prompts file");
        return;
    }
    TensorView weights = model.params();
    if (weights.device != Device::CPU || weights.dtype != DType::F32) {
        // A GPU run decodes on the CPU from a host copy of this rank's fp32 weights, refreshed at each
        // sampling point: the GPU keeps only the training's memory, and every layout works as on CPU runs.
        // A 16-bit working copy (a CPU run's, or a GPU run's downloaded as its 2-byte elements) is
        // widened into such a copy (exact: the same values).
        model_params_ = weights;
        // not value-initialised: the pages are first touched by the first sampling point's copy
        host_params_.reset(new float[static_cast<std::size_t>(weights.numel())]);
        if (weights.device != Device::CPU && weights.dtype != DType::F32)
            host_bits_.reset(new uint16_t[static_cast<std::size_t>(weights.numel())]);
        weights.data = host_params_.get();
        weights.dtype = DType::F32;
        weights.device = Device::CPU;
    }
    prompts_ = read_sample_prompts(l.sample_prompts);
    tokenizer_ = data::make_tokenizer(config.data, config.model);
    int64_t longest = 0;
    for (std::size_t i = 0; i < prompts_.size(); ++i) {
        std::vector<int32_t> ids;
        if (tokenizer_->bos() >= 0) ids.push_back(tokenizer_->bos());
        try {
            tokenizer_->encode(prompts_[i], ids);
        } catch (const Error& e) {  // e.g. words for the NullTokenizer, which reads space-separated ids
            throw ConfigError(
                {{"sample_prompts", fmt::format("{}: prompt {} cannot be tokenized by the run's {}: {}",
                                                l.sample_prompts, i + 1, config.data.tokenizer_type, e.what())}},
                "sample_prompts");
        }
        if (ids.empty()) ids.push_back(tokenizer_->eod());  // an all-whitespace prompt of a tokenizer that drops it
        longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
        ids_.push_back(std::move(ids));
    }
    const GptDims& d = model.dims();
    const int64_t context = d.max_positions > 0 ? d.max_positions : d.seq;
    // Prompts that fill the context keep their last context - 1 tokens (a sample needs room for one token).
    for (auto& ids : ids_)
        if (static_cast<int64_t>(ids.size()) >= context) ids.erase(ids.begin(), ids.end() - (context - 1));
    const int64_t max_len = std::min(context, std::min(longest, context - 1) + l.sample_max_new_tokens);
    decoder_ = std::make_unique<Decoder>(d, model.partition(), model.layout(), weights, groups,
                                         static_cast<int64_t>(ids_.size()), max_len);
    options_.sampling = {l.sample_temperature <= 0, l.sample_temperature, l.sample_top_k, l.sample_top_p,
                         static_cast<uint64_t>(l.sample_seed)};
    options_.max_new_tokens = l.sample_max_new_tokens;
    options_.eos = tokenizer_->eod();
    options_.vocab = tokenizer_->vocab_size();
}

TrainingSamples::~TrainingSamples() = default;

void TrainingSamples::after_iteration(int64_t iteration, int64_t consumed_tokens, bool last) {
    const int64_t n = config_.sampling.sample_interval;
    if (!decoder_ || n <= 0 || iteration == last_sampled_) return;
    if (iteration % n == 0 || last) sample(iteration, consumed_tokens);
}

void TrainingSamples::sample(int64_t iteration, int64_t consumed_tokens) {
    last_sampled_ = iteration;
    if (host_params_) {  // this iteration's weights (after the update)
        const int64_t n = model_params_.numel();
        TensorView host = model_params_;  // the working copy in host memory: in place on a CPU
        if (model_params_.device != Device::CPU) {
            host = make_view(host_bits_ ? static_cast<void*>(host_bits_.get()) : static_cast<void*>(host_params_.get()),
                             model_params_.dtype, {n});
            device::synchronize();
            device::copy_to_host(host.data, model_params_.data, n * static_cast<int64_t>(dtype_size(host.dtype)));
        }
        OpContext cpu;
        if (host.data != host_params_.get()) ops::copy(cpu, make_view(host_params_.get(), DType::F32, {n}), host);
    }
    const auto out = complete(*decoder_, ids_, options_);
    const SamplingParams& s = options_.sampling;
    for (std::size_t i = 0; i < out.size(); ++i) {
        ipc::SampleMessage r;
        r.iteration = iteration;
        r.consumed_tokens = consumed_tokens;
        r.prompt_index = static_cast<int64_t>(i);
        r.prompt = prompts_[i];
        r.completion = valid_utf8(tokenizer_->decode(out[i].tokens));
        r.prompt_tokens = static_cast<int64_t>(ids_[i].size());
        r.completion_tokens = static_cast<int64_t>(out[i].tokens.size());
        r.finish_reason = finish_reason_name(out[i].finish);
        r.greedy = s.is_greedy();
        r.temperature = s.temperature;
        r.top_k = s.top_k;
        r.top_p = s.top_p;
        r.seed = s.seed;
        r.time_s = out[i].seconds;
        publish_(ipc::SampleMessage::kTopic, nlohmann::json(r));
    }
}

}  // namespace mwb::generate
