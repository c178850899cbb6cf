#pragma once
// Several weighted sample sources mixed into one stream, as Megatron-LM's BlendedDataset does it: for
// each sample in turn, pick the source whose achieved share lags its weight the most
// (helpers.cpp build_blending_indices), so any prefix of the stream matches the weights closely and
// the order is deterministic. Sample k of source d is that source's k-th sample.
#include "backend/data/sample_source.h"

#include <memory>
#include <vector>

namespace mwb::data {

/// Megatron's build_blending_indices for normalised `weights`: which source, and which of its samples,
/// each of the `size` blended samples is.
void build_blending_indices(std::span<const double> weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);

class BlendedSampleSource final : public SampleSource {
public:
    /// `weights` (non-negative, not all zero) are normalised; `size` samples are blended.
    BlendedSampleSource(std::vector<std::unique_ptr<SampleSource>> sources, std::vector<double> weights, int64_t size);

    int64_t sample_tokens() const override { return sources_.front()->sample_tokens(); }
    int64_t size() const override { return static_cast<int64_t>(dataset_index_.size()); }
    void read(int64_t index, std::span<int32_t> out) const override;
    std::string describe() const override;

    /// The source blended sample `index` comes from.
    int dataset_of(int64_t index) const { return dataset_index_[static_cast<std::size_t>(wrap(index))]; }
    /// Which of its source's samples blended sample `index` is.
    int64_t sample_of(int64_t index) const { return dataset_sample_index_[static_cast<std::size_t>(wrap(index))]; }
    const std::vector<double>& weights() const { return weights_; }
    const SampleSource& source(int d) const { return *sources_[static_cast<std::size_t>(d)]; }

private:
    int64_t wrap(int64_t index) const { return ((index % size()) + size()) % size(); }
    std::vector<std::unique_ptr<SampleSource>> sources_;
    std::vector<double> weights_;
    std::vector<int16_t> dataset_index_;
    std::vector<int64_t> dataset_sample_index_;
};

}  // namespace mwb::data
