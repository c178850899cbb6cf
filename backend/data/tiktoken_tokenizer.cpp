#include "backend/data/tiktoken_tokenizer.h"

#include "backend/data/bpe_core.h"
#include "backend/data/regex_pretokenizer.h"
#include "mwb/kernels/error.h"

#include <xxhash.h>
#include <nlohmann/json.hpp>

#include <atomic>

namespace mwb::data {

namespace {

std::atomic<uint64_t> g_next_instance{1};

// The fixed special tokens of Megatron's TikTokenizer, in id order.
constexpr std::array<std::string_view, 7> kSpecial = {"<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"};

bool base64_decode(std::string_view in, std::string& out) {
    out.clear();
    uint32_t acc = 0;
    int bits = 0;
    for (const char c : in) {
        int v = -1;
        if (c >= 'A' && c <= 'Z')
            v = c - 'A';
        else if (c >= 'a' && c <= 'z')
            v = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            v = c - '0' + 52;
        else if (c == '+')
            v = 62;
        else if (c == '/')
            v = 63;
        else if (c == '=')
            break;
        else
            return false;
        acc = (acc << 6) | static_cast<uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<char>((acc >> bits) & 0xFF));
        }
    }
    return true;
}

}  // namespace

struct TikTokenizer::Impl {
    uint64_t instance = g_next_instance.fetch_add(1);
    std::string origin;
    std::unique_ptr<RegexPretokenizer> pattern;
    ByteLevelBpe bpe;
    TokenMap id_of;  // token bytes -> id
    TokenMatcher specials;
    std::string bytes;              // every id's bytes, back to back
    std::vector<uint32_t> offset;   // id -> [offset[id], offset[id + 1])
    std::string fingerprint;
};

TikTokenizer::TikTokenizer(const fs::path& file, std::string_view pattern, int num_special, int64_t vocab_size)
    : TikTokenizer(read_file(file), file.string(), pattern, num_special, vocab_size) {}

