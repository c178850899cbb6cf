#include "backend/data/gpt2_bpe_tokenizer.h"

#include "backend/data/bpe_core.h"
#include "backend/data/regex_pretokenizer.h"
#include "mwb/kernels/error.h"

#include <xxhash.h>
#include <nlohmann/json.hpp>

#include <array>
#include <atomic>
#include <cstring>
#include <limits>
#include <unordered_map>

namespace mwb::data {

namespace {

std::string shown(std::string_view s) {
    return s.size() <= 40 ? std::string(s) : std::string(s.substr(0, 40)) + "...";
}

std::atomic<uint64_t> g_next_instance{1};

}  // namespace

struct GPT2BPETokenizer::Impl {
    uint64_t instance = g_next_instance.fetch_add(1);
    RegexPretokenizer pretokenizer{RegexPretokenizer::kGpt2Pattern, "GPT-2 tokenizer"};
    ByteLevelBpe bpe;  // encoder.py's bpe(), without its whole-word shortcut
    std::string token_bytes;             // every token's raw bytes, back to back
    std::vector<uint32_t> token_offset;  // id -> [offset[id], offset[id + 1]) in token_bytes
    int32_t eod = -1;
    std::string fingerprint;

    Impl(std::string_view vocab_json, std::string_view merges, std::string_view vocab_origin,
         std::string_view merges_origin);
};

GPT2BPETokenizer::Impl::Impl(std::string_view vocab_json, std::string_view merges, std::string_view vocab_origin,
                             std::string_view merges_origin) {
    nlohmann::json vocab;
    try {
        vocab = nlohmann::json::parse(vocab_json);
    } catch (const nlohmann::json::exception& e) {
        MWB_FAIL("{}: not valid JSON ({}); expected GPT-2's vocab.json, an object of token -> id", vocab_origin,
                 e.what());
    }
    MWB_CHECK(vocab.is_object() && !vocab.empty(), "{}: expected a JSON object of token -> id (GPT-2's vocab.json)",
              vocab_origin);

    std::unordered_map<std::string, int32_t> id_of;
    id_of.reserve(vocab.size());
    std::vector<std::pair<int32_t, std::string>> tokens;
    tokens.reserve(vocab.size());
    std::string raw;
    int32_t max_id = -1;
    for (const auto& [token, value] : vocab.items()) {
        MWB_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < (int64_t{1} << 31),
                  "{}: token '{}' has id {}, expected a non-negative integer", vocab_origin, shown(token),
                  value.dump());
        MWB_CHECK(unmap_byte_level(token, raw), "{}: token '{}' has a character outside GPT-2's byte alphabet", vocab_origin,
                  shown(token));
        const auto id = value.get<int32_t>();
        MWB_CHECK(id_of.emplace(raw, id).second, "{}: token '{}' appears twice", vocab_origin, shown(token));
        tokens.emplace_back(id, raw);
        max_id = std::max(max_id, id);
    }
    std::vector<int> seen(static_cast<std::size_t>(max_id) + 1, 0);
    std::vector<const std::string*> by_id(static_cast<std::size_t>(max_id) + 1, nullptr);
    for (const auto& [id, bytes] : tokens) {
        MWB_CHECK(!by_id[id], "{}: id {} is given to two tokens", vocab_origin, id);
        by_id[id] = &bytes;
    }
    token_offset.assign(by_id.size() + 1, 0);
    for (std::size_t id = 0; id < by_id.size(); ++id) {
        if (by_id[id]) token_bytes += *by_id[id];
        token_offset[id + 1] = static_cast<uint32_t>(token_bytes.size());
    }
    for (int b = 0; b < 256; ++b) {
        const auto it = id_of.find(std::string(1, static_cast<char>(b)));
        MWB_CHECK(it != id_of.end(), "{}: no token for byte {} (a byte-level BPE vocabulary has all 256)", vocab_origin,
                  b);
        bpe.byte_id[b] = it->second;
    }
    const auto eod_it = id_of.find("<|endoftext|>");
    MWB_CHECK(eod_it != id_of.end(), "{}: no '<|endoftext|>' token (GPT-2's end-of-document token)", vocab_origin);
    eod = eod_it->second;

