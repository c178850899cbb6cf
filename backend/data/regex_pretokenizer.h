#pragma once
// Pre-tokenisation by a word pattern: the text is cut into pieces by a regular expression (matched with
// PCRE2 in UTF + UCP mode: Unicode letter/number/space classes, JIT-compiled), and BPE then runs on
// each piece separately. Three patterns in wide use have a hand-written scanner for ASCII with exactly
// the pattern's semantics (several times faster than a regex call per word); any match that has to
// look at a non-ASCII character is left to PCRE2:
//   GPT-2 (OpenAI's encoder.py, Hugging Face's ByteLevel):
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama 3 / cl100k (and Qwen2 with \p{N} instead of \p{N}{1,3}):
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Megatron-LM's TikTokenizer v1: the Llama 3 pattern without the contractions, \p{N} single digits.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mwb::data {

/// Throws mwb::Error naming `who` and the byte offset when `text` is not valid UTF-8 (or is over 4 GiB).
void check_utf8(std::string_view text, std::string_view who);

/// How matches and the text between them become pieces (Hugging Face's Split behaviours).
enum class SplitBehavior { Isolated, Removed, MergedWithPrevious, MergedWithNext };

class RegexPretokenizer {
public:
    static constexpr std::string_view kGpt2Pattern =
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    static constexpr std::string_view kLlama3Pattern =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    static constexpr std::string_view kQwen2Pattern =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    static constexpr std::string_view kTiktokenV1Pattern =
        R"([^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
    static constexpr std::string_view kTiktokenV2Pattern =
        R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

    /// Compiles `pattern`; `origin` names where it came from in errors. The default is GPT-2's.
    explicit RegexPretokenizer(std::string_view pattern = kGpt2Pattern, std::string_view origin = "pattern");
    ~RegexPretokenizer();
    RegexPretokenizer(const RegexPretokenizer&) = delete;
    RegexPretokenizer& operator=(const RegexPretokenizer&) = delete;

    using Spans = std::vector<std::pair<uint32_t, uint32_t>>;
    /// Replaces `words` by the [begin, end) byte ranges of the pieces of `text`, in order (matches and
    /// the text between them, as Hugging Face's Split "Isolated"). Checks UTF-8 first. Thread-safe.
    void split(std::string_view text, Spans& words) const;
    /// Appends the pieces of text[begin, end) to `out`, offsets relative to `text`; the UTF-8 check is
    /// the caller's. `invert` swaps the roles of matches and the text between them.
    void split_range(std::string_view text, uint32_t begin, uint32_t end, SplitBehavior behavior, bool invert,
                     Spans& out) const;
    /// The same as split() with PCRE2 for every word: the reference the fast paths are tested against.
    void split_with_regex_only(std::string_view text, Spans& words) const;
    /// True when an exact ASCII scanner serves this pattern.
    bool has_fast_path() const { return fast_ != Fast::None; }

private:
    enum class Fast { None, Gpt2, Llama3, Qwen2, TiktokenV1 };
    /// [begin, end) of the next match at or after `start`, or {npos, npos}.
    std::pair<std::size_t, std::size_t> regex_find(std::string_view text, std::size_t start, std::size_t limit) const;
    std::size_t fast_match(const unsigned char* s, std::size_t n, std::size_t i) const;
    void* code_ = nullptr;  // pcre2_code_8
    Fast fast_ = Fast::None;
    std::string origin_;
};

}  // namespace mwb::data
