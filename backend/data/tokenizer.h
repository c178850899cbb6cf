#pragma once
// Text <-> token ids, as Megatron-LM's --tokenizer-type does it. Tokenizers are immutable after
// construction and safe to use from several threads at once (preprocessing tokenises in parallel).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mwb {
struct DataConfig;
struct ModelConfig;
}  // namespace mwb

namespace mwb::data {

class Tokenizer {
public:
    virtual ~Tokenizer() = default;
    /// Ids are in [0, vocab_size()); the end-of-document id is one of them.
    virtual int64_t vocab_size() const = 0;
    /// End-of-document id (Megatron's `eod`), appended to documents by `preprocess --append-eod`.
    virtual int32_t eod() const = 0;
    /// Beginning-of-sequence id for generation prompts, or -1 when the tokenizer has none.
    virtual int32_t bos() const { return -1; }
    /// Appends the ids of `text` to `out` (no EOD). Throws mwb::Error on input it cannot encode.
    virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
    /// Appends the text of `ids` to `out`; decode(encode(t)) == t. Throws on ids out of range.
    virtual void decode(std::span<const int32_t> ids, std::string& out) const = 0;
    /// The --tokenizer-type name, e.g. "GPT2BPETokenizer".
    virtual std::string name() const = 0;
    /// Identifies the tokenizer with its files (name plus a hash of their contents); cache keys use it.
    virtual std::string fingerprint() const = 0;

    std::vector<int32_t> encode(std::string_view text) const {
        std::vector<int32_t> ids;
        encode(text, ids);
        return ids;
    }
    std::string decode(std::span<const int32_t> ids) const {
        std::string text;
        decode(ids, text);
        return text;
    }
};

/// The tokenizer named by data.tokenizer_type, with data.vocab_file / data.merge_file (GPT2BPETokenizer)
/// or model.vocab_size (NullTokenizer). Call it on the configuration as the user wrote it (before
/// mwb::resolve, which replaces model.vocab_size by the tokenizer's). Errors name the field and file.
std::unique_ptr<Tokenizer> make_tokenizer(const DataConfig& data, const ModelConfig& model);

}  // namespace mwb::data
