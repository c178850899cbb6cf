#include "data/gpt2_bpe_tokenizer.h"

#include "data/gpt2_pretokenizer.h"
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

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes for the
// code points 256, 257, ... in byte order. vocab.json and merges.txt spell byte strings in this alphabet.
struct ByteAlphabet {
    std::array<uint32_t, 256> to_cp{};
    std::array<int, 324> to_byte{};
    ByteAlphabet() {
        to_byte.fill(-1);
        int next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            to_cp[b] = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(next++);
            to_byte[to_cp[b]] = b;
        }
    }
};
const ByteAlphabet& alphabet() {
    static const ByteAlphabet a;
    return a;
}

// The raw bytes a vocab.json / merges.txt string stands for; empty optional-like flag on failure.
bool unmap_bytes(std::string_view s, std::string& out) {
    out.clear();
    const auto& a = alphabet();
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        uint32_t cp = 0;
        std::size_t n = 0;
        if (c < 0x80)
            cp = c, n = 1;
        else if ((c & 0xE0) == 0xC0 && i + 1 < s.size())
            cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu), n = 2;
        else
            return false;  // the alphabet ends at U+0143: one or two UTF-8 bytes
        if (cp >= a.to_byte.size() || a.to_byte[cp] < 0) return false;
        out.push_back(static_cast<char>(a.to_byte[cp]));
        i += n;
    }
    return true;
}

std::string shown(std::string_view s) {
    return s.size() <= 40 ? std::string(s) : std::string(s.substr(0, 40)) + "...";
}

// (left id, right id) -> (rank, merged id), open addressing: the hot lookup of BPE.
class PairTable {
public:
    void reserve(std::size_t n) {
        std::size_t cap = 16;
        while (cap < 2 * n) cap <<= 1;
        keys_.assign(cap, kEmpty);
        vals_.assign(cap, {});
        mask_ = cap - 1;
    }
    void put(int32_t a, int32_t b, int32_t rank, int32_t merged) {
        const uint64_t key = pack(a, b);
        std::size_t i = slot(key);
        while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
        keys_[i] = key;
        vals_[i] = {rank, merged};
    }
    /// Rank of the pair, or INT32_MAX when it is not a merge; `merged` receives the merged id.
    int32_t rank(int32_t a, int32_t b, int32_t& merged) const {
        const uint64_t key = pack(a, b);
        for (std::size_t i = slot(key);; i = (i + 1) & mask_) {
            if (keys_[i] == key) {
                merged = vals_[i].merged;
                return vals_[i].rank;
            }
            if (keys_[i] == kEmpty) return std::numeric_limits<int32_t>::max();
        }
    }

private:
    struct Value {
        int32_t rank = 0, merged = 0;
    };
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    static uint64_t pack(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    std::size_t slot(uint64_t key) const {
        return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_;
    }
    std::vector<uint64_t> keys_;
    std::vector<Value> vals_;
    std::size_t mask_ = 0;
};

// Word -> token ids, one per thread. Keys and ids live in two arenas; the table holds offsets.
class WordCache {
public:
    const int32_t* find(std::string_view w, uint64_t h, uint32_t& n) const {
        if (slots_.empty()) return nullptr;
        for (std::size_t i = home(h);; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (s.hash == 0) return nullptr;
            if (s.hash == h && s.key_len == w.size() &&
                std::memcmp(keys_.data() + s.key_off, w.data(), w.size()) == 0) {
                n = s.tok_len;
                return ids_.data() + s.tok_off;
            }
        }
    }
    void insert(std::string_view w, uint64_t h, std::span<const int32_t> ids) {
        if (keys_.size() + w.size() > kMaxKeyBytes || ids_.size() + ids.size() > kMaxIds) clear();
        if (2 * (used_ + 1) > slots_.size()) grow();
        std::size_t i = home(h);
        while (slots_[i].hash != 0) i = (i + 1) & mask_;
        slots_[i] = {h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(w.size()),
                     static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(ids.size())};
        keys_.append(w);
        ids_.insert(ids_.end(), ids.begin(), ids.end());
        ++used_;
    }
    void clear() {
        slots_.clear();
        keys_.clear();
        ids_.clear();
        used_ = 0;
        mask_ = 0;
    }

private:
    struct Slot {
        uint64_t hash = 0;
        uint32_t key_off = 0, key_len = 0, tok_off = 0, tok_len = 0;
    };
    std::size_t home(uint64_t h) const { return static_cast<std::size_t>(h >> 1) & mask_; }
    static constexpr std::size_t kMaxKeyBytes = std::size_t{64} << 20, kMaxIds = std::size_t{16} << 20;
    void grow() {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(std::max<std::size_t>(1024, old.size() * 2), Slot{});
        mask_ = slots_.size() - 1;
        for (const Slot& s : old) {
            if (s.hash == 0) continue;
            std::size_t i = home(s.hash);
            while (slots_[i].hash != 0) i = (i + 1) & mask_;
            slots_[i] = s;
        }
    }
    std::vector<Slot> slots_;
    std::string keys_;
    std::vector<int32_t> ids_;
    std::size_t used_ = 0, mask_ = 0;
};

std::atomic<uint64_t> g_next_instance{1};

}  // namespace

