#include "backend/data/tokenizer.h"

#include "backend/config/config.h"
#include "backend/config/null_vocabulary.h"
#include "backend/data/byte_tokenizer.h"
#include "backend/data/gpt2_bpe_tokenizer.h"
#include "backend/data/hf_tokenizer.h"
#include "backend/data/null_tokenizer.h"
#include "backend/data/sentencepiece_tokenizer.h"
#include "backend/data/tiktoken_tokenizer.h"
#include "mwb/kernels/error.h"

namespace mwb::data {

namespace {

fs::path existing_file(const std::string& path, const char* type, const char* field, const char* flag,
                       const char* what, const char* hint) {
    MWB_CHECK(!path.empty(), "{} needs {} ({}, {}){}", type, field, flag, what, hint);
    std::error_code ec;
    MWB_CHECK(fs::is_regular_file(path, ec), "{} '{}' does not exist or is not a file (expected {})", field, path,
              what);
    return path;
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const DataConfig& data, const ModelConfig& model) {
    const std::string& type = data.tokenizer_type;
    if (type == "ByteTokenizer") return std::make_unique<ByteTokenizer>();
    if (type == "GPT2BPETokenizer") {
        const char* hint = "; scripts/fetch-gpt2-vocab.sh downloads GPT-2's";
        const fs::path vocab =
            existing_file(data.vocab_file, type.c_str(), "vocab_file", "--vocab-file", "GPT-2's vocab.json", hint);
        const fs::path merges =
            existing_file(data.merge_file, type.c_str(), "merge_file", "--merge-file", "GPT-2's merges.txt", hint);
        return std::make_unique<GPT2BPETokenizer>(vocab, merges);
    }
    if (type == "NullTokenizer") {
        MWB_CHECK(model.vocab_size >= 1,
                  "NullTokenizer needs vocab_size (--vocab-size): the number of token ids, the end-of-document "
                  "id included (without it with --null-tokenizer-legacy-eod)");
        const NullVocabulary v = null_tokenizer_vocabulary(data, model);
        return std::make_unique<NullTokenizer>(v.size, v.eod);
    }
    if (type == "HuggingFaceTokenizer") {
        MWB_CHECK(!data.tokenizer_model.empty(),
                  "HuggingFaceTokenizer needs tokenizer_model (--tokenizer-model, a tokenizer.json or its directory)");
        return std::make_unique<HuggingFaceTokenizer>(data.tokenizer_model);
    }
    if (type == "SentencePieceTokenizer")
        return std::make_unique<SentencePieceTokenizer>(existing_file(
            data.tokenizer_model, type.c_str(), "tokenizer_model", "--tokenizer-model", "a tokenizer.model", ""));
    if (type == "TikTokenizer")
        return std::make_unique<TikTokenizer>(
            existing_file(data.tokenizer_model, type.c_str(), "tokenizer_model", "--tokenizer-model",
                          "Megatron's tiktoken JSON ranks", ""),
            data.tiktoken_pattern, data.tiktoken_num_special_tokens, model.vocab_size);
    MWB_FAIL("tokenizer_type '{}' is not one of ByteTokenizer, GPT2BPETokenizer, NullTokenizer, HuggingFaceTokenizer, "
             "SentencePieceTokenizer, TikTokenizer",
             type);
}

}  // namespace mwb::data
