#pragma once
// Megatron-LM's NullTokenizer: the text already is token ids, written as decimal integers separated
// by spaces. The vocabulary is model.vocab_size ids plus the end-of-document id vocab_size.
#include "data/tokenizer.h"

namespace mwb::data {

class NullTokenizer final : public Tokenizer {
public:
    explicit NullTokenizer(int64_t vocab_size_without_eod);
    int64_t vocab_size() const override { return vocab_ + 1; }
    int32_t eod() const override { return static_cast<int32_t>(vocab_); }
    /// Parses whitespace-separated integers in [0, vocab_size()); anything else is an error.
    void encode(std::string_view text, std::vector<int32_t>& out) const override;
    /// The ids in decimal, separated by single spaces.
    void decode(std::span<const int32_t> ids, std::string& out) const override;
    std::string name() const override { return "NullTokenizer"; }
    std::string fingerprint() const override;
    using Tokenizer::decode;
    using Tokenizer::encode;

private:
    int64_t vocab_;
};

}  // namespace mwb::data