struct GPT2BPETokenizer::Impl {
    uint64_t instance = g_next_instance.fetch_add(1);
    Gpt2Pretokenizer pretokenizer;
    PairTable pairs;
    std::array<int32_t, 256> byte_id{};
    std::string token_bytes;             // every token's raw bytes, back to back
    std::vector<uint32_t> token_offset;  // id -> [offset[id], offset[id + 1]) in token_bytes
    int32_t eod = -1;
    std::string fingerprint;

    Impl(std::string_view vocab_json, std::string_view merges, std::string_view vocab_origin,
         std::string_view merges_origin);
    void bpe(std::string_view word, std::vector<int32_t>& symbols) const;
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
        MWB_CHECK(unmap_bytes(token, raw), "{}: token '{}' has a character outside GPT-2's byte alphabet", vocab_origin,
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
        byte_id[b] = it->second;
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
        MWB_CHECK(unmap_bytes(parts[0], left) && unmap_bytes(parts[1], right),
                  "{} line {}: '{}' has a character outside GPT-2's byte alphabet", merges_origin, line_no,
                  shown(line));
        const auto a = id_of.find(left), b = id_of.find(right), m = id_of.find(left + right);
        MWB_CHECK(a != id_of.end() && b != id_of.end() && m != id_of.end(),
                  "{} line {}: '{}' uses or makes a token that is not in {}", merges_origin, line_no, shown(line),
                  vocab_origin);
        merge_ids.push_back({a->second, b->second, m->second});
    }
    pairs.reserve(merge_ids.size());
    // encoder.py builds dict(zip(merges, range(len(merges)))): a repeated pair keeps its last rank.
    for (std::size_t r = 0; r < merge_ids.size(); ++r)
        pairs.put(merge_ids[r][0], merge_ids[r][1], static_cast<int32_t>(r), merge_ids[r][2]);

    fingerprint = fmt::format("GPT2BPETokenizer-{:016x}{:016x}", XXH3_64bits(vocab_json.data(), vocab_json.size()),
                              XXH3_64bits(merges.data(), merges.size()));
}

// encoder.py's bpe(): merge the lowest-ranked adjacent pair, every occurrence left to right, until no
// adjacent pair is a merge. `symbols` receives the token ids.
void GPT2BPETokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& symbols) const {
    symbols.resize(word.size());
    for (std::size_t i = 0; i < word.size(); ++i) symbols[i] = byte_id[static_cast<unsigned char>(word[i])];
    std::size_t n = symbols.size();
    while (n > 1) {
        int32_t best = std::numeric_limits<int32_t>::max(), merged = -1, m = 0;
        std::size_t at = 0;
        for (std::size_t i = 0; i + 1 < n; ++i) {
            const int32_t r = pairs.rank(symbols[i], symbols[i + 1], m);
            if (r < best) best = r, at = i, merged = m;
        }
        if (best == std::numeric_limits<int32_t>::max()) break;
        const int32_t first = symbols[at], second = symbols[at + 1];
        std::size_t w = at;
        for (std::size_t i = at; i < n;) {
            if (i + 1 < n && symbols[i] == first && symbols[i + 1] == second) {
                symbols[w++] = merged;
                i += 2;
            } else {
                symbols[w++] = symbols[i++];
            }
        }
        n = w;
    }
    symbols.resize(n);
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
    // Per-thread scratch and word cache, reset when this thread switches to another tokenizer.
    struct ThreadState {
        uint64_t owner = 0;
        WordCache cache;
        std::vector<std::pair<uint32_t, uint32_t>> words;
        std::vector<int32_t> symbols;
    };
    thread_local ThreadState ts;
    if (ts.owner != impl_->instance) {
        ts.cache.clear();
        ts.owner = impl_->instance;
    }
    impl_->pretokenizer.split(text, ts.words);
    for (const auto& [begin, end] : ts.words) {
        const std::string_view word = text.substr(begin, end - begin);
        if (word.size() == 1) {
            out.push_back(impl_->byte_id[static_cast<unsigned char>(word[0])]);
            continue;
        }
        const uint64_t h = XXH3_64bits(word.data(), word.size()) | 1;  // 0 marks an empty cache slot
        uint32_t n = 0;
        if (const int32_t* hit = ts.cache.find(word, h, n)) {
            out.insert(out.end(), hit, hit + n);
            continue;
        }
        impl_->bpe(word, ts.symbols);
        ts.cache.insert(word, h, ts.symbols);
        out.insert(out.end(), ts.symbols.begin(), ts.symbols.end());
    }
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
