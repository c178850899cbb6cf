#pragma once
// The parts every BPE tokenizer here shares: the merge table, the merge loop and a per-thread word
// cache. Symbols are token ids; a merge turns the adjacent pair (left, right) into one id. The loop
// merges the pair of lowest rank, leftmost first, one occurrence at a time, until no adjacent pair is
// a merge: the order of Hugging Face's BPE model and of tiktoken (where a pair's rank is the rank of
// the token it makes), and for a consistent merge list the result of GPT-2's encoder.py.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <array>
#include <vector>

namespace mwb::data {

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

/// Byte-level BPE vocabularies (GPT-2's bytes_to_unicode()) spell bytes in an alphabet of printable
/// characters: printable Latin-1 bytes stand for themselves, the other 68 bytes for U+0100, U+0101, ...
/// in byte order. Sets `out` to the raw bytes `s` stands for; false when `s` leaves the alphabet.
bool unmap_byte_level(std::string_view s, std::string& out);

/// Scratch of the merge loop, one per thread.
struct BpeScratch {
    struct Candidate {
        int32_t rank, pos, left, right, merged;
    };
    std::vector<int32_t> next, prev;
    std::vector<Candidate> heap;
};

/// Merges `symbols` in place as described at the top.
void bpe_merge(const PairTable& pairs, std::vector<int32_t>& symbols, BpeScratch& scratch);

/// Token bytes -> id, looked up by string_view without a copy.
struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

/// What a thread keeps between calls: its word cache (valid for one tokenizer, `owner`) and scratch.
struct BpeThreadState {
    uint64_t owner = 0;
    WordCache cache;
    std::vector<int32_t> symbols;
    BpeScratch scratch;
    /// Empties the cache when the thread switches to another tokenizer instance.
    void use_for(uint64_t instance) {
        if (owner != instance) cache.clear(), owner = instance;
    }
};

/// A byte-level BPE model: every byte has a token, merges by rank.
struct ByteLevelBpe {
    PairTable pairs;
    std::array<int32_t, 256> byte_id{};
    /// When set, a piece that is a token as a whole is that token, merges or not (tiktoken; Hugging
    /// Face's ignore_merges).
    const TokenMap* whole = nullptr;
    /// Appends the ids of one piece (its raw bytes), through the thread's word cache.
    void encode_piece(std::string_view piece, BpeThreadState& ts, std::vector<int32_t>& out) const;
};

/// Added / special tokens found in text: the leftmost occurrence, the longest at that position.
class TokenMatcher {
public:
    void add(std::string text, int32_t id);
    struct Match {
        std::size_t pos = std::string_view::npos;
        uint32_t index = 0;  // into the order of add()
    };
    Match find(std::string_view text, std::size_t from) const;
    const std::string& text(uint32_t index) const { return tokens_[index].first; }
    int32_t id(uint32_t index) const { return tokens_[index].second; }
    std::size_t size() const { return tokens_.size(); }

private:
    std::vector<std::pair<std::string, int32_t>> tokens_;
    std::array<std::vector<uint32_t>, 256> by_first_;  // longest first
    std::array<bool, 256> is_first_{};                 // the scan's test: a token starts with this byte
};

}  // namespace mwb::data
