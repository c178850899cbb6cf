#pragma once
// The embedded default: one token per byte (ids 0..255) plus the end-of-document id 256. Needs no
// files, encodes any byte string, and keeps the vocabulary (and so the demo model) tiny.
#include "backend/data/tokenizer.h"

namespace mwb::data {

class ByteTokenizer final : public Tokenizer {
public:
    static constexpr int32_t kEod = 256;
    int64_t vocab_size() const override { return 257; }
    int32_t eod() const override { return kEod; }
    void encode(std::string_view text, std::vector<int32_t>& out) const override;
    /// The EOD id decodes to nothing: it marks a boundary, not text.
    void decode(std::span<const int32_t> ids, std::string& out) const override;
    std::string name() const override { return "ByteTokenizer"; }
    std::string fingerprint() const override { return "ByteTokenizer"; }
    using Tokenizer::decode;
    using Tokenizer::encode;
};

}  // namespace mwb::data
