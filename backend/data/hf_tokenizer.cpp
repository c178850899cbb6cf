#include "backend/data/hf_tokenizer.h"

#include "backend/data/bpe_core.h"
#include "backend/data/regex_pretokenizer.h"
#include "mwb/kernels/error.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <xxhash.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <unordered_map>

namespace mwb::data {

namespace {

using Json = nlohmann::json;

std::atomic<uint64_t> g_next_instance{1};
constexpr int64_t kMaxId = int64_t{1} << 24;  // vocabularies are far smaller; bounds what a file can allocate

std::string shown(std::string_view s) {
    return s.size() <= 40 ? std::string(s) : std::string(s.substr(0, 40)) + "...";
}

// "foo" or {"content": "foo", ...} (tokenizer_config.json spells special tokens both ways).
std::string token_text(const Json& j) {
    if (j.is_string()) return j.get<std::string>();
    if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
    return {};
}

std::size_t utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

bool is_space(unsigned char c) {
    return c == ' ' || (c >= 9 && c <= 13);
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
    if (from.empty()) return;
    std::string out;
    out.reserve(s.size());
    std::size_t pos = 0;
    for (std::size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
        out.append(s, pos, hit - pos);
        out.append(to);
    }
    out.append(s, pos);
    s.swap(out);
}

// Unicode normalisation by ICU; ASCII text is already in every normal form.
void unicode_normalize(std::string& s, const UNormalizer2* form, std::string_view origin) {
    if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) return;
    UErrorCode st = U_ZERO_ERROR;
    std::u16string in(s.size(), u'\0'), out;
    int32_t n = 0;
    u_strFromUTF8(reinterpret_cast<UChar*>(in.data()), static_cast<int32_t>(in.size()), &n, s.data(),
                  static_cast<int32_t>(s.size()), &st);
    MWB_CHECK(U_SUCCESS(st), "{}: UTF-8 to UTF-16 failed: {}", origin, u_errorName(st));
    in.resize(static_cast<std::size_t>(n));
    out.resize(in.size() * 3 + 16);
    n = unorm2_normalize(form, reinterpret_cast<const UChar*>(in.data()), static_cast<int32_t>(in.size()),
                         reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &st);
    MWB_CHECK(U_SUCCESS(st), "{}: Unicode normalisation failed: {}", origin, u_errorName(st));
    out.resize(static_cast<std::size_t>(n));
    s.resize(out.size() * 3);
    u_strToUTF8(s.data(), static_cast<int32_t>(s.size()), &n, reinterpret_cast<const UChar*>(out.data()),
                static_cast<int32_t>(out.size()), &st);
    MWB_CHECK(U_SUCCESS(st), "{}: UTF-16 to UTF-8 failed: {}", origin, u_errorName(st));
    s.resize(static_cast<std::size_t>(n));
}

struct Normalizer {
    enum Kind { Prepend, Replace, Unicode } kind;
    std::string a, b;                     // Prepend: a; Replace: a -> b
    const UNormalizer2* form = nullptr;  // Unicode
};

struct PreTokenizer {
    enum Kind { Split, ByteLevel, Metaspace } kind = Split;
    std::unique_ptr<RegexPretokenizer> regex;  // Split, ByteLevel with use_regex
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
    std::string replacement;        // Metaspace
    enum Prepend { Always, First, Never } prepend = Always;
    bool split = true;
};

struct AddedFlags {
    bool lstrip, rstrip, single_word;
};

}  // namespace

struct HuggingFaceTokenizer::Impl {
    uint64_t instance = g_next_instance.fetch_add(1);
    std::string origin;
    std::vector<Normalizer> normalizers;
    std::vector<PreTokenizer> pre;
    bool byte_level = false;
    // The model. Pieces are in "model space": raw bytes for byte-level models, else the normalized text.
    TokenMap piece_id;
    ByteLevelBpe bpe;                          // merges (both kinds) and, byte-level, each byte's token
    std::array<int32_t, 128> ascii_id{};       // char-level: ASCII characters' tokens (-1 none)
    std::array<int32_t, 256> fallback_id{};    // <0xXX> tokens (byte_fallback), -1 none
    bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
    int32_t unk = -1;
    TokenMatcher added;
    std::vector<AddedFlags> added_flags;  // by TokenMatcher index
    // Decoding: every id's bytes, back to back.
    std::string decoded;
    std::vector<uint32_t> decoded_offset;
    std::size_t strip_leading_spaces = 0;
    bool changes_text = false;  // a normalizer or prefix that decode does not undo
    int32_t eod = -1, bos = -1;
    std::string fingerprint;

