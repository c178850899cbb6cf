#include "data/gpt2_pretokenizer.h"

#include "mwb/kernels/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

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

Gpt2Pretokenizer::~Gpt2Pretokenizer() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Gpt2Pretokenizer::split(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& words) const {
    MWB_CHECK(text.size() < std::numeric_limits<uint32_t>::max(), "GPT-2 tokenizer: a text of {} bytes is over 4 GiB",
              text.size());
    words.clear();
    thread_local ThreadMatchState state;
    const auto* code = static_cast<const pcre2_code*>(code_);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    uint32_t options = 0;  // the first call checks the whole text is UTF-8; later calls skip the check
    PCRE2_SIZE start = 0;
    while (start < text.size()) {
        const int rc = pcre2_match(code, subject, text.size(), start, options, state.data, state.context);
        if (rc < 0) {
            if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
                MWB_FAIL("GPT-2 tokenizer: the text is not valid UTF-8 at byte {} ({})",
                         pcre2_get_startchar(state.data), pcre2_message(rc));
            MWB_FAIL("GPT-2 tokenizer: pattern match failed at byte {}: {}", start, pcre2_message(rc));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
        // Every character matches one branch, so matches tile the text; guard anyway against a stall.
        MWB_CHECK(ov[0] == start && ov[1] > ov[0], "GPT-2 tokenizer: pattern left bytes [{}, {}) unmatched", start,
                  ov[0]);
        words.emplace_back(static_cast<uint32_t>(ov[0]), static_cast<uint32_t>(ov[1]));
        start = ov[1];
        options = PCRE2_NO_UTF_CHECK;
    }
}

}  // namespace mwb::data
