#include "data/gpt2_pretokenizer.h"

#include "mwb/kernels/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <limits>

namespace mwb::data {

namespace {

constexpr std::string_view kPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof(buf));
    return reinterpret_cast<const char*>(buf);
}

// Match data and JIT stack are per thread: the compiled pattern is shared, read-only.
struct ThreadMatchState {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    ThreadMatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
    ~ThreadMatchState() {
        pcre2_jit_stack_free(stack);
        pcre2_match_context_free(context);
        pcre2_match_data_free(data);
    }
};

// The pattern's classes on ASCII, as PCRE2 in UCP mode has them (\s: 9-13 and space).
enum Class : uint8_t { kOther, kLetter, kDigit, kSpace, kNonAscii };
constexpr std::array<uint8_t, 256> make_classes() {
    std::array<uint8_t, 256> c{};
    for (int b = 0; b < 256; ++b) {
        if (b >= 0x80)
            c[b] = kNonAscii;
        else if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z'))
            c[b] = kLetter;
        else if (b >= '0' && b <= '9')
            c[b] = kDigit;
        else if ((b >= 9 && b <= 13) || b == ' ')
            c[b] = kSpace;
        else
            c[b] = kOther;
    }
    return c;
}
constexpr std::array<uint8_t, 256> kClass = make_classes();
constexpr std::size_t kFallback = 0;  // a match never ends at 0

// End of the match that starts at i, if deciding it needs only ASCII characters; else kFallback.
std::size_t ascii_match(const unsigned char* s, std::size_t n, std::size_t i) {
    const unsigned char c = s[i];
    if (c >= 0x80) return kFallback;
    if (c == '\'' && i + 1 < n) {  // 's 't 're 've 'm 'll 'd
        const unsigned char d = s[i + 1];
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
        if (i + 2 < n &&
            ((d == 'r' && s[i + 2] == 'e') || (d == 'v' && s[i + 2] == 'e') || (d == 'l' && s[i + 2] == 'l')))
            return i + 3;
    }
    uint8_t run = kClass[c];
    std::size_t j = i;
    if (c == ' ') {
        if (i + 1 == n) return n;  // a final space: \s+(?!\S)
        run = kClass[s[i + 1]];
        if (run == kNonAscii) return kFallback;
        if (run != kSpace) j = i + 1;  // " ?" then a run of letters, digits or others
    }
    if (run == kSpace) {
        while (j < n && kClass[s[j]] == kSpace) ++j;
        if (j == n) return n;                // \s+(?!\S) up to the end
        if (s[j] >= 0x80) return kFallback;  // a Unicode space could continue the run
        return j - i >= 2 ? j - 1 : j;       // leave the last space to the next word, or \s+
    }
    while (j < n && kClass[s[j]] == run) ++j;
    if (j < n && s[j] >= 0x80) return kFallback;  // could continue the run (e.g. a letter like é)
    return j;
}

// Offset of the first byte that is not part of valid UTF-8 (no overlongs, surrogates or > U+10FFFF).
std::size_t invalid_utf8_at(const unsigned char* s, std::size_t n) {
    std::size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            ++i;
            continue;
        }
        const unsigned char c = s[i];
        std::size_t len = 0;
        uint32_t cp = 0, min = 0;
        if (c >= 0xC2 && c <= 0xDF)
            len = 2, cp = c & 0x1Fu, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF)
            len = 3, cp = c & 0x0Fu, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4)
            len = 4, cp = c & 0x07u, min = 0x10000;
        else
            return i;
        if (i + len > n) return i;
        for (std::size_t k = 1; k < len; ++k) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += len;
    }
    return std::string_view::npos;
}

void check_text(std::string_view text) {
    MWB_CHECK(text.size() < std::numeric_limits<uint32_t>::max(), "GPT-2 tokenizer: a text of {} bytes is over 4 GiB",
              text.size());
    const std::size_t bad = invalid_utf8_at(reinterpret_cast<const unsigned char*>(text.data()), text.size());
    MWB_CHECK(bad == std::string_view::npos, "GPT-2 tokenizer: the text is not valid UTF-8 at byte {}", bad);
}

}  // namespace

Gpt2Pretokenizer::Gpt2Pretokenizer() {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern.data()), kPattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    MWB_CHECK(code, "GPT-2 pattern does not compile at {}: {}", offset, pcre2_message(error));
    // Without JIT (some platforms) pcre2_match interprets the pattern: slower, same result.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    code_ = code;
}

Gpt2Pretokenizer::~Gpt2Pretokenizer() {
    pcre2_code_free(static_cast<pcre2_code*>(code_));
}

std::size_t Gpt2Pretokenizer::regex_match(std::string_view text, std::size_t start) const {
    thread_local ThreadMatchState state;
    const int rc = pcre2_match(static_cast<const pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(text.data()),
                               text.size(), start, PCRE2_NO_UTF_CHECK, state.data, state.context);
    MWB_CHECK(rc >= 0, "GPT-2 tokenizer: pattern match failed at byte {}: {}", start, pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    // Every character matches one branch, so matches tile the text; guard anyway against a stall.
    MWB_CHECK(ov[0] == start && ov[1] > ov[0], "GPT-2 tokenizer: pattern left bytes [{}, {}) unmatched", start, ov[0]);
    return ov[1];
}

void Gpt2Pretokenizer::split(std::string_view text, Spans& words) const {
    check_text(text);
    words.clear();
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    std::size_t i = 0;
    while (i < text.size()) {
        std::size_t end = ascii_match(s, text.size(), i);
        if (end == kFallback) end = regex_match(text, i);
        words.emplace_back(static_cast<uint32_t>(i), static_cast<uint32_t>(end));
        i = end;
    }
}

void Gpt2Pretokenizer::split_with_regex_only(std::string_view text, Spans& words) const {
    check_text(text);
    words.clear();
    for (std::size_t i = 0; i < text.size();) {
        const std::size_t end = regex_match(text, i);
        words.emplace_back(static_cast<uint32_t>(i), static_cast<uint32_t>(end));
        i = end;
    }
}

}  // namespace mwb::data
