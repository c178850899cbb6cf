#pragma once
// Megatron-LM's TikTokenizer: tiktoken's byte-level BPE over a ranks file in Megatron's JSON format
// (a list of {"rank": i, "token_bytes": base64, "token_str": ...}, rank i at position i, the first 256
// the single bytes), split by its pattern "v1" or "v2". Ids 0..num_special-1 are the special tokens
// <unk> <s> </s> <mask> <pad> <cls> <sep> then <SPECIAL_7>, ...; token of rank r has id r + num_special.
// EOD is </s>. As tiktoken, a piece that is a token as a whole is that token; special tokens are
// recognised in the text (Megatron encodes with allowed_special="all").
#include "backend/core/files.h"
#include "backend/data/tokenizer.h"

#include <memory>

namespace mwb::data {

class TikTokenizer final : public Tokenizer {
public:
    /// `vocab_size` > 0 keeps the first vocab_size - num_special ranks (Megatron's --vocab-size); 0 keeps all.
    TikTokenizer(const fs::path& file, std::string_view pattern, int num_special, int64_t vocab_size = 0);
    TikTokenizer(std::string_view json, std::string_view origin, std::string_view pattern, int num_special,
                 int64_t vocab_size = 0);
    ~TikTokenizer() override;

    int64_t vocab_size() const override;
    int32_t eod() const override;
    int32_t bos() const override;
    void encode(std::string_view text, std::vector<int32_t>& out) const override;
    void decode(std::span<const int32_t> ids, std::string& out) const override;
    std::string name() const override { return "TikTokenizer"; }
    std::string fingerprint() const override;
    using Tokenizer::decode;
    using Tokenizer::encode;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mwb::data
