#pragma once
// Where training samples come from. A sample is seq_length + 1 token ids (inputs are the first
// seq_length, targets the last seq_length). Sources are random-access by sample index, so the
// position in the stream is one number (consumed samples) and a resumed run sees exactly the samples
// it would have seen.
#include <cstdint>
#include <span>
#include <string>

namespace mwb::data {

class SampleSource {
public:
    virtual ~SampleSource() = default;
    /// Tokens per sample (seq_length + 1).
    virtual int64_t sample_tokens() const = 0;
    /// Number of distinct samples; index i reads sample i % size().
    virtual int64_t size() const = 0;
    /// Writes sample `index` into `out` (sample_tokens() ids, each below the tokenizer's vocabulary).
    virtual void read(int64_t index, std::span<int32_t> out) const = 0;
    /// One line for logs, e.g. "mock data: 50258 ids, seed 1234".
    virtual std::string describe() const = 0;
};

}  // namespace mwb::data
