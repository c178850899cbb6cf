#include "backend/data/mock_data.h"

#include "mwb/kernels/error.h"
#include "mwb/kernels/philox.h"

namespace mwb::data {

MockSampleSource::MockSampleSource(int64_t seq_length, int64_t vocab, uint64_t seed, uint64_t split)
    : seq_length_(seq_length), vocab_(vocab), seed_(seed), split_(split) {
    MWB_CHECK(vocab >= 2 && seq_length >= 1, "mock data needs vocab >= 2 and seq_length >= 1");
}

void MockSampleSource::read(int64_t index, std::span<int32_t> out) const {
    MWB_CHECK(static_cast<int64_t>(out.size()) == sample_tokens(), "mock data: sample buffer of {} tokens, need {}",
              out.size(), sample_tokens());
    const RngStream rng{seed_, (split_ << 48) ^ static_cast<uint64_t>(index)};
    for (std::size_t i = 0; i < out.size(); ++i) {
        const uint32_t draw = philox_draw(rng, i >> 2).v[i & 3];
        out[i] = static_cast<int32_t>((static_cast<uint64_t>(draw) * static_cast<uint64_t>(vocab_)) >> 32);
    }
}

std::string MockSampleSource::describe() const {
    return fmt::format("mock data: uniform token ids in [0, {}), seed {}", vocab_, seed_);
}

}  // namespace mwb::data