    void parse_normalizer(const Json& j);
    void parse_pre_tokenizer(const Json& j);
    void parse_decoder(const Json& j, bool& replace_meta, bool& fallback);
    int32_t find_token(std::string_view text) const;

    struct ThreadState;
    void encode_section(std::string_view section, bool at_text_start, ThreadState& ts,
                        std::vector<int32_t>& out) const;
    void encode_piece(std::string_view piece, ThreadState& ts, std::vector<int32_t>& out) const;
};

struct HuggingFaceTokenizer::Impl::ThreadState {
    BpeThreadState bpe;
    std::string norm, buf, buf2;
    RegexPretokenizer::Spans spans, spans2;
};

void HuggingFaceTokenizer::Impl::parse_normalizer(const Json& j) {
    if (j.is_null()) return;
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        for (const Json& n : j.at("normalizers")) parse_normalizer(n);
    } else if (type == "Prepend") {
        normalizers.push_back({Normalizer::Prepend, j.at("prepend").get<std::string>(), {}});
    } else if (type == "Replace") {
        MWB_CHECK(j.at("pattern").contains("String"),
                  "{}: normalizer Replace with a Regex pattern is not supported (only String patterns)", origin);
        normalizers.push_back(
            {Normalizer::Replace, j["pattern"]["String"].get<std::string>(), j.at("content").get<std::string>()});
    } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
        UErrorCode st = U_ZERO_ERROR;
        const UNormalizer2* f = type == "NFC"    ? unorm2_getNFCInstance(&st)
                                : type == "NFD"  ? unorm2_getNFDInstance(&st)
                                : type == "NFKC" ? unorm2_getNFKCInstance(&st)
                                                 : unorm2_getNFKDInstance(&st);
        MWB_CHECK(U_SUCCESS(st), "{}: ICU has no {} normalizer: {}", origin, type, u_errorName(st));
        normalizers.push_back({Normalizer::Unicode, {}, {}, f});
        changes_text = true;
    } else {
        MWB_FAIL("{}: normalizer type '{}' is not supported (Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD)",
                 origin, type);
    }
}

void HuggingFaceTokenizer::Impl::parse_pre_tokenizer(const Json& j) {
    if (j.is_null()) return;
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        for (const Json& p : j.at("pretokenizers")) parse_pre_tokenizer(p);
    } else if (type == "Split") {
        PreTokenizer p;
        p.kind = PreTokenizer::Split;
        const Json& pat = j.at("pattern");
        std::string regex;
        if (pat.contains("Regex")) {
            regex = pat["Regex"].get<std::string>();
        } else {
            const std::string lit = pat.at("String").get<std::string>();
            for (const char c : lit) {  // escape every ASCII punctuation character
                if (std::ispunct(static_cast<unsigned char>(c))) regex.push_back('\\');
                regex.push_back(c);
            }
        }
        p.regex = std::make_unique<RegexPretokenizer>(regex, origin + " (pre_tokenizer Split)");
        const std::string b = j.value("behavior", "Isolated");
        if (b == "Isolated")
            p.behavior = SplitBehavior::Isolated;
        else if (b == "Removed")
            p.behavior = SplitBehavior::Removed;
        else if (b == "MergedWithPrevious")
            p.behavior = SplitBehavior::MergedWithPrevious;
        else if (b == "MergedWithNext")
            p.behavior = SplitBehavior::MergedWithNext;
        else
            MWB_FAIL("{}: Split behavior '{}' is not supported (Isolated, Removed, MergedWithPrevious, MergedWithNext)",
                     origin, b);
        p.invert = j.value("invert", false);
        pre.push_back(std::move(p));
    } else if (type == "ByteLevel") {
        PreTokenizer p;
        p.kind = PreTokenizer::ByteLevel;
        p.add_prefix_space = j.value("add_prefix_space", false);
        if (j.value("use_regex", true))
            p.regex = std::make_unique<RegexPretokenizer>(RegexPretokenizer::kGpt2Pattern,
                                                          origin + " (pre_tokenizer ByteLevel)");
        if (p.add_prefix_space) changes_text = true;
        byte_level = true;
        pre.push_back(std::move(p));
    } else if (type == "Metaspace") {
        PreTokenizer p;
        p.kind = PreTokenizer::Metaspace;
        p.replacement = j.value("replacement", std::string("\u2581"));
        const std::string scheme =
            j.contains("prepend_scheme") ? j["prepend_scheme"].get<std::string>()
                                         : (j.value("add_prefix_space", true) ? "always" : "never");
        p.prepend = scheme == "first" ? PreTokenizer::First : scheme == "never" ? PreTokenizer::Never
                                                                                  : PreTokenizer::Always;
        p.split = j.value("split", true);
        pre.push_back(std::move(p));
    } else if (type == "Digits") {
        PreTokenizer p;
        p.kind = PreTokenizer::Split;
        p.regex = std::make_unique<RegexPretokenizer>(j.value("individual_digits", false) ? "[0-9]" : "[0-9]+",
                                                      origin + " (pre_tokenizer Digits)");
        pre.push_back(std::move(p));
    } else {
        MWB_FAIL("{}: pre_tokenizer type '{}' is not supported (Sequence, Split, ByteLevel, Metaspace, Digits)", origin,
                 type);
    }
}

