#pragma once
// Megatron-LM's HuggingFaceTokenizer: a Hugging Face `tokenizer.json` with a BPE model, run here
// without Python. What it reads (docs/data.md lists it in full):
//   normalizer     Prepend, Replace (string patterns), NFC/NFD/NFKC/NFKD (ICU), Sequence
//   pre_tokenizer  Split (regex or string; Isolated/Removed/MergedWithPrevious/MergedWithNext, invert),
//                  ByteLevel (add_prefix_space, use_regex), Metaspace (replacement, prepend_scheme,
//                  split), Digits, Sequence
//   model          BPE: vocab, merges (both spellings), byte_fallback, unk_token/fuse_unk, ignore_merges
//   added_tokens   matched in the raw text first, longest leftmost (lstrip/rstrip/single_word honoured)
//   decoder        ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence
// and tokenizer_config.json next to it for bos_token / eos_token (EOD is the EOS token). encode() does
// not run the post_processor (no BOS/EOS added); that is the caller's choice (bos()).
// Covers Llama 3, Qwen2/3, GPT-2, SmolLM, Mistral's and Llama 2's converted tokenizers.
#include "backend/core/files.h"
#include "backend/data/tokenizer.h"

#include <memory>

namespace mwb::data {

class HuggingFaceTokenizer final : public Tokenizer {
public:
    /// `path` is a tokenizer.json or a directory holding one; tokenizer_config.json is read from the
    /// same directory when present. Errors name the file and the field.
    explicit HuggingFaceTokenizer(const fs::path& path);
    /// From file contents (`config_json` may be empty); `origin` names them in errors.
    HuggingFaceTokenizer(std::string_view tokenizer_json, std::string_view config_json, std::string_view origin);
    ~HuggingFaceTokenizer() override;

    int64_t vocab_size() const override;
    int32_t eod() const override;
    int32_t bos() const override;
    void encode(std::string_view text, std::vector<int32_t>& out) const override;
    void decode(std::span<const int32_t> ids, std::string& out) const override;
    std::string name() const override { return "HuggingFaceTokenizer"; }
    std::string fingerprint() const override;
    /// The id of a token spelled as in tokenizer.json (vocab or added token), or -1.
    int32_t token_id(std::string_view token) const;
    /// True when decode(encode(t)) == t for every valid UTF-8 text (no normalizer that changes text,
    /// no unknown token, the decoder undoes the pre-tokenizer's prefix).
    bool round_trips() const;
    using Tokenizer::decode;
    using Tokenizer::encode;

    struct Impl;

private:
    struct Files;
    static Files read_files(const fs::path& path);
    explicit HuggingFaceTokenizer(const Files& files);
    std::unique_ptr<Impl> impl_;
};

}  // namespace mwb::data
