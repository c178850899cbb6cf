#pragma once
// GPT-2's pre-tokenisation: the text is cut into "words" by the pattern of OpenAI's encoder.py,
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matched with PCRE2 in UTF + UCP mode (Unicode letter/number/space classes), JIT-compiled. BPE then
// runs on each word separately. Matches whose every inspected character is ASCII are found by a
// hand-written scanner with the same semantics (several times faster than a regex call per word);
// any match that has to look at a non-ASCII character is left to PCRE2.
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace mwb::data {

class Gpt2Pretokenizer {
public:
    Gpt2Pretokenizer();
    ~Gpt2Pretokenizer();
    Gpt2Pretokenizer(const Gpt2Pretokenizer&) = delete;
    Gpt2Pretokenizer& operator=(const Gpt2Pretokenizer&) = delete;

    using Spans = std::vector<std::pair<uint32_t, uint32_t>>;
    /// Replaces `words` by the [begin, end) byte ranges of the words of `text`, in order; they tile the
    /// text. Throws mwb::Error (with the byte offset) when the text is not valid UTF-8. Thread-safe.
    void split(std::string_view text, Spans& words) const;
    /// The same with PCRE2 for every word: the reference the fast path is tested against.
    void split_with_regex_only(std::string_view text, Spans& words) const;

private:
    std::size_t regex_match(std::string_view text, std::size_t start) const;
    void* code_ = nullptr;  // pcre2_code_8
};

}  // namespace mwb::data
