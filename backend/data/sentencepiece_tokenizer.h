#pragma once
// Megatron-LM's SentencePieceTokenizer: a SentencePiece `tokenizer.model` (BPE or unigram), encoded
// and decoded by Debian's libsentencepiece (the library Megatron's Python wrapper calls). EOD is the
// model's </s> (eos_id), BOS its <s>.
#include "backend/core/files.h"
#include "backend/data/tokenizer.h"

#include <memory>

namespace mwb::data {

class SentencePieceTokenizer final : public Tokenizer {
public:
    /// Loads the model file; errors name it and say what SentencePiece reported.
    explicit SentencePieceTokenizer(const fs::path& model_file);
    ~SentencePieceTokenizer() override;

    int64_t vocab_size() const override;
    int32_t eod() const override;
    int32_t bos() const override;
    void encode(std::string_view text, std::vector<int32_t>& out) const override;
    void decode(std::span<const int32_t> ids, std::string& out) const override;
    std::string name() const override { return "SentencePieceTokenizer"; }
    std::string fingerprint() const override;
    using Tokenizer::decode;
    using Tokenizer::encode;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mwb::data
