#pragma once
// GPT-2's byte-level BPE (Megatron-LM's GPT2BPETokenizer), as OpenAI's encoder.py does it: the text is
// cut into words by GPT-2's pattern, each word's UTF-8 bytes become byte symbols, and the adjacent pair
// of lowest merge rank is merged (every occurrence, left to right) until no pair has a rank. Token ids
// come from vocab.json (encoder.json), ranks from merges.txt (vocab.bpe). The end-of-document id is
// the id of "<|endoftext|>". Words already seen are served from a per-thread cache.
#include "backend/core/files.h"
#include "backend/data/tokenizer.h"

#include <memory>

namespace mwb::data {

class GPT2BPETokenizer final : public Tokenizer {
public:
    /// Loads the two files; errors name the file and the line or token that is wrong.
    GPT2BPETokenizer(const fs::path& vocab_file, const fs::path& merge_file);
    /// From file contents; `origin` names them in errors (tests build small vocabularies this way).
    GPT2BPETokenizer(std::string_view vocab_json, std::string_view merges, std::string_view origin);
    ~GPT2BPETokenizer() override;

    int64_t vocab_size() const override;
    int32_t eod() const override;
    void encode(std::string_view text, std::vector<int32_t>& out) const override;
    void decode(std::span<const int32_t> ids, std::string& out) const override;
    std::string name() const override { return "GPT2BPETokenizer"; }
    std::string fingerprint() const override;
    using Tokenizer::decode;
    using Tokenizer::encode;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mwb::data