// Decoding is per token plus a leading-space strip: what the decoders in use amount to.
void HuggingFaceTokenizer::Impl::parse_decoder(const Json& j, bool& replace_meta, bool& fallback) {
    if (j.is_null()) return;
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        for (const Json& d : j.at("decoders")) parse_decoder(d, replace_meta, fallback);
    } else if (type == "ByteLevel") {
        byte_level = true;
    } else if (type == "Replace") {
        const bool meta = j.contains("pattern") && j["pattern"].value("String", "") == "\u2581" &&
                          j.value("content", "") == " ";
        MWB_CHECK(meta, "{}: decoder Replace is supported for \"\u2581\" -> \" \" only (converted SentencePiece "
                  "tokenizers), got {}", origin, j.dump());
        replace_meta = true;
    } else if (type == "ByteFallback") {
        fallback = true;
    } else if (type == "Fuse") {
    } else if (type == "Strip") {
        strip_leading_spaces = j.value("start", 0);
    } else if (type == "Metaspace") {
        replace_meta = true;
        const std::string scheme = j.value("prepend_scheme", j.value("add_prefix_space", true) ? "always" : "never");
        if (scheme != "never") strip_leading_spaces = 1;
    } else {
        MWB_FAIL("{}: decoder type '{}' is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, "
                 "Sequence)",
                 origin, type);
    }
}

int32_t HuggingFaceTokenizer::Impl::find_token(std::string_view text) const {
    for (uint32_t i = 0; i < added.size(); ++i)
        if (added.text(i) == text) return added.id(i);
    if (byte_level) {
        std::string raw;
        if (!unmap_byte_level(text, raw)) return -1;
        const auto it = piece_id.find(raw);
        return it == piece_id.end() ? -1 : it->second;
    }
    const auto it = piece_id.find(text);
    return it == piece_id.end() ? -1 : it->second;
}

struct HuggingFaceTokenizer::Files {
    std::string json, config, origin;
};

HuggingFaceTokenizer::Files HuggingFaceTokenizer::read_files(const fs::path& path) {
    std::error_code ec;
    const fs::path file = fs::is_directory(path, ec) ? path / "tokenizer.json" : path;
    MWB_CHECK(fs::is_regular_file(file, ec),
              "tokenizer_model '{}': no such file (expected a Hugging Face tokenizer.json or a directory with one)",
              file.string());
    const fs::path config = file.parent_path() / "tokenizer_config.json";
    return {read_file(file), fs::is_regular_file(config, ec) ? read_file(config) : "", file.string()};
}

HuggingFaceTokenizer::HuggingFaceTokenizer(const Files& f) : HuggingFaceTokenizer(f.json, f.config, f.origin) {}

HuggingFaceTokenizer::HuggingFaceTokenizer(const fs::path& path) : HuggingFaceTokenizer(read_files(path)) {}

