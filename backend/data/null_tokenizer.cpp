#include "backend/data/null_tokenizer.h"

#include "mwb/kernels/error.h"

#include <charconv>

namespace mwb::data {

NullTokenizer::NullTokenizer(int64_t vocab_size, int64_t eod) : vocab_(vocab_size), eod_(eod) {
    MWB_CHECK(vocab_ >= 2 && vocab_ <= (int64_t{1} << 31) - 1,
              "NullTokenizer needs vocab_size in [2, 2^31 - 1] (got {}); set --vocab-size", vocab_);
    MWB_CHECK(eod_ >= 0 && eod_ < vocab_, "NullTokenizer: the end-of-document id {} is not in [0, {}) "
              "(--null-tokenizer-eod-id)", eod_, vocab_);
}

void NullTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
    const auto is_space = [](char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
    };
    std::size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && is_space(text[i])) ++i;
        if (i == text.size()) break;
        std::size_t end = i;
        while (end < text.size() && !is_space(text[end])) ++end;
        int64_t id = -1;
        const auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + end, id);
        MWB_CHECK(ec == std::errc() && ptr == text.data() + end && id >= 0 && id < vocab_,
                  "NullTokenizer: '{}' at byte {} is not a token id in [0, {}) (the text must be space-separated ids)",
                  text.substr(i, std::min<std::size_t>(end - i, 40)), i, vocab_);
        out.push_back(static_cast<int32_t>(id));
        i = end;
    }
}

void NullTokenizer::decode(std::span<const int32_t> ids, std::string& out) const {
    for (std::size_t i = 0; i < ids.size(); ++i) {
        MWB_CHECK(ids[i] >= 0 && ids[i] < vocab_, "NullTokenizer: id {} is outside the vocabulary [0, {})", ids[i],
                  vocab_);
        if (i) out.push_back(' ');
        fmt::format_to(std::back_inserter(out), "{}", ids[i]);
    }
}

std::string NullTokenizer::fingerprint() const {
    return fmt::format("NullTokenizer-{}-eod{}", vocab_, eod_);
}

}  // namespace mwb::data
