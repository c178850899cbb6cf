// ByteTokenizer, NullTokenizer and the tokenizer factory: round trips, vocabularies, EOD, errors.
#include "backend/config/config.h"
#include "backend/data/byte_tokenizer.h"
#include "backend/data/null_tokenizer.h"
#include "backend/data/tokenizer.h"
#include "data_test_util.h"

#include "support/suite.h"

#include <QtTest>

#include <random>

namespace test_data_tokenizers {

using namespace mwb;
using namespace mwb::data;
using mwb::test::error_of;

class TestTokenizers : public QObject {
    Q_OBJECT
private slots:
    void byte_round_trips_every_byte() {
        ByteTokenizer tok;
        QCOMPARE(tok.vocab_size(), 257);
        QCOMPARE(tok.eod(), 256);
        std::string all;
        for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
        const auto ids = tok.encode(all);
        QCOMPARE(ids.size(), std::size_t{256});
        for (int b = 0; b < 256; ++b) QCOMPARE(ids[static_cast<std::size_t>(b)], b);
        QCOMPARE(tok.decode(ids), all);

        std::mt19937 gen(7);
        std::string random(10000, '\0');
        for (char& c : random) c = static_cast<char>(gen() & 0xff);
        QCOMPARE(tok.decode(tok.encode(random)), random);
        QCOMPARE(tok.decode(tok.encode("In the beginning")), std::string("In the beginning"));
        QVERIFY(tok.encode("").empty());
    }

    void byte_eod_decodes_to_nothing_and_bad_ids_throw() {
        ByteTokenizer tok;
        const std::vector<int32_t> ids{'a', 256, 'b'};
        QCOMPARE(tok.decode(ids), std::string("ab"));
        QVERIFY(error_of([&] { tok.decode(std::vector<int32_t>{257}); }).find("257") != std::string::npos);
        QVERIFY(error_of([&] { tok.decode(std::vector<int32_t>{-1}); }).find("-1") != std::string::npos);
    }

    void null_tokenizer_is_megatrons() {
        NullTokenizer tok(1001, 1000);
        QCOMPARE(tok.vocab_size(), 1001);
        QCOMPARE(tok.eod(), 1000);
        const auto ids = tok.encode("1 2  999\n0 1000");
        QCOMPARE(ids, (std::vector<int32_t>{1, 2, 999, 0, 1000}));
        QCOMPARE(tok.decode(ids), std::string("1 2 999 0 1000"));
        QCOMPARE(tok.encode(tok.decode(ids)), ids);
        QVERIFY(error_of([&] { tok.encode("1 x 2"); }).find("'x'") != std::string::npos);
        QVERIFY(error_of([&] { tok.encode("1001"); }).find("1001") != std::string::npos);
        QVERIFY(error_of([&] { tok.encode("-3"); }).find("-3") != std::string::npos);
        QVERIFY(!error_of([] { NullTokenizer bad(0, 0); }).empty());
        QVERIFY(error_of([] { NullTokenizer bad(10, 10); }).find("null-tokenizer-eod-id") != std::string::npos);
    }

    void factory_builds_each_type() {
        DataConfig d;
        ModelConfig m;
        d.tokenizer_type = "ByteTokenizer";
        QCOMPARE(make_tokenizer(d, m)->name(), std::string("ByteTokenizer"));
        d.tokenizer_type = "NullTokenizer";
        m.vocab_size = 50;
        const auto null = make_tokenizer(d, m);
        QCOMPARE(null->vocab_size(), 50);
        QCOMPARE(null->fingerprint(), std::string("NullTokenizer-50-eod49"));
    }

    // Megatron-LM's NullTokenizer, megatron/core/tokenizers/text/libraries/null_tokenizer.py: since
    // core_v0.18.0 (commit c9dfe34, #4057) vocab_size = N and eod = N - 1 unless --null-tokenizer-eod-id;
    // before it (and the legacy megatron/training/tokenizer _NullTokenizer) vocab_size = N + 1, eod = N.
    void null_tokenizer_readings_current_and_legacy() {
        DataConfig d;
        ModelConfig m;
        d.tokenizer_type = "NullTokenizer";
        m.vocab_size = 128256;
        auto tok = make_tokenizer(d, m);
        QCOMPARE(tok->vocab_size(), 128256);
        QCOMPARE(tok->eod(), 128255);
        d.null_tokenizer_eod_id = 0;
        tok = make_tokenizer(d, m);
        QCOMPARE(tok->vocab_size(), 128256);
        QCOMPARE(tok->eod(), 0);
        d.null_tokenizer_eod_id = -1;
        d.null_tokenizer_legacy_eod = true;
        tok = make_tokenizer(d, m);
        QCOMPARE(tok->vocab_size(), 128257);
        QCOMPARE(tok->eod(), 128256);
        QCOMPARE(tok->encode("128256"), (std::vector<int32_t>{128256}));
    }

    void factory_errors_name_the_field_and_file() {
        DataConfig d;
        ModelConfig m;
        d.tokenizer_type = "NullTokenizer";
        QVERIFY(error_of([&] { make_tokenizer(d, m); }).find("vocab_size") != std::string::npos);
        d.tokenizer_type = "SentencePieceTokenizer";
        QVERIFY(error_of([&] { make_tokenizer(d, m); }).find("SentencePieceTokenizer") != std::string::npos);
        d.tokenizer_type = "GPT2BPETokenizer";
        QVERIFY(error_of([&] { make_tokenizer(d, m); }).find("vocab_file") != std::string::npos);
        d.vocab_file = "/nonexistent/vocab.json";
        d.merge_file = "/nonexistent/merges.txt";
        const std::string e = error_of([&] { make_tokenizer(d, m); });
        QVERIFY2(e.find("vocab_file") != std::string::npos && e.find("/nonexistent/vocab.json") != std::string::npos,
                 e.c_str());
        QTemporaryDir dir;
        const std::string vocab = dir.filePath("vocab.json").toStdString();
        mwb::test::write_bytes(vocab, "{\"a\": 0}");
        d.vocab_file = vocab;
        const std::string e2 = error_of([&] { make_tokenizer(d, m); });
        QVERIFY2(e2.find("merge_file") != std::string::npos && e2.find("/nonexistent/merges.txt") != std::string::npos,
                 e2.c_str());
    }
};

MWB_TEST_SUITE_APPLESS(test_data_tokenizers, TestTokenizers)
}  // namespace test_data_tokenizers
#include "test_tokenizers.moc"
