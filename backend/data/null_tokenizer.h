#pragma once
// Megatron-LM's NullTokenizer: the text already is token ids, written as decimal integers separated
// by spaces. Current Megatron-LM (core_v0.18.0 on): the vocabulary is vocab_size ids and EOD is
// vocab_size - 1 unless --null-tokenizer-eod-id names another; older releases: vocab_size + 1 ids with
// EOD = vocab_size (null_tokenizer_legacy_eod). make_tokenizer() picks; this class takes both numbers.
#include "backend/data/tokenizer.h"

namespace mwb::data {

class NullTokenizer final : public Tokenizer {
public:
    /// `vocab_size` ids in all, `eod` one of them.
    NullTokenizer(int64_t vocab_size, int64_t eod);
    int64_t vocab_size() const override { return vocab_; }
    int32_t eod() const override { return static_cast<int32_t>(eod_); }
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
    int64_t eod_;
};

}  // namespace mwb::data
