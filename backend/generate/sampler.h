#pragma once
// Choosing the next token from a row of logits: greedy (argmax), or a draw from the softmax after
// temperature, top-k and top-p (nucleus) filtering, in that order (as Hugging Face's
// TemperatureLogitsWarper -> TopKLogitsWarper -> TopPLogitsWarper and Megatron-LM's sampling).
// Each row draws from its own seeded stream, so the same seed gives the same text whatever the batch.
#include <cstdint>
#include <vector>

namespace mwb::generate {

struct SamplingParams {
    bool greedy = false;     ///< argmax; also when temperature is 0
    double temperature = 1;  ///< logits are divided by it (> 0 unless greedy)
    int64_t top_k = 0;       ///< keep the k most likely tokens; 0 = all
    double top_p = 1;        ///< keep the smallest set of most likely tokens whose mass reaches top_p; 1 = all
    uint64_t seed = 1234;

    bool is_greedy() const { return greedy || temperature <= 0; }
};

/// The distribution a draw follows, in float64: (token, probability) pairs of the tokens that survive
/// the filters, most likely first, probabilities summing to 1. Only ids < vocab are candidates.
std::vector<std::pair<int32_t, double>> filtered_distribution(const float* logits, int64_t vocab,
                                                              const SamplingParams& p);

/// Argmax over logits[0, vocab) (the lowest id among equal maxima).
int32_t argmax(const float* logits, int64_t vocab);

/// One row's sampler: its own random stream (splitmix64-derived from the seed and the row).
class Sampler {
public:
    Sampler(const SamplingParams& p, int64_t row);
    int32_t next(const float* logits, int64_t vocab);
    /// A uniform draw in [0, 1) from the row's stream (53 random bits).
    double uniform();

private:
    SamplingParams p_;
    uint64_t state_;
};

}  // namespace mwb::generate
