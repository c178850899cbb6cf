#include "backend/data/regex_pretokenizer.h"

#include "mwb/kernels/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <limits>

namespace mwb::data {

namespace {

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

// GPT-2: end of the match that starts at i, if deciding it needs only ASCII characters; else kFallback.
std::size_t gpt2_ascii_match(const unsigned char* s, std::size_t n, std::size_t i) {
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


// Llama 3 / Qwen2 / TikTokenizer v1: end of the match at i when ASCII decides it, else kFallback.
// `contractions`: the (?i:'s|'t|...) branch comes first; `max_digits`: \p{N}{1,3} or \p{N}.
std::size_t llama3_ascii_match(const unsigned char* s, std::size_t n, std::size_t i, bool contractions,
                               std::size_t max_digits) {
    const unsigned char c = s[i];
    const uint8_t k = kClass[c];
    if (k == kNonAscii) return kFallback;
    if (contractions && c == '\'' && i + 1 < n) {
        const unsigned char d = s[i + 1] | 0x20;  // ASCII case folding; only S/s fold to s, etc.
        if (kClass[s[i + 1]] == kLetter) {
            if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
            if (i + 2 < n && kClass[s[i + 2]] == kLetter) {
                const unsigned char e = s[i + 2] | 0x20;
                if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 3;
            }
        }
    }
    const auto letters_from = [&](std::size_t j) {
        while (j < n && kClass[s[j]] == kLetter) ++j;
        return j < n && s[j] >= 0x80 ? kFallback : j;  // a non-ASCII letter could continue the run
    };
    if (k == kLetter) return letters_from(i + 1);
    if (k == kDigit) {
        std::size_t j = i + 1;
        while (j < n && j - i < max_digits && kClass[s[j]] == kDigit) ++j;
        if (j - i < max_digits && j < n && s[j] >= 0x80) return kFallback;
        return j;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+: one other or space (not CR/LF) before letters.
    if (c != '\r' && c != '\n' && i + 1 < n) {
        if (s[i + 1] >= 0x80) return kFallback;
        if (kClass[s[i + 1]] == kLetter) return letters_from(i + 2);
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    std::size_t j = i;
    if (c == ' ' && i + 1 < n && kClass[s[i + 1]] == kOther) j = i + 1;
    if (kClass[s[j]] == kOther) {
        while (j < n && kClass[s[j]] == kOther) ++j;
        if (j < n && s[j] >= 0x80) return kFallback;
        while (j < n && (s[j] == '\r' || s[j] == '\n')) ++j;
        return j;
    }
    // c is a space: \s*[\r\n]+ ends after the run's last newline; else \s+(?!\S) | \s+.
    std::size_t e = i, last_newline = std::string_view::npos;
    while (e < n && kClass[s[e]] == kSpace) {
        if (s[e] == '\r' || s[e] == '\n') last_newline = e;
        ++e;
    }
    if (e < n && s[e] >= 0x80) return kFallback;  // a Unicode space could continue the run
    if (last_newline != std::string_view::npos) return last_newline + 1;
    if (e == n) return n;
    return e - i >= 2 ? e - 1 : e;
}

}  // namespace

void check_utf8(std::string_view text, std::string_view who) {
    MWB_CHECK(text.size() < std::numeric_limits<uint32_t>::max(), "{}: a text of {} bytes is over 4 GiB", who,
              text.size());
    const std::size_t bad = invalid_utf8_at(reinterpret_cast<const unsigned char*>(text.data()), text.size());
    MWB_CHECK(bad == std::string_view::npos, "{}: the text is not valid UTF-8 at byte {}", who, bad);
}

RegexPretokenizer::RegexPretokenizer(std::string_view pattern, std::string_view origin) : origin_(origin) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    MWB_CHECK(code, "{}: the pattern does not compile at offset {}: {}", origin, offset, pcre2_message(error));
    // Without JIT (some platforms) pcre2_match interprets the pattern: slower, same result.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    code_ = code;
    if (pattern == kGpt2Pattern)
        fast_ = Fast::Gpt2;
    else if (pattern == kLlama3Pattern)
        fast_ = Fast::Llama3;
    else if (pattern == kQwen2Pattern)
        fast_ = Fast::Qwen2;
    else if (pattern == kTiktokenV1Pattern)
        fast_ = Fast::TiktokenV1;
}

RegexPretokenizer::~RegexPretokenizer() {
    pcre2_code_free(static_cast<pcre2_code*>(code_));
}

std::pair<std::size_t, std::size_t> RegexPretokenizer::regex_find(std::string_view text, std::size_t start,
                                                                  std::size_t limit) const {
    thread_local ThreadMatchState state;
    const int rc = pcre2_match(static_cast<const pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(text.data()),
                               limit, start, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) return {std::string_view::npos, std::string_view::npos};
    MWB_CHECK(rc >= 0, "{}: pattern match failed at byte {}: {}", origin_, start, pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    return {ov[0], ov[1]};
}

std::size_t RegexPretokenizer::fast_match(const unsigned char* s, std::size_t n, std::size_t i) const {
    switch (fast_) {
    case Fast::Gpt2: return gpt2_ascii_match(s, n, i);
    case Fast::Llama3: return llama3_ascii_match(s, n, i, true, 3);
    case Fast::Qwen2: return llama3_ascii_match(s, n, i, true, 1);
    case Fast::TiktokenV1: return llama3_ascii_match(s, n, i, false, 1);
    case Fast::None: break;
    }
    return kFallback;
}

void RegexPretokenizer::split_range(std::string_view text, uint32_t begin, uint32_t end, SplitBehavior behavior,
                                    bool invert, Spans& out) const {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    if (fast_ != Fast::None && behavior == SplitBehavior::Isolated) {
        // The fast patterns match every character, so their matches tile the text.
        for (std::size_t i = begin; i < end;) {
            std::size_t e = fast_match(s, end, i);
            if (e == kFallback) {
                e = regex_find(text, i, end).second;
                MWB_CHECK(e != std::string_view::npos && e > i, "{}: the pattern left byte {} unmatched", origin_, i);
            }
            out.emplace_back(static_cast<uint32_t>(i), static_cast<uint32_t>(e));
            i = e;
        }
        return;
    }
    // General case: matches and the gaps between them, then the behaviour decides the pieces.
    struct Piece {
        uint32_t b, e;
        bool match;
    };
    thread_local std::vector<Piece> pieces;
    pieces.clear();
    std::size_t pos = begin, from = begin;
    while (from < end) {
        auto [mb, me] = regex_find(text, from, end);
        if (mb == std::string_view::npos) break;
        if (me == mb) {  // an empty match splits nothing: look again one character on
            from = mb + 1;
            while (from < end && (s[from] & 0xC0) == 0x80) ++from;
            continue;
        }
        if (mb > pos) pieces.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(mb), invert});
        pieces.push_back({static_cast<uint32_t>(mb), static_cast<uint32_t>(me), !invert});
        pos = from = me;
    }
    if (pos < end) pieces.push_back({static_cast<uint32_t>(pos), end, invert});
    bool open = false;  // the last piece out may still take a delimiter (MergedWith*)
    for (const Piece& p : pieces) {
        switch (behavior) {
        case SplitBehavior::Isolated: out.emplace_back(p.b, p.e); break;
        case SplitBehavior::Removed:
            if (!p.match) out.emplace_back(p.b, p.e);
            break;
        case SplitBehavior::MergedWithPrevious:
            if (p.match && open)
                out.back().second = p.e;
            else
                out.emplace_back(p.b, p.e);
            open = !p.match;
            break;
        case SplitBehavior::MergedWithNext:
            if (!p.match && open)
                out.back().second = p.e;
            else
                out.emplace_back(p.b, p.e);
            open = p.match;
            break;
        }
    }
}

void RegexPretokenizer::split(std::string_view text, Spans& words) const {
    check_utf8(text, origin_);
    words.clear();
    split_range(text, 0, static_cast<uint32_t>(text.size()), SplitBehavior::Isolated, false, words);
}

void RegexPretokenizer::split_with_regex_only(std::string_view text, Spans& words) const {
    check_utf8(text, origin_);
    words.clear();
    std::size_t pos = 0;
    while (pos < text.size()) {
        auto [mb, me] = regex_find(text, pos, text.size());
        if (mb == std::string_view::npos || me == mb) {
            words.emplace_back(static_cast<uint32_t>(pos), static_cast<uint32_t>(text.size()));
            break;
        }
        if (mb > pos) words.emplace_back(static_cast<uint32_t>(pos), static_cast<uint32_t>(mb));
        words.emplace_back(static_cast<uint32_t>(mb), static_cast<uint32_t>(me));
        pos = me;
    }
}

}  // namespace mwb::data
