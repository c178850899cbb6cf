#pragma once
// Megatron-LM's --mock-data: random token ids from a seeded counter-based RNG. Needs no files, so any
// model shape can be trained and timed without a corpus.
#include "backend/data/sample_source.h"

namespace mwb::data {

class MockSampleSource final : public SampleSource {
public:
    /// `split` separates the train and validation streams.
    MockSampleSource(int64_t seq_length, int64_t vocab, uint64_t seed, uint64_t split);
    int64_t sample_tokens() const override { return seq_length_ + 1; }
    int64_t size() const override { return int64_t{1} << 40; }
    void read(int64_t index, std::span<int32_t> out) const override;
    std::string describe() const override;

private:
    int64_t seq_length_, vocab_;
    uint64_t seed_, split_;
};

}  // namespace mwb::data