HuggingFaceTokenizer::HuggingFaceTokenizer(std::string_view tokenizer_json, std::string_view config_json,
                                           std::string_view origin)
    : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.origin = std::string(origin);
    Json j, cfg;
    try {
        j = Json::parse(tokenizer_json);
        if (!config_json.empty()) cfg = Json::parse(config_json);
    } catch (const Json::exception& e) {
        MWB_FAIL("{}: not valid JSON ({}); expected a Hugging Face tokenizer.json / tokenizer_config.json", origin,
                 e.what());
    }
    try {
        MWB_CHECK(j.is_object() && j.contains("model"), "{}: no \"model\" object (not a Hugging Face tokenizer.json)",
                  origin);
        const Json& model = j["model"];
        const std::string type = model.value("type", "BPE");
        MWB_CHECK(type == "BPE", "{}: model type '{}' is not supported (BPE only)", origin, type);
        MWB_CHECK(model.value("dropout", Json()).is_null() || model["dropout"].get<double>() == 0.0,
                  "{}: model.dropout is set; BPE dropout is for training and not supported", origin);
        for (const char* f : {"continuing_subword_prefix", "end_of_word_suffix"})
            MWB_CHECK(!model.contains(f) || model[f].is_null() || model[f].get<std::string>().empty(),
                      "{}: model.{} is set; not supported", origin, f);
        m.parse_normalizer(j.value("normalizer", Json()));
        m.parse_pre_tokenizer(j.value("pre_tokenizer", Json()));
        bool replace_meta = false, fallback_decode = false;
        m.parse_decoder(j.value("decoder", Json()), replace_meta, fallback_decode);
        for (const Normalizer& n : m.normalizers)
            if (n.kind == Normalizer::Replace && !(replace_meta && n.b == "\u2581" && n.a == " "))
                m.changes_text = true;
        m.byte_fallback = model.value("byte_fallback", false);
        m.fuse_unk = model.value("fuse_unk", false);
        m.ignore_merges = model.value("ignore_merges", false);

        // Vocabulary: model space <-> id, and every id's decoded bytes.
        const Json& vocab = model.at("vocab");
        MWB_CHECK(vocab.is_object() && !vocab.empty(), "{}: model.vocab must be an object of token -> id", origin);
        std::vector<std::string> text_of;
        std::string raw;
        const auto put_text = [&](int64_t id, std::string s) {
            if (static_cast<std::size_t>(id) >= text_of.size()) text_of.resize(static_cast<std::size_t>(id) + 1);
            text_of[static_cast<std::size_t>(id)] = std::move(s);
        };
        std::vector<char> has(0);
        m.piece_id.reserve(vocab.size());
        for (const auto& [token, value] : vocab.items()) {
            MWB_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < kMaxId,
                      "{}: model.vocab token '{}' has id {}, expected an integer in [0, 2^24)", origin, shown(token),
                      value.dump());
            const auto id = value.get<int32_t>();
            std::string key = token, dec = token;
            if (m.byte_level && unmap_byte_level(token, raw)) key = dec = raw;
            if (!m.byte_level) {
                if (replace_meta) replace_all(dec, "\u2581", " ");
                if (fallback_decode && token.size() == 6 && token.starts_with("<0x") && token[5] == '>' &&
                    std::isxdigit(static_cast<unsigned char>(token[3])) &&
                    std::isxdigit(static_cast<unsigned char>(token[4])))
                    dec = std::string(1, static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16)));
            }
            MWB_CHECK(m.piece_id.emplace(key, id).second, "{}: model.vocab token '{}' appears twice", origin,
                      shown(token));
            if (static_cast<std::size_t>(id) < has.size() && has[id])
                MWB_FAIL("{}: model.vocab gives id {} to two tokens", origin, id);
            if (static_cast<std::size_t>(id) >= has.size()) has.resize(static_cast<std::size_t>(id) + 1, 0);
            has[id] = 1;
            put_text(id, dec);
        }
        if (model.contains("unk_token") && model["unk_token"].is_string()) {
            const auto it = m.piece_id.find(model["unk_token"].get<std::string>());
            MWB_CHECK(it != m.piece_id.end(), "{}: model.unk_token '{}' is not in model.vocab", origin,
                      model["unk_token"].get<std::string>());
            m.unk = it->second;
        }
        m.bpe.byte_id.fill(-1);
        m.ascii_id.fill(-1);
        m.fallback_id.fill(-1);
        for (int b = 0; b < 256; ++b) {
            if (m.byte_level) {
                const auto it = m.piece_id.find(std::string(1, static_cast<char>(b)));
                MWB_CHECK(it != m.piece_id.end(), "{}: no token for byte {} (a byte-level BPE vocabulary has all 256)",
                          origin, b);
                m.bpe.byte_id[b] = it->second;
            } else {
                if (b < 128) {
                    const auto it = m.piece_id.find(std::string(1, static_cast<char>(b)));
                    if (it != m.piece_id.end()) m.ascii_id[b] = it->second;
                }
                const auto it = m.piece_id.find(fmt::format("<0x{:02X}>", b));
                if (it != m.piece_id.end()) m.fallback_id[b] = it->second;
            }
        }

        // Merges: "a b" strings or ["a", "b"] pairs; the order is the rank.
        const Json& merges = model.at("merges");
        MWB_CHECK(merges.is_array(), "{}: model.merges must be an array", origin);
        m.bpe.pairs.reserve(merges.size());
        std::string left, right;
        for (std::size_t r = 0; r < merges.size(); ++r) {
            const Json& e = merges[r];
            if (e.is_string()) {
                const std::string s = e.get<std::string>();
                const std::size_t sp = s.find(' ', 1);
                MWB_CHECK(sp != std::string::npos, "{}: model.merges[{}] '{}' is not two symbols separated by a space",
                          origin, r, shown(s));
                left = s.substr(0, sp), right = s.substr(sp + 1);
            } else {
                MWB_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(),
                          "{}: model.merges[{}] must be \"a b\" or [\"a\", \"b\"]", origin, r);
                left = e[0].get<std::string>(), right = e[1].get<std::string>();
            }
            if (m.byte_level) {
                std::string l, rr;
                MWB_CHECK(unmap_byte_level(left, l) && unmap_byte_level(right, rr),
                          "{}: model.merges[{}] has a character outside the byte-level alphabet", origin, r);
                left = std::move(l), right = std::move(rr);
            }
            const auto a = m.piece_id.find(left), b = m.piece_id.find(right), c = m.piece_id.find(left + right);
            MWB_CHECK(a != m.piece_id.end() && b != m.piece_id.end() && c != m.piece_id.end(),
                      "{}: model.merges[{}] uses or makes a token that is not in model.vocab", origin, r);
            m.bpe.pairs.put(a->second, b->second, static_cast<int32_t>(r), c->second);  // a repeated pair: the last rank
        }

        // Added tokens (their ids may lie beyond the vocabulary).
        for (const Json& a : j.value("added_tokens", Json::array())) {
            const std::string content = a.at("content").get<std::string>();
            const auto id = a.at("id").get<int64_t>();
            MWB_CHECK(!content.empty() && id >= 0 && id < kMaxId,
                      "{}: added_tokens entry '{}' has empty content or an id outside [0, 2^24)", origin, content);
            put_text(id, content);
            m.added.add(content, static_cast<int32_t>(id));
            m.added_flags.push_back({a.value("lstrip", false), a.value("rstrip", false), a.value("single_word", false)});
        }
        if (m.ignore_merges) m.bpe.whole = &m.piece_id;

        m.decoded_offset.assign(text_of.size() + 1, 0);
        for (std::size_t id = 0; id < text_of.size(); ++id) {
            m.decoded += text_of[id];
            m.decoded_offset[id + 1] = static_cast<uint32_t>(m.decoded.size());
        }
        if (m.unk >= 0 && !m.byte_fallback) m.changes_text = true;

        // tokenizer_config.json: EOS (Megatron's eod) and BOS.
        const std::string eos = cfg.is_object() && cfg.contains("eos_token") ? token_text(cfg["eos_token"]) : "";
        const std::string bos = cfg.is_object() && cfg.contains("bos_token") ? token_text(cfg["bos_token"]) : "";
        if (!eos.empty()) {
            m.eod = m.find_token(eos);
            MWB_CHECK(m.eod >= 0, "{}: tokenizer_config.json's eos_token '{}' is not a token", origin, eos);
        } else {
            for (const char* name : {"<|endoftext|>", "</s>", "<|end_of_text|>", "<|im_end|>"})
                if (m.eod < 0) m.eod = m.find_token(name);
            MWB_CHECK(m.eod >= 0,
                      "{}: no end-of-document token: tokenizer_config.json (next to tokenizer.json) has no eos_token, "
                      "and none of <|endoftext|>, </s>, <|end_of_text|>, <|im_end|> is a token",
                      origin);
        }
        if (!bos.empty()) m.bos = m.find_token(bos);
    } catch (const Json::exception& e) {
        MWB_FAIL("{}: unexpected structure ({})", origin, e.what());
    }
    m.fingerprint =
        fmt::format("HuggingFaceTokenizer-{:016x}{:016x}", XXH3_64bits(tokenizer_json.data(), tokenizer_json.size()),
                    XXH3_64bits(config_json.data(), config_json.size()));
}

