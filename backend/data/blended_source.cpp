#include "backend/data/blended_source.h"

#include "mwb/kernels/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mwb::data {

void build_blending_indices(std::span<const double> weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index) {
    dataset_index.resize(static_cast<std::size_t>(size));
    dataset_sample_index.resize(static_cast<std::size_t>(size));
    std::vector<int64_t> taken(weights.size(), 0);
    for (int64_t s = 0; s < size; ++s) {
        const double at = std::max(static_cast<double>(s), 1.0);
        std::size_t best = 0;
        double best_error = weights[0] * at - static_cast<double>(taken[0]);
        for (std::size_t d = 1; d < weights.size(); ++d) {
            const double error = weights[d] * at - static_cast<double>(taken[d]);
            if (error > best_error) best_error = error, best = d;
        }
        dataset_index[static_cast<std::size_t>(s)] = static_cast<int16_t>(best);
        dataset_sample_index[static_cast<std::size_t>(s)] = taken[best]++;
    }
}

BlendedSampleSource::BlendedSampleSource(std::vector<std::unique_ptr<SampleSource>> sources,
                                         std::vector<double> weights, int64_t size)
    : sources_(std::move(sources)), weights_(std::move(weights)) {
    MWB_CHECK(!sources_.empty() && sources_.size() == weights_.size() && sources_.size() <= 32767,
              "blend: {} sources with {} weights (need the same number, 1 to 32767)", sources_.size(), weights_.size());
    MWB_CHECK(size > 0, "blend: needs a positive number of samples (got {})", size);
    double sum = 0;
    for (std::size_t d = 0; d < sources_.size(); ++d) {
        MWB_CHECK(sources_[d], "blend: source {} is missing", d);
        MWB_CHECK(std::isfinite(weights_[d]), "blend: weight {} of dataset {} is not a finite number", weights_[d], d);
        MWB_CHECK(weights_[d] >= 0, "blend: weight {} of dataset {} is negative", weights_[d], d);
        MWB_CHECK(sources_[d]->sample_tokens() == sources_[0]->sample_tokens(),
                  "blend: dataset {} has samples of {} tokens, dataset 0 of {}", d, sources_[d]->sample_tokens(),
                  sources_[0]->sample_tokens());
        sum += weights_[d];
    }
    MWB_CHECK(sum > 0, "blend: the weights sum to zero");
    for (double& w : weights_) w /= sum;
    build_blending_indices(weights_, size, dataset_index_, dataset_sample_index_);
}

void BlendedSampleSource::read(int64_t index, std::span<int32_t> out) const {
    const auto i = static_cast<std::size_t>(wrap(index));
    sources_[static_cast<std::size_t>(dataset_index_[i])]->read(dataset_sample_index_[i], out);
}

std::string BlendedSampleSource::describe() const {
    std::string s = fmt::format("blend of {} datasets, {} samples:", sources_.size(), size());
    for (std::size_t d = 0; d < sources_.size(); ++d)
        s += fmt::format(" [{:.4g}] {}{}", weights_[d], sources_[d]->describe(), d + 1 < sources_.size() ? ";" : "");
    return s;
}

}  // namespace mwb::data
