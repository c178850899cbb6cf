#pragma once
// The three indices of Megatron-LM's GPTDataset (megatron/core/datasets/gpt_dataset.py and
// helpers.cpp build_sample_idx), reproduced step for step so the same data, seed, seq_length and sample
// count give the same samples in the same order:
//   document index  the split's sequence ids repeated for every epoch, shuffled (the last epoch on its
//                   own when it is used for less than 80% of its samples)
//   sample index    (doc index position, token offset) where each sample starts; a sample is
//                   seq_length + 1 tokens and the next one starts on its last token
//   shuffle index   a permutation of the samples (again with a separate tail for a short last epoch)
// All shuffles draw from one numpy.random.RandomState(seed), in this order.
#include "backend/data/numpy_random.h"

#include <cstdint>
#include <span>
#include <vector>

namespace mwb::data {

/// Epochs needed for `num_samples` samples (Megatron's _get_num_epochs); one when num_samples <= 0.
int64_t gpt_num_epochs(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples);

/// Whether the last epoch is shuffled on its own, and how many samples come before it.
struct EpochPlan {
    int64_t num_epochs = 1;
    bool separate_final_epoch = false;
    int64_t samples_before_final_epoch = 0;
};
EpochPlan gpt_epoch_plan(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples);

/// Megatron's _build_document_index: `sequences` (ids) repeated num_epochs times, shuffled.
std::vector<int32_t> build_document_index(std::span<const int32_t> sequences, int64_t num_epochs, NumpyRandomState& rng,
                                          bool separate_final_epoch);

/// Megatron's build_sample_idx (dropping the last partial sample): (num_samples + 1) x 2 entries of
/// (position in document_index, token offset). `length_of(id)` is the token count of sequence `id`.
template <typename LengthOf>
std::vector<int64_t> build_sample_index(LengthOf&& length_of, std::span<const int32_t> document_index,
                                        int64_t seq_length, int64_t num_epochs, int64_t tokens_per_epoch);

/// Megatron's _build_shuffle_index: [0, num_samples) shuffled, then [num_samples, total_size) shuffled.
std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng);

// ---- template definition -------------------------------------------------------------------------

[[noreturn]] void sample_index_overrun(int64_t sample, int64_t num_samples);

template <typename LengthOf>
std::vector<int64_t> build_sample_index(LengthOf&& length_of, std::span<const int32_t> document_index,
                                        int64_t seq_length, int64_t num_epochs, int64_t tokens_per_epoch) {
    const int64_t num_samples = (num_epochs * tokens_per_epoch - 1) / seq_length;
    std::vector<int64_t> index(static_cast<std::size_t>(2 * (num_samples + 1)));
    int64_t doc = 0, offset = 0;  // position in document_index, token offset in that sequence
    index[0] = 0;
    index[1] = 0;
    for (int64_t sample = 1; sample <= num_samples; ++sample) {
        int64_t remaining = seq_length + 1;
        while (remaining != 0) {
            const int64_t length = length_of(document_index[static_cast<std::size_t>(doc)]) - offset;
            remaining -= length;
            if (remaining <= 0) {
                // The sample ends inside this sequence; the next starts on its last token (hence -1).
                offset += remaining + length - 1;
                remaining = 0;
            } else {
                if (doc == static_cast<int64_t>(document_index.size()) - 1) sample_index_overrun(sample, num_samples);
                ++doc;
                offset = 0;
            }
        }
        index[static_cast<std::size_t>(2 * sample)] = doc;
        index[static_cast<std::size_t>(2 * sample + 1)] = offset;
    }
    return index;
}

}  // namespace mwb::data
