#include "backend/generate/generation.h"

#include "backend/core/files.h"
#include "backend/data/tokenizer.h"
#include "mwb/kernels/error.h"

#include <nlohmann/json.hpp>

#include <chrono>

namespace mwb::generate {

namespace {

/// Bytes of s that form complete UTF-8 characters from the start (a trailing partial character excluded).
std::size_t complete_prefix(const std::string& s) {
    const std::size_t n = s.size();
    // Look back at most 3 bytes for the start of the last character.
    for (std::size_t back = 1; back <= std::min<std::size_t>(4, n); ++back) {
        const auto c = static_cast<unsigned char>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte
        const std::size_t need = c < 0x80             ? 1
                                 : (c & 0xE0) == 0xC0 ? 2
                                 : (c & 0xF0) == 0xE0 ? 3
                                 : (c & 0xF8) == 0xF0 ? 4
                                                      : 1;
        return back >= need ? n : n - back;
    }
    return n;  // only continuation bytes: invalid, let them through
}

/// The length of the valid UTF-8 prefix of s (s.size() when all of it is valid).
std::size_t valid_utf8_length(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        const std::size_t len = c < 0x80                        ? 1
                                : (c >> 5) == 0x6 && c >= 0xC2  ? 2
                                : (c >> 4) == 0xE               ? 3
                                : (c >> 3) == 0x1E && c <= 0xF4 ? 4
                                                                : 0;
        if (len == 0 || i + len > s.size()) return i;
        for (std::size_t k = 1; k < len; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return i;
        i += len;
    }
    return i;
}

}  // namespace

std::vector<std::string> read_prompts_file(const std::string& path, std::string_view flag) {
    std::string text;
    try {
        text = read_file(path, kMaxPrompts * (kMaxPromptBytes + 2) + 65536);
    } catch (const std::exception& e) {
        MWB_FAIL("{} '{}': {}", flag, path, e.what());
    }
    std::vector<std::string> prompts;
    std::size_t begin = 0, line = 0;
    while (begin < text.size()) {
        ++line;
        std::size_t end = text.find('\n', begin);
        if (end == std::string::npos) end = text.size();
        std::string p = text.substr(begin, end - begin);
        begin = end + 1;
        if (!p.empty() && p.back() == '\r') p.pop_back();
        if (p.empty()) continue;
        MWB_CHECK(p.size() <= kMaxPromptBytes, "{} '{}' line {}: {} bytes, at most {} per prompt", flag, path, line,
                  p.size(), kMaxPromptBytes);
        const std::size_t ok = valid_utf8_length(p);
        MWB_CHECK(ok == p.size(), "{} '{}' line {}: not UTF-8 (byte {})", flag, path, line, ok + 1);
        MWB_CHECK(prompts.size() < kMaxPrompts, "{} '{}' line {}: more than {} prompts", flag, path, line, kMaxPrompts);
        prompts.push_back(std::move(p));
    }
    MWB_CHECK(!prompts.empty(), "{} '{}' holds no prompt (empty lines are ignored)", flag, path);
    return prompts;
}

const char* finish_reason_name(FinishReason r) {
    return r == FinishReason::Eos ? "eos" : "length";
}

std::vector<Completion> complete(Decoder& decoder, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& o, const TokenCallback& on_token, const DoneCallback& on_done) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const int64_t n = static_cast<int64_t>(prompts.size()), V = o.vocab > 0 ? o.vocab : decoder.dims().vocab;
    MWB_CHECK(V <= decoder.dims().vocab, "generation: the tokenizer has {} ids, the model embeds {}", V,
              decoder.dims().vocab);
    std::vector<Completion> out(static_cast<std::size_t>(n));
    std::vector<Sampler> samplers;
    std::vector<int64_t> limit(static_cast<std::size_t>(n)), active;
    std::vector<int32_t> next;
    std::vector<float> logits(static_cast<std::size_t>(std::max<int64_t>(n, 1) * decoder.dims().vocab));
    const auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
    // Records row r's token; false (after on_done) when the row is finished.
    const auto take = [&](int64_t r, int32_t token) {
        Completion& c = out[static_cast<std::size_t>(r)];
        c.seconds = seconds();
        if (token == o.eos) {
            c.finish = FinishReason::Eos;
        } else {
            c.tokens.push_back(token);
            if (on_token) on_token(r, token);
            if (static_cast<int64_t>(c.tokens.size()) < limit[static_cast<std::size_t>(r)]) return true;
        }
        if (on_done) on_done(r, c);
        return false;
    };
    for (int64_t r = 0; r < n; ++r) {
        const auto& p = prompts[static_cast<std::size_t>(r)];
        const int64_t len = static_cast<int64_t>(p.size());
        MWB_CHECK(len >= 1 && len < decoder.max_len(),
                  "prompt {} has {} tokens: it must have at least 1 and leave room in the model's context of {}", r,
                  len, decoder.max_len());
        limit[static_cast<std::size_t>(r)] = std::min(o.max_new_tokens, decoder.max_len() - len);
        samplers.emplace_back(o.sampling, o.first_stream + r);
    }
    for (int64_t r = 0; r < n; ++r) {
        decoder.reset(r);
        if (limit[static_cast<std::size_t>(r)] <= 0) {
            if (on_done) on_done(r, out[static_cast<std::size_t>(r)]);
            continue;
        }
        decoder.prefill(r, prompts[static_cast<std::size_t>(r)], logits.data());
        const int32_t t = samplers[static_cast<std::size_t>(r)].next(logits.data(), V);
        if (take(r, t)) {
            active.push_back(r);
            next.push_back(t);
        }
    }
    while (!active.empty()) {
        decoder.decode(active, next, logits.data());
        std::vector<int64_t> still;
        std::vector<int32_t> tokens;
        for (std::size_t i = 0; i < active.size(); ++i) {
            const int64_t r = active[i];
            const int32_t t = samplers[static_cast<std::size_t>(r)].next(logits.data() + i * decoder.dims().vocab, V);
            if (take(r, t)) {
                still.push_back(r);
                tokens.push_back(t);
            }
        }
        active = std::move(still);
        next = std::move(tokens);
    }
    return out;
}

TextStream::TextStream(const data::Tokenizer& tokenizer, std::span<const int32_t> context)
    : tokenizer_(tokenizer), ids_(context.begin(), context.end()) {
    if (ids_.empty()) return;
    tokenizer_.decode(ids_, text_);
    emitted_ = complete_prefix(text_);
}

std::string TextStream::push(int32_t token) {
    ids_.push_back(token);
    text_.clear();
    tokenizer_.decode(ids_, text_);
    const std::size_t end = complete_prefix(text_);
    if (end <= emitted_) return "";
    std::string piece = text_.substr(emitted_, end - emitted_);
    emitted_ = end;
    return piece;
}

std::string TextStream::flush() {
    std::string rest = emitted_ < text_.size() ? text_.substr(emitted_) : "";
    emitted_ = text_.size();
    return rest;
}

std::string valid_utf8(const std::string& s) {
    // nlohmann's serializer replaces invalid sequences by U+FFFD; parsing gives the cleaned string back.
    return nlohmann::json::parse(nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
        .get<std::string>();
}

}  // namespace mwb::generate