TikTokenizer::TikTokenizer(std::string_view json, std::string_view origin, std::string_view pattern, int num_special,
                           int64_t vocab_size)
    : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.origin = std::string(origin);
    MWB_CHECK(pattern == "v1" || pattern == "v2", "tiktoken_pattern '{}' is not v1 or v2 (Megatron-LM's patterns)",
              pattern);
    MWB_CHECK(num_special >= static_cast<int>(kSpecial.size()) && num_special <= (1 << 20),
              "tiktoken_num_special_tokens {} must be in [{}, 2^20] (<unk> <s> </s> <mask> <pad> <cls> <sep> first)",
              num_special, kSpecial.size());
    m.pattern = std::make_unique<RegexPretokenizer>(
        pattern == "v1" ? RegexPretokenizer::kTiktokenV1Pattern : RegexPretokenizer::kTiktokenV2Pattern,
        fmt::format("TikTokenizer pattern {}", pattern));
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(json);
    } catch (const nlohmann::json::exception& e) {
        MWB_FAIL("{}: not valid JSON ({}); expected Megatron's tiktoken vocabulary, a list of "
                 "{{\"rank\", \"token_bytes\", \"token_str\"}}",
                 origin, e.what());
    }
    MWB_CHECK(j.is_array() && j.size() >= 256,
              "{}: expected a list of at least 256 {{\"rank\", \"token_bytes\", \"token_str\"}} objects", origin);
    std::size_t ranks = j.size();
    if (vocab_size > 0) {
        MWB_CHECK(vocab_size > num_special && static_cast<std::size_t>(vocab_size - num_special) <= j.size(),
                  "vocab_size {} needs {} ranks after the {} special tokens; {} has {}", vocab_size,
                  vocab_size - num_special, num_special, origin, j.size());
        ranks = static_cast<std::size_t>(vocab_size - num_special);
    }
    std::vector<std::string> token(ranks);
    m.id_of.reserve(ranks);
    for (std::size_t r = 0; r < ranks; ++r) {
        const auto& e = j[r];
        MWB_CHECK(e.is_object() && e.contains("rank") && e["rank"].is_number_integer() && e.contains("token_bytes") &&
                      e["token_bytes"].is_string(),
                  "{}: entry {} must be an object with an integer \"rank\" and a base64 \"token_bytes\"", origin, r);
        MWB_CHECK(e["rank"].get<int64_t>() == static_cast<int64_t>(r), "{}: entry {} has rank {}, expected {}", origin,
                  r, e["rank"].get<int64_t>(), r);
        MWB_CHECK(base64_decode(e["token_bytes"].get<std::string>(), token[r]) && !token[r].empty(),
                  "{}: entry {} has token_bytes that are not base64 of at least one byte", origin, r);
        MWB_CHECK(r >= 256 || token[r] == std::string(1, static_cast<char>(r)),
                  "{}: rank {} must be the single byte {} (the first 256 ranks are the bytes)", origin, r, r);
        const auto id = static_cast<int32_t>(r) + num_special;
        MWB_CHECK(m.id_of.emplace(token[r], id).second, "{}: entry {} repeats the bytes of an earlier rank", origin,
                  r);
    }
    for (int b = 0; b < 256; ++b) m.bpe.byte_id[b] = b + num_special;
    // tiktoken merges the adjacent pair whose concatenation has the lowest rank: each token of two or
    // more bytes is the merge of every split of it into two tokens.
    std::vector<std::array<int32_t, 3>> merges;
    for (std::size_t r = 256; r < ranks; ++r) {
        const std::string_view t = token[r];
        for (std::size_t k = 1; k < t.size(); ++k) {
            const auto a = m.id_of.find(t.substr(0, k)), b = m.id_of.find(t.substr(k));
            if (a != m.id_of.end() && b != m.id_of.end())
                merges.push_back({a->second, b->second, static_cast<int32_t>(r) + num_special});
        }
    }
    m.bpe.pairs.reserve(merges.size());
    for (const auto& [a, b, id] : merges) m.bpe.pairs.put(a, b, id, id);
    m.bpe.whole = &m.id_of;

    m.offset.assign(static_cast<std::size_t>(num_special) + ranks + 1, 0);
    for (int i = 0; i < num_special; ++i) {
        const std::string s = i < static_cast<int>(kSpecial.size()) ? std::string(kSpecial[i])
                                                                     : fmt::format("<SPECIAL_{}>", i);
        m.specials.add(s, i);
        m.bytes += s;
        m.offset[i + 1] = static_cast<uint32_t>(m.bytes.size());
    }
    for (std::size_t r = 0; r < ranks; ++r) {
        m.bytes += token[r];
        m.offset[num_special + r + 1] = static_cast<uint32_t>(m.bytes.size());
    }
    m.fingerprint = fmt::format("TikTokenizer-{}-{}-{}-{:016x}", pattern, num_special, ranks,
                                XXH3_64bits(json.data(), json.size()));
}

TikTokenizer::~TikTokenizer() = default;

int64_t TikTokenizer::vocab_size() const {
    return static_cast<int64_t>(impl_->offset.size()) - 1;
}
int32_t TikTokenizer::eod() const {
    return 2;  // </s>
}
int32_t TikTokenizer::bos() const {
    return 1;  // <s>
}
std::string TikTokenizer::fingerprint() const {
    return impl_->fingerprint;
}

void TikTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
    const Impl& m = *impl_;
    thread_local BpeThreadState ts;
    thread_local RegexPretokenizer::Spans pieces;
    ts.use_for(m.instance);
    check_utf8(text, "TikTokenizer");
    const auto encode_ordinary = [&](std::size_t b, std::size_t e) {
        pieces.clear();
        m.pattern->split_range(text, static_cast<uint32_t>(b), static_cast<uint32_t>(e), SplitBehavior::Isolated,
                               false, pieces);
        for (const auto& [pb, pe] : pieces) m.bpe.encode_piece(text.substr(pb, pe - pb), ts, out);
    };
    std::size_t pos = 0;
    for (;;) {
        const TokenMatcher::Match hit = m.specials.find(text, pos);
        if (hit.pos == std::string_view::npos) break;
        encode_ordinary(pos, hit.pos);
        out.push_back(m.specials.id(hit.index));
        pos = hit.pos + m.specials.text(hit.index).size();
    }
    encode_ordinary(pos, text.size());
}

void TikTokenizer::decode(std::span<const int32_t> ids, std::string& out) const {
    const auto& off = impl_->offset;
    for (const int32_t id : ids) {
        MWB_CHECK(id >= 0 && static_cast<std::size_t>(id) + 1 < off.size(),
                  "TikTokenizer: id {} is not in the vocabulary (size {})", id, off.size() - 1);
        out.append(impl_->bytes, off[id], off[id + 1] - off[id]);
    }
}

}  // namespace mwb::data
