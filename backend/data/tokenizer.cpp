#include "data/tokenizer.h"

#include "config/config.h"
#include "data/byte_tokenizer.h"
#include "data/gpt2_bpe_tokenizer.h"
#include "data/null_tokenizer.h"
#include "mwb/kernels/error.h"

namespace mwb::data {

namespace {

fs::path existing_file(const std::string& path, const char* field, const char* flag, const char* what) {
    MWB_CHECK(!path.empty(), "GPT2BPETokenizer needs {} ({}, {}); scripts/fetch-gpt2-vocab.sh downloads GPT-2's", field,
              flag, what);
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
        const fs::path vocab = existing_file(data.vocab_file, "vocab_file", "--vocab-file", "GPT-2's vocab.json");
        const fs::path merges = existing_file(data.merge_file, "merge_file", "--merge-file", "GPT-2's merges.txt");
        return std::make_unique<GPT2BPETokenizer>(vocab, merges);
    }
    if (type == "NullTokenizer") {
        MWB_CHECK(model.vocab_size >= 1,
                  "NullTokenizer needs vocab_size (--vocab-size): the number of token ids "
                  "in the data, without the end-of-document id it adds");
        return std::make_unique<NullTokenizer>(model.vocab_size);
    }
    MWB_FAIL("tokenizer_type '{}' is not one of ByteTokenizer, GPT2BPETokenizer, NullTokenizer", type);
}

}  // namespace mwb::data
