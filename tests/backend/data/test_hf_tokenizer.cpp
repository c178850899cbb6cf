// The parts of the new tokenizers that need no download: the pattern scanners against PCRE2 on the
// whole KJV and random text, Hugging Face's Split behaviours (the example of its documentation), a
// small SentencePiece-style tokenizer.json (merges, byte fallback, Metaspace prepend schemes, added
// tokens), a small tiktoken vocabulary, and the errors bad files give. Exact ids on real vocabularies
// are test_tokenizer_reference.cpp's.
#include "backend/core/files.h"
#include "backend/data/bundled_corpus.h"
#include "backend/data/hf_tokenizer.h"
#include "backend/data/preprocess.h"
#include "backend/data/regex_pretokenizer.h"
#include "backend/data/tiktoken_tokenizer.h"
#include "backend/data/tokenizer.h"
#include "backend/config/config.h"
#include "data_test_util.h"

#include "support/suite.h"

#include <QtTest>
#include <nlohmann/json.hpp>

#include <random>

namespace test_data_hf_tokenizer {

using namespace mwb;
using namespace mwb::data;
using mwb::test::error_of;

namespace {

using Words = std::vector<std::string>;

Words pieces(const RegexPretokenizer& pre, std::string_view text, SplitBehavior b, bool invert = false) {
    RegexPretokenizer::Spans spans;
    pre.split_range(text, 0, static_cast<uint32_t>(text.size()), b, invert, spans);
    Words out;
    for (const auto& [s, e] : spans) out.emplace_back(text.substr(s, e - s));
    return out;
}

void append_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        s += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    } else if (cp < 0x10000) {
        s += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
              static_cast<char>(0x80 | (cp & 0x3F))};
    } else {
        s += {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
              static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
}

// Text that exercises every branch of the patterns: ASCII classes at the boundaries that matter
// (contractions in both cases, digit runs, CR/LF inside space runs) mixed with non-ASCII letters,
// digits, spaces and symbols that force the regex.
std::string random_text(std::mt19937& gen, int n) {
    static const std::vector<std::string> atoms = {
        "a", "Z", "q", "'", "'s", "'S", "'t", "'re", "'RE", "'ve", "'ll", "'Ll", "'d", "'x", " ", "  ", "\t", "\n",
        "\r\n", "\r", " \n ", "0", "12", "345", "6789", ".", ",", "!?", "(", "-", "/", "_", "\x0b", "\x0c", "\x1f"};
    static const std::vector<uint32_t> unicode = {0xE9,   0xDF,   0x17F,  0x391,  0x3B1,  0x416,  0x4E2D, 0x65E5,
                                                  0x663,  0x660,  0xA0,   0x2003, 0x2028, 0x3000, 0x2014, 0x2026,
                                                  0x1F600, 0x301,  0xB2,   0x2167, 0x85};
    std::string s;
    for (int i = 0; i < n; ++i) {
        if (gen() % 5 == 0)
            append_utf8(s, unicode[gen() % unicode.size()]);
        else
            s += atoms[gen() % atoms.size()];
    }
    return s;
}

// A SentencePiece-style tokenizer.json (Llama 2's layout): characters, byte fallback, "▁" merges.
nlohmann::ordered_json tiny_metaspace_json(bool legacy_normalizer, const std::string& scheme = "first") {
    nlohmann::ordered_json vocab;
    vocab["<unk>"] = 0;
    vocab["<s>"] = 1;
    vocab["</s>"] = 2;
    for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
    vocab["\u2581"] = 259;
    vocab["a"] = 260;
    vocab["b"] = 261;
    vocab["\u2581a"] = 262;
    vocab["ab"] = 263;
    vocab["\u2581ab"] = 264;
    nlohmann::ordered_json j;
    j["added_tokens"] = nlohmann::json::array(
        {{{"id", 1}, {"content", "<s>"}, {"special", true}}, {{"id", 2}, {"content", "</s>"}, {"special", true}}});
    if (legacy_normalizer) {
        j["normalizer"] = {{"type", "Sequence"},
                           {"normalizers",
                            {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                             {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
        j["pre_tokenizer"] = nullptr;
        j["decoder"] = {{"type", "Sequence"},
                        {"decoders",
                         {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                          {{"type", "ByteFallback"}},
                          {{"type", "Fuse"}},
                          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
    } else {
        j["normalizer"] = nullptr;
        j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", true}};
        j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", true}};
    }
    j["model"] = {{"type", "BPE"},          {"dropout", nullptr}, {"unk_token", "<unk>"}, {"fuse_unk", true},
                  {"byte_fallback", true}, {"vocab", vocab},     {"merges", {"\u2581 a", "a b", "\u2581a b"}}};
    return j;
}

const std::string kConfig = R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}})";

using Ids = std::vector<int32_t>;

}  // namespace

class TestHfTokenizer : public QObject {
    Q_OBJECT
private slots:
    void fast_paths_agree_with_pcre2() {
        std::vector<std::string> texts;
        try {
            for (const auto& c : read_kjv_chapters()) texts.push_back(c);
        } catch (const std::exception&) {
            qInfo("KJV not installed: random text only");
        }
        std::mt19937 gen(5);
        for (int i = 0; i < 400; ++i) texts.push_back(random_text(gen, 200));
        for (const std::string_view pattern :
             {RegexPretokenizer::kGpt2Pattern, RegexPretokenizer::kLlama3Pattern, RegexPretokenizer::kQwen2Pattern,
              RegexPretokenizer::kTiktokenV1Pattern}) {
            const RegexPretokenizer pre(pattern);
            QVERIFY(pre.has_fast_path());
            RegexPretokenizer::Spans fast, reference;
            for (const std::string& t : texts) {
                pre.split(t, fast);
                pre.split_with_regex_only(t, reference);
                if (fast != reference) {
                    std::size_t k = 0;
                    while (k < fast.size() && k < reference.size() && fast[k] == reference[k]) ++k;
                    const auto at = k < reference.size() ? reference[k].first : 0u;
                    QFAIL(qPrintable(QString("pattern %1: piece %2 differs at byte %3: '%4'")
                                         .arg(QString::fromUtf8(pattern.data(), static_cast<int>(pattern.size())))
                                         .arg(k)
                                         .arg(at)
                                         .arg(QString::fromStdString(t.substr(at, 20)))));
                }
            }
        }
        QVERIFY(!RegexPretokenizer(RegexPretokenizer::kTiktokenV2Pattern).has_fast_path());
    }

    void llama3_pattern_examples() {
        const RegexPretokenizer pre(RegexPretokenizer::kLlama3Pattern);
        QCOMPARE(pieces(pre, "Hello, world!  It's 2024.\n\n", SplitBehavior::Isolated),
                 (Words{"Hello", ",", " world", "!", " ", " It", "'s", " ", "202", "4", ".\n\n"}));
        QCOMPARE(pieces(pre, "I'LL (see) 12345", SplitBehavior::Isolated),
                 (Words{"I", "'LL", " (", "see", ")", " ", "123", "45"}));
        QCOMPARE(pieces(pre, "a \n\n b", SplitBehavior::Isolated), (Words{"a", " \n\n", " b"}));
    }

    // The example of Hugging Face's Split documentation: "the-final--countdown" split on "-".
    void split_behaviours_follow_hugging_face() {
        const RegexPretokenizer dash("-");
        const std::string t = "the-final--countdown";
        QCOMPARE(pieces(dash, t, SplitBehavior::Removed), (Words{"the", "final", "countdown"}));
        QCOMPARE(pieces(dash, t, SplitBehavior::Isolated), (Words{"the", "-", "final", "-", "-", "countdown"}));
        QCOMPARE(pieces(dash, t, SplitBehavior::MergedWithPrevious), (Words{"the-", "final-", "-", "countdown"}));
        QCOMPARE(pieces(dash, t, SplitBehavior::MergedWithNext), (Words{"the", "-final", "-", "-countdown"}));
        QCOMPARE(pieces(dash, t, SplitBehavior::Removed, true), (Words{"-", "-", "-"}));
    }

    void metaspace_legacy_normalizer_tokenizer() {
        const HuggingFaceTokenizer tok(tiny_metaspace_json(true).dump(), kConfig, "tiny");
        QCOMPARE(tok.vocab_size(), 265);
        QCOMPARE(tok.eod(), 2);
        QCOMPARE(tok.bos(), 1);
        QVERIFY(tok.round_trips());
        // "▁ab▁ab": "▁ a" twice (leftmost first), then "▁a b".
        QCOMPARE(tok.encode("ab ab"), (Ids{264, 264}));
        QCOMPARE(tok.encode("ba"), (Ids{259, 261, 260}));  // "▁ba": no merge applies
        QCOMPARE(tok.encode("c"), (Ids{259, 3 + 'c'}));     // byte fallback
        QCOMPARE(tok.encode("\u00e9"), (Ids{259, 3 + 0xC3, 3 + 0xA9}));
        QCOMPARE(tok.encode("<s>ab</s>"), (Ids{1, 264, 2}));  // the normalizer prepends to each section
        for (const std::string t : {"ab ab", "c", "\u00e9t\u00e9 ab", "  two  spaces ", "a\nb"})
            QCOMPARE(tok.decode(tok.encode(t)), t);
    }

    // ignore_merges (Llama 3): a piece that is a token is that token, even when no merges lead to it.
    void ignore_merges_takes_whole_pieces() {
        auto j = tiny_metaspace_json(true);
        j["model"]["vocab"]["\u2581ba"] = 265;
        const HuggingFaceTokenizer merging(j.dump(), kConfig, "merging");
        QCOMPARE(merging.encode("ba"), (Ids{259, 261, 260}));
        j["model"]["ignore_merges"] = true;
        const HuggingFaceTokenizer whole(j.dump(), kConfig, "whole");
        QCOMPARE(whole.encode("ba"), (Ids{265}));
        QCOMPARE(whole.encode("ab ab"), (Ids{264, 264}));  // "▁ab▁ab" is not a token: merges as before
        QCOMPARE(whole.decode(whole.encode("ba")), std::string("ba"));
    }

    void metaspace_prepend_schemes() {
        const HuggingFaceTokenizer first(tiny_metaspace_json(false, "first").dump(), kConfig, "first");
        const HuggingFaceTokenizer always(tiny_metaspace_json(false, "always").dump(), kConfig, "always");
        const HuggingFaceTokenizer never(tiny_metaspace_json(false, "never").dump(), kConfig, "never");
        QCOMPARE(first.encode("ab ab"), (Ids{264, 264}));
        QCOMPARE(first.encode("<s>ab"), (Ids{1, 263}));   // not at the start of the text: no "▁"
        QCOMPARE(always.encode("<s>ab"), (Ids{1, 264}));  // every section
        QCOMPARE(never.encode("ab ab"), (Ids{263, 264}));
        QCOMPARE(first.decode(first.encode("ab ab")), std::string("ab ab"));
        QCOMPARE(never.decode(never.encode("ab ab")), std::string("ab ab"));
    }

    void unknown_characters_without_byte_fallback() {
        auto j = tiny_metaspace_json(true);
        j["model"]["byte_fallback"] = false;
        const HuggingFaceTokenizer tok(j.dump(), kConfig, "unk");
        QCOMPARE(tok.encode("cd"), (Ids{259, 0}));  // fuse_unk: one <unk> for the run
        QVERIFY(!tok.round_trips());
        j["model"]["unk_token"] = nullptr;
        const HuggingFaceTokenizer none(j.dump(), kConfig, "nounk");
        const std::string e = error_of([&] { none.encode("c"); });
        QVERIFY2(e.find("nounk") != std::string::npos && e.find("'c'") != std::string::npos, e.c_str());
    }

    void parallel_encoding_equals_serial() {
        const HuggingFaceTokenizer tok(tiny_metaspace_json(true).dump(), kConfig, "tiny");
        std::mt19937 gen(3);
        std::vector<std::string> texts;
        for (int i = 0; i < 64; ++i) texts.push_back(random_text(gen, 100));
        std::vector<Ids> serial(texts.size()), parallel(texts.size());
        for (std::size_t i = 0; i < texts.size(); ++i) serial[i] = tok.encode(texts[i]);
        parallel_for(static_cast<int64_t>(texts.size()), 4, [&](int64_t i) { parallel[i] = tok.encode(texts[i]); });
        QVERIFY(serial == parallel);
        for (std::size_t i = 0; i < texts.size(); ++i) QCOMPARE(tok.decode(serial[i]), texts[i]);
    }

    void bad_tokenizer_files_are_named() {
        const auto err = [](const std::string& json) {
            return error_of([&] { HuggingFaceTokenizer(json, kConfig, "bad.json"); });
        };
        QVERIFY(err("{").find("bad.json: not valid JSON") != std::string::npos);
        QVERIFY(err("{}").find("no \"model\"") != std::string::npos);
        auto j = tiny_metaspace_json(true);
        j["model"]["type"] = "WordPiece";
        QVERIFY(err(j.dump()).find("model type 'WordPiece' is not supported") != std::string::npos);
        j = tiny_metaspace_json(true);
        j["model"]["merges"].push_back("x y");
        QVERIFY2(err(j.dump()).find("model.merges[3]") != std::string::npos, err(j.dump()).c_str());
        j = tiny_metaspace_json(true);
        j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
        QVERIFY(err(j.dump()).find("pre_tokenizer type 'BertPreTokenizer'") != std::string::npos);
        j = tiny_metaspace_json(true);
        j["model"]["vocab"] = 5;
        QVERIFY(err(j.dump()).find("bad.json") != std::string::npos);
        const std::string e = error_of([] { HuggingFaceTokenizer(tiny_metaspace_json(true).dump(), R"({"eos_token": "<eos>"})", "c"); });
        QVERIFY2(e.find("eos_token '<eos>' is not a token") != std::string::npos, e.c_str());
        const std::string missing = error_of([] { HuggingFaceTokenizer(fs::path("/nonexistent/tok")); });
        QVERIFY2(missing.find("/nonexistent/tok") != std::string::npos, missing.c_str());
    }

    void tiktoken_small_vocabulary() {
        // Ranks: the 256 bytes, then "ab", "abc", "bc", " a": "abc" must come from "ab"+"c" (rank 256
        // first), a whole piece that is a token is taken as it is.
        nlohmann::json v = nlohmann::json::array();
        const auto b64 = [](std::string_view s) {
            static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            std::string out;
            std::size_t i = 0;
            for (; i + 2 < s.size(); i += 3) {
                const uint32_t n = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8) | uint8_t(s[i + 2]);
                out += {t[n >> 18], t[(n >> 12) & 63], t[(n >> 6) & 63], t[n & 63]};
            }
            if (s.size() - i == 1) {
                const uint32_t n = uint8_t(s[i]) << 16;
                out += {t[n >> 18], t[(n >> 12) & 63], '=', '='};
            } else if (s.size() - i == 2) {
                const uint32_t n = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8);
                out += {t[n >> 18], t[(n >> 12) & 63], t[(n >> 6) & 63], '='};
            }
            return out;
        };
        int rank = 0;
        for (int b = 0; b < 256; ++b, ++rank)
            v.push_back({{"rank", rank}, {"token_bytes", b64(std::string(1, char(b)))}, {"token_str", ""}});
        for (const char* t : {"ab", "abc", "bc", " a"})
            v.push_back({{"rank", rank++}, {"token_bytes", b64(t)}, {"token_str", t}});
        const TikTokenizer tok(v.dump(), "tiny.json", "v1", 10);
        QCOMPARE(tok.vocab_size(), 10 + 260);
        QCOMPARE(tok.encode("abc"), (Ids{10 + 257}));
        QCOMPARE(tok.encode("abcbc"), (Ids{10 + 257, 10 + 258}));
        QCOMPARE(tok.encode(" abd"), (Ids{10 + 0x20, 10 + 256, 10 + 0x64}));  // "ab" first, then nothing
        QCOMPARE(tok.encode("x</s>"), (Ids{10 + 'x', 2}));
        QCOMPARE(tok.decode(tok.encode("x</s> abc")), std::string("x</s> abc"));

        const auto err = [&](const nlohmann::json& j, const char* pattern = "v1") {
            return error_of([&] { TikTokenizer(j.dump(), "t.json", pattern, 10); });
        };
        QVERIFY(err(v, "v3").find("tiktoken_pattern 'v3'") != std::string::npos);
        auto bad = v;
        bad[300 - 44]["rank"] = 7;
        QVERIFY2(err(bad).find("t.json: entry 256 has rank 7") != std::string::npos, err(bad).c_str());
        bad = v;
        bad[257]["token_bytes"] = "!!";
        QVERIFY(err(bad).find("entry 257") != std::string::npos);
        bad = v;
        std::swap(bad[0], bad[1]);
        QVERIFY(err(bad).find("t.json: entry 0 has rank 1") != std::string::npos);
        QVERIFY(err(nlohmann::json::object()).find("t.json") != std::string::npos);
    }

    void factory_needs_tokenizer_model() {
        DataConfig d;
        ModelConfig m;
        for (const char* type : {"HuggingFaceTokenizer", "SentencePieceTokenizer", "TikTokenizer"}) {
            d.tokenizer_type = type;
            const std::string e = error_of([&] { make_tokenizer(d, m); });
            QVERIFY2(e.find("tokenizer_model") != std::string::npos && e.find(type) != std::string::npos, e.c_str());
        }
        d.tokenizer_type = "SentencePieceTokenizer";
        d.tokenizer_model = "/nonexistent/tokenizer.model";
        const std::string e = error_of([&] { make_tokenizer(d, m); });
        QVERIFY2(e.find("/nonexistent/tokenizer.model") != std::string::npos, e.c_str());
        QTemporaryDir tmp;
        const std::string junk = (tmp.path() + "/junk.model").toStdString();
        mwb::test::write_bytes(junk, "not a protobuf at all");
        d.tokenizer_model = junk;
        const std::string e2 = error_of([&] { make_tokenizer(d, m); });
        QVERIFY2(e2.find("junk.model: not a SentencePiece model") != std::string::npos, e2.c_str());
    }
};

MWB_TEST_SUITE_GUILESS(test_data_hf_tokenizer, TestHfTokenizer)
}  // namespace test_data_hf_tokenizer
#include "test_hf_tokenizer.moc"