    // merges.txt: "#version" line, then one "left right" pair per line; the line order is the rank.
    std::vector<std::array<int32_t, 3>> merge_ids;
    std::size_t pos = 0, line_no = 0;
    std::string left, right;
    while (pos < merges.size()) {
        std::size_t eol = merges.find('\n', pos);
        if (eol == std::string_view::npos) eol = merges.size();
        std::string_view line = merges.substr(pos, eol - pos);
        pos = eol + 1;
        ++line_no;
        if (line_no == 1 && line.starts_with("#version")) continue;
        std::vector<std::string_view> parts;
        for (std::size_t i = 0; i < line.size();) {
            while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
            std::size_t j = i;
            while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
            if (j > i) parts.push_back(line.substr(i, j - i));
            i = j;
        }
        if (parts.empty()) continue;
        MWB_CHECK(parts.size() == 2, "{} line {}: expected two symbols separated by a space, got '{}'", merges_origin,
                  line_no, shown(line));
        MWB_CHECK(unmap_byte_level(parts[0], left) && unmap_byte_level(parts[1], right),
                  "{} line {}: '{}' has a character outside GPT-2's byte alphabet", merges_origin, line_no,
                  shown(line));
        const auto a = id_of.find(left), b = id_of.find(right), m = id_of.find(left + right);
        MWB_CHECK(a != id_of.end() && b != id_of.end() && m != id_of.end(),
                  "{} line {}: '{}' uses or makes a token that is not in {}", merges_origin, line_no, shown(line),
                  vocab_origin);
        merge_ids.push_back({a->second, b->second, m->second});
    }
    bpe.pairs.reserve(merge_ids.size());
    // encoder.py builds dict(zip(merges, range(len(merges)))): a repeated pair keeps its last rank.
    for (std::size_t r = 0; r < merge_ids.size(); ++r)
        bpe.pairs.put(merge_ids[r][0], merge_ids[r][1], static_cast<int32_t>(r), merge_ids[r][2]);

    fingerprint = fmt::format("GPT2BPETokenizer-{:016x}{:016x}", XXH3_64bits(vocab_json.data(), vocab_json.size()),
                              XXH3_64bits(merges.data(), merges.size()));
}

GPT2BPETokenizer::GPT2BPETokenizer(const fs::path& vocab_file, const fs::path& merge_file) {
    const std::string vocab = read_file(vocab_file), merges = read_file(merge_file);
    impl_ = std::make_unique<Impl>(vocab, merges, vocab_file.string(), merge_file.string());
}

GPT2BPETokenizer::GPT2BPETokenizer(std::string_view vocab_json, std::string_view merges, std::string_view origin)
    : impl_(std::make_unique<Impl>(vocab_json, merges, fmt::format("{} (vocab)", origin),
                                   fmt::format("{} (merges)", origin))) {}

GPT2BPETokenizer::~GPT2BPETokenizer() = default;

int64_t GPT2BPETokenizer::vocab_size() const {
    return static_cast<int64_t>(impl_->token_offset.size()) - 1;
}
int32_t GPT2BPETokenizer::eod() const {
    return impl_->eod;
}
std::string GPT2BPETokenizer::fingerprint() const {
    return impl_->fingerprint;
}

void GPT2BPETokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
    thread_local BpeThreadState ts;
    thread_local RegexPretokenizer::Spans words;
    ts.use_for(impl_->instance);
    impl_->pretokenizer.split(text, words);
    for (const auto& [begin, end] : words) impl_->bpe.encode_piece(text.substr(begin, end - begin), ts, out);
}

void GPT2BPETokenizer::decode(std::span<const int32_t> ids, std::string& out) const {
    const auto& off = impl_->token_offset;
    for (const int32_t id : ids) {
        MWB_CHECK(id >= 0 && static_cast<std::size_t>(id) + 1 < off.size() && off[id + 1] > off[id],
                  "GPT2BPETokenizer: id {} is not in the vocabulary (size {})", id, off.size() - 1);
        out.append(impl_->token_bytes, off[id], off[id + 1] - off[id]);
    }
}

}  // namespace mwb::data
