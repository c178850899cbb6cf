#include "backend/data/bpe_core.h"

#include <algorithm>
#include <array>

#include <xxhash.h>

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

}  // namespace

bool unmap_byte_level(std::string_view s, std::string& out) {
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

namespace {

constexpr int32_t kNoMerge = std::numeric_limits<int32_t>::max();

// Short words (nearly all): the rank of every adjacent pair in an array, the minimum found by a scan.
void merge_short(const PairTable& pairs, std::vector<int32_t>& sym, std::vector<int32_t>& rank,
                 std::vector<int32_t>& merged) {
    std::size_t n = sym.size();
    rank.resize(n);
    merged.resize(n);
    for (std::size_t i = 0; i + 1 < n; ++i) rank[i] = pairs.rank(sym[i], sym[i + 1], merged[i]);
    while (n > 1) {
        std::size_t at = 0;
        for (std::size_t i = 1; i + 1 < n; ++i)
            if (rank[i] < rank[at]) at = i;
        if (rank[at] == kNoMerge) break;
        sym[at] = merged[at];
        for (std::size_t i = at + 1; i + 1 < n; ++i) {
            sym[i] = sym[i + 1];
            rank[i] = rank[i + 1];
            merged[i] = merged[i + 1];
        }
        --n;
        if (at + 1 < n) rank[at] = pairs.rank(sym[at], sym[at + 1], merged[at]);
        if (at > 0) rank[at - 1] = pairs.rank(sym[at - 1], sym[at], merged[at - 1]);
    }
    sym.resize(n);
}

}  // namespace

void bpe_merge(const PairTable& pairs, std::vector<int32_t>& sym, BpeScratch& sc) {
    const std::size_t n = sym.size();
    if (n < 2) return;
    if (n <= 48) return merge_short(pairs, sym, sc.next, sc.prev);

    // Long words (a text without spaces, Metaspace tokenizers without a pre-tokenizer): a heap of
    // candidate merges over a linked list, O(n log n). A candidate is stale when its symbols changed.
    using C = BpeScratch::Candidate;
    const auto later = [](const C& a, const C& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
    auto& next = sc.next;
    auto& prev = sc.prev;
    auto& heap = sc.heap;
    next.resize(n);
    prev.resize(n);
    heap.clear();
    const auto push = [&](int32_t pos) {
        const int32_t r = next[pos];
        if (r < 0) return;
        int32_t m = 0;
        const int32_t rank = pairs.rank(sym[pos], sym[r], m);
        if (rank == kNoMerge) return;
        heap.push_back({rank, pos, sym[pos], sym[r], m});
        std::push_heap(heap.begin(), heap.end(), later);
    };
    for (std::size_t i = 0; i < n; ++i) {
        next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
        prev[i] = static_cast<int32_t>(i) - 1;
    }
    for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const C c = heap.back();
        heap.pop_back();
        const int32_t r = next[c.pos];
        if (sym[c.pos] != c.left || r < 0 || sym[r] != c.right) continue;
        sym[c.pos] = c.merged;
        sym[r] = -1;
        next[c.pos] = next[r];
        if (next[r] >= 0) prev[next[r]] = c.pos;
        if (prev[c.pos] >= 0) push(prev[c.pos]);
        push(c.pos);
    }
    std::size_t w = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) sym[w++] = sym[i];
    sym.resize(w);
}

void ByteLevelBpe::encode_piece(std::string_view piece, BpeThreadState& ts, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (piece.size() == 1) {
        out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
        return;
    }
    // Long pieces (rarely repeated) bypass the cache.
    const bool cacheable = piece.size() <= 256;
    const uint64_t h = cacheable ? XXH3_64bits(piece.data(), piece.size()) | 1 : 0;  // 0 marks an empty slot
    uint32_t n = 0;
    if (cacheable)
        if (const int32_t* hit = ts.cache.find(piece, h, n)) {
            out.insert(out.end(), hit, hit + n);
            return;
        }
    auto& sym = ts.symbols;
    sym.clear();
    if (whole)
        if (const auto it = whole->find(piece); it != whole->end()) sym.push_back(it->second);
    if (sym.empty()) {
        sym.resize(piece.size());
        for (std::size_t i = 0; i < piece.size(); ++i) sym[i] = byte_id[static_cast<unsigned char>(piece[i])];
        bpe_merge(pairs, sym, ts.scratch);
    }
    if (cacheable) ts.cache.insert(piece, h, sym);
    out.insert(out.end(), sym.begin(), sym.end());
}

void TokenMatcher::add(std::string text, int32_t id) {
    const auto index = static_cast<uint32_t>(tokens_.size());
    auto& list = by_first_[static_cast<unsigned char>(text.at(0))];
    is_first_[static_cast<unsigned char>(text[0])] = true;
    tokens_.emplace_back(std::move(text), id);
    list.push_back(index);
    std::stable_sort(list.begin(), list.end(),
                     [&](uint32_t a, uint32_t b) { return tokens_[a].first.size() > tokens_[b].first.size(); });
}

TokenMatcher::Match TokenMatcher::find(std::string_view text, std::size_t from) const {
    if (tokens_.empty()) return {};
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    for (std::size_t i = from; i < text.size(); ++i) {
        if (!is_first_[s[i]]) continue;
        for (const uint32_t c : by_first_[s[i]])
            if (text.compare(i, tokens_[c].first.size(), tokens_[c].first) == 0) return {i, c};
    }
    return {};
}

}  // namespace mwb::data