HuggingFaceTokenizer::~HuggingFaceTokenizer() = default;

int64_t HuggingFaceTokenizer::vocab_size() const {
    return static_cast<int64_t>(impl_->decoded_offset.size()) - 1;
}
int32_t HuggingFaceTokenizer::eod() const {
    return impl_->eod;
}
int32_t HuggingFaceTokenizer::bos() const {
    return impl_->bos;
}
std::string HuggingFaceTokenizer::fingerprint() const {
    return impl_->fingerprint;
}
int32_t HuggingFaceTokenizer::token_id(std::string_view token) const {
    return impl_->find_token(token);
}
bool HuggingFaceTokenizer::round_trips() const {
    return !impl_->changes_text;
}

void HuggingFaceTokenizer::Impl::encode_piece(std::string_view piece, ThreadState& ts,
                                              std::vector<int32_t>& out) const {
    if (byte_level) return bpe.encode_piece(piece, ts.bpe, out);
    if (piece.empty()) return;
    // Character-level BPE (Metaspace tokenizers): a symbol per character, byte fallback or unk.
    const bool cacheable = piece.size() <= 256;
    const uint64_t h = cacheable ? XXH3_64bits(piece.data(), piece.size()) | 1 : 0;  // 0 marks an empty slot
    uint32_t n = 0;
    if (cacheable)
        if (const int32_t* hit = ts.bpe.cache.find(piece, h, n)) {
            out.insert(out.end(), hit, hit + n);
            return;
        }
    auto& sym = ts.bpe.symbols;
    sym.clear();
    bool whole = false;
    if (ignore_merges)
        if (const auto it = piece_id.find(piece); it != piece_id.end()) sym.push_back(it->second), whole = true;
    for (std::size_t i = 0; !whole && i < piece.size();) {
        const auto c = static_cast<unsigned char>(piece[i]);
        const std::size_t len = std::min(utf8_len(c), piece.size() - i);
        int32_t id = -1;
        if (c < 0x80) {
            id = ascii_id[c];
        } else if (const auto it = piece_id.find(piece.substr(i, len)); it != piece_id.end()) {
            id = it->second;
        }
        if (id >= 0) {
            sym.push_back(id);
        } else {
            bool all = byte_fallback;
            for (std::size_t k = 0; all && k < len; ++k) all = fallback_id[static_cast<unsigned char>(piece[i + k])] >= 0;
            if (all) {
                for (std::size_t k = 0; k < len; ++k)
                    sym.push_back(fallback_id[static_cast<unsigned char>(piece[i + k])]);
            } else {
                MWB_CHECK(unk >= 0, "{}: the character '{}' has no token, and the model has no unk_token", origin,
                          piece.substr(i, len));
                if (!(fuse_unk && !sym.empty() && sym.back() == unk)) sym.push_back(unk);
            }
        }
        i += len;
    }
    if (!whole) bpe_merge(bpe.pairs, sym, ts.bpe.scratch);
    if (cacheable) ts.bpe.cache.insert(piece, h, sym);
    out.insert(out.end(), sym.begin(), sym.end());
}

