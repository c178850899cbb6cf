#pragma once
// Megatron-LM's GPTDataset over one split of an indexed dataset: samples of seq_length + 1 tokens that
// run across sequence (document) boundaries, in the order of Megatron's document, sample and shuffle
// indices (gpt_indices.h). The indices are cached as .npy files named by a hash of everything they
// depend on, next to the data (Megatron's PREFIX/cache/GPTDataset_indices) or in data_cache_path;
// they are written atomically, checked when loaded, and rebuilt when stale or damaged.
#include "backend/core/files.h"
#include "backend/data/indexed_dataset.h"
#include "backend/data/sample_source.h"
#include "backend/data/split.h"

#include <memory>

namespace mwb::data {

struct GPTDatasetOptions {
    int64_t seq_length = 0;   ///< tokens per sample s (a sample holds s + 1)
    int64_t num_samples = 0;  ///< samples wanted; the dataset repeats epochs to reach it; <= 0: one epoch
    uint32_t seed = 1234;     ///< numpy RandomState seed of the shuffles (training.seed)
    Split split = Split::Train;
    std::string cache_dir;  ///< "" = PREFIX/cache/GPTDataset_indices, Megatron's default
};

class GPTDataset final : public SampleSource {
public:
    /// Builds (or loads) the indices of sequences [range.begin, range.end) of `data`.
    GPTDataset(std::shared_ptr<const IndexedDataset> data, SequenceRange range, GPTDatasetOptions options);

    int64_t sample_tokens() const override { return options_.seq_length + 1; }
    /// All samples of the built epochs (at least num_samples).
    int64_t size() const override { return static_cast<int64_t>(shuffle_index_.size()); }
    void read(int64_t index, std::span<int32_t> out) const override;
    std::string describe() const override;

    std::span<const int32_t> document_index() const { return document_index_; }
    /// (size() + 1) x 2: position in document_index and token offset where each sample starts.
    std::span<const int64_t> sample_index() const { return sample_index_; }
    std::span<const int64_t> shuffle_index() const { return shuffle_index_; }
    int64_t num_epochs() const { return epochs_; }
    int64_t tokens_per_epoch() const { return tokens_per_epoch_; }
    bool loaded_from_cache() const { return from_cache_; }
    /// Path prefix of the cache files ("" when nothing could be written); "-description.txt" etc. follow.
    const std::string& cache_prefix() const { return cache_prefix_; }

private:
    std::string description_json() const;
    bool try_load(const std::string& base, const std::string& description);
    void build();
    void save(const std::string& base, const std::string& description);

    std::shared_ptr<const IndexedDataset> data_;
    SequenceRange range_;
    GPTDatasetOptions options_;
    int64_t tokens_per_epoch_ = 0, epochs_ = 1;
    std::vector<int32_t> document_index_;
    std::vector<int64_t> sample_index_, shuffle_index_;
    bool from_cache_ = false;
    std::string cache_prefix_, cache_note_;
};

}  // namespace mwb::data
