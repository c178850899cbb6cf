#pragma once
// GPT-2's pre-tokenisation: the text is cut into "words" by the pattern of OpenAI's encoder.py,
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matched with PCRE2 in UTF + UCP mode (Unicode letter/number/space classes), JIT-compiled. BPE then
// runs on each word separately.
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

    /// Replaces `words` by the [begin, end) byte ranges of the words of `text`, in order; they tile the
    /// text. Throws mwb::Error (with the byte offset) when the text is not valid UTF-8. Thread-safe.
    void split(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& words) const;

private:
    void* code_ = nullptr;  // pcre2_code_8
};

}  // namespace mwb::data
