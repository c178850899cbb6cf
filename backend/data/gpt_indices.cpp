#include "backend/data/gpt_indices.h"

#include "mwb/kernels/error.h"

#include <numeric>

namespace mwb::data {

int64_t gpt_num_epochs(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples) {
    MWB_CHECK(tokens_per_epoch > 0, "a dataset split without tokens has no samples");
    if (num_samples <= 0) return 1;
    const int64_t requested = num_samples * seq_length + 1;  // + the extra token of the last sample
    return std::max<int64_t>(1, (requested + tokens_per_epoch - 1) / tokens_per_epoch);
}

EpochPlan gpt_epoch_plan(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples) {
    EpochPlan plan;
    plan.num_epochs = gpt_num_epochs(tokens_per_epoch, seq_length, num_samples);
    if (plan.num_epochs == 1) return plan;
    const int64_t before = ((plan.num_epochs - 1) * tokens_per_epoch - 1) / seq_length;
    const int64_t from_final = num_samples - before;
    const int64_t per_epoch = (tokens_per_epoch - 1) / seq_length;
    MWB_CHECK(from_final >= 0 && from_final <= per_epoch + 1, "epoch plan: {} samples from the final epoch of {}",
              from_final, per_epoch);
    // Megatron's threshold: a last epoch used for under 80% of its samples is shuffled separately, so
    // the samples actually trained on are spread over all documents of the earlier epochs.
    plan.separate_final_epoch = from_final < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
    plan.samples_before_final_epoch = before;
    return plan;
}

std::vector<int32_t> build_document_index(std::span<const int32_t> sequences, int64_t num_epochs, NumpyRandomState& rng,
                                          bool separate_final_epoch) {
    if (!separate_final_epoch || num_epochs == 1) {
        std::vector<int32_t> index;
        index.reserve(sequences.size() * static_cast<std::size_t>(num_epochs));
        for (int64_t e = 0; e < num_epochs; ++e) index.insert(index.end(), sequences.begin(), sequences.end());
        rng.shuffle(std::span<int32_t>(index));
        return index;
    }
    std::vector<int32_t> index = build_document_index(sequences, num_epochs - 1, rng, false);
    const std::vector<int32_t> last = build_document_index(sequences, 1, rng, false);
    index.insert(index.end(), last.begin(), last.end());
    return index;
}

void sample_index_overrun(int64_t sample, int64_t num_samples) {
    MWB_FAIL("sample index: documents ran out at sample {} of {} (inconsistent token count)", sample, num_samples);
}

std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng) {
    std::vector<int64_t> index(static_cast<std::size_t>(total_size));
    std::iota(index.begin(), index.end(), int64_t{0});
    rng.shuffle(std::span<int64_t>(index.data(), static_cast<std::size_t>(num_samples)));
    if (num_samples < total_size)
        rng.shuffle(std::span<int64_t>(index.data() + num_samples, static_cast<std::size_t>(total_size - num_samples)));
    return index;
}

}  // namespace mwb::data