void HuggingFaceTokenizer::Impl::encode_section(std::string_view section, bool at_text_start, ThreadState& ts,
                                                std::vector<int32_t>& out) const {
    if (section.empty()) return;
    std::string_view text = section;
    if (!normalizers.empty()) {
        ts.norm.assign(section);
        for (const Normalizer& n : normalizers) {
            if (n.kind == Normalizer::Prepend) {
                if (!ts.norm.empty()) ts.norm.insert(0, n.a);
            } else if (n.kind == Normalizer::Replace) {
                replace_all(ts.norm, n.a, n.b);
            } else {
                unicode_normalize(ts.norm, n.form, origin);
            }
        }
        text = ts.norm;
    }
    auto& spans = ts.spans;
    spans.assign(1, {0u, static_cast<uint32_t>(text.size())});
    for (const PreTokenizer& p : pre) {
        if (p.kind == PreTokenizer::Split || (p.kind == PreTokenizer::ByteLevel && !p.add_prefix_space)) {
            if (!p.regex) continue;
            ts.spans2.clear();
            for (const auto& [b, e] : spans) p.regex->split_range(text, b, e, p.behavior, p.invert, ts.spans2);
            spans.swap(ts.spans2);
            continue;
        }
        // Steps that rewrite the text: each piece is copied into a new buffer with its prefix.
        ts.buf2.clear();
        ts.spans2.clear();
        for (const auto& [b, e] : spans) {
            const uint32_t start = static_cast<uint32_t>(ts.buf2.size());
            std::string_view piece = text.substr(b, e - b);
            if (p.kind == PreTokenizer::ByteLevel) {
                if (piece.empty() || piece[0] != ' ') ts.buf2.push_back(' ');
                ts.buf2.append(piece);
            } else {
                std::string rep(piece);
                replace_all(rep, " ", p.replacement);
                const bool first = at_text_start && b == 0;
                if (!rep.starts_with(p.replacement) &&
                    (p.prepend == PreTokenizer::Always || (p.prepend == PreTokenizer::First && first)))
                    ts.buf2 += p.replacement;
                ts.buf2 += rep;
            }
            ts.spans2.emplace_back(start, static_cast<uint32_t>(ts.buf2.size()));
        }
        ts.buf.swap(ts.buf2);
        text = ts.buf;
        spans.swap(ts.spans2);
        if (p.kind == PreTokenizer::ByteLevel && p.regex) {
            ts.spans2.clear();
            for (const auto& [b, e] : spans)
                p.regex->split_range(text, b, e, SplitBehavior::Isolated, false, ts.spans2);
            spans.swap(ts.spans2);
        } else if (p.kind == PreTokenizer::Metaspace && p.split) {
            ts.spans2.clear();
            for (const auto& [b, e] : spans) {  // MergedWithNext on the replacement
                uint32_t start = b;
                for (std::size_t at = text.find(p.replacement, b + 1); at != std::string_view::npos && at < e;
                     at = text.find(p.replacement, at + 1)) {
                    ts.spans2.emplace_back(start, static_cast<uint32_t>(at));
                    start = static_cast<uint32_t>(at);
                }
                if (start < e) ts.spans2.emplace_back(start, e);
            }
            spans.swap(ts.spans2);
        }
    }
    // `text` may live in ts.buf: encode_piece does not touch it.
    for (const auto& [b, e] : spans) encode_piece(text.substr(b, e - b), ts, out);
}

void HuggingFaceTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
    const Impl& m = *impl_;
    thread_local Impl::ThreadState ts;
    ts.bpe.use_for(m.instance);
    check_utf8(text, m.origin);
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    std::size_t pos = 0;
    for (std::size_t from = 0;;) {
        const TokenMatcher::Match hit = m.added.find(text, from);
        if (hit.pos == std::string_view::npos) break;
        const AddedFlags& f = m.added_flags[hit.index];
        std::size_t b = hit.pos, e = hit.pos + m.added.text(hit.index).size();
        // single_word: not inside a word (neither neighbour is an ASCII letter or digit).
        if (f.single_word && ((b > 0 && std::isalnum(s[b - 1])) || (e < text.size() && std::isalnum(s[e])))) {
            from = hit.pos + 1;
            continue;
        }
        if (f.lstrip)
            while (b > pos && is_space(s[b - 1])) --b;
        if (f.rstrip)
            while (e < text.size() && is_space(s[e])) ++e;
        m.encode_section(text.substr(pos, b - pos), pos == 0, ts, out);
        out.push_back(m.added.id(hit.index));
        pos = from = e;
    }
    m.encode_section(text.substr(pos), pos == 0, ts, out);
}

void HuggingFaceTokenizer::decode(std::span<const int32_t> ids, std::string& out) const {
    const Impl& m = *impl_;
    const auto& off = m.decoded_offset;
    const std::size_t start = out.size();
    for (const int32_t id : ids) {
        MWB_CHECK(id >= 0 && static_cast<std::size_t>(id) + 1 < off.size() && off[id + 1] > off[id],
                  "HuggingFaceTokenizer: id {} is not in the vocabulary (size {})", id, off.size() - 1);
        out.append(m.decoded, off[id], off[id + 1] - off[id]);
    }
    std::size_t strip = 0;
    while (strip < m.strip_leading_spaces && start + strip < out.size() && out[start + strip] == ' ') ++strip;
    out.erase(start, strip);
}

}  // namespace mwb::data
