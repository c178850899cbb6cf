// Blending several datasets (Megatron's deterministic greedy choice), data_path parsing, and the
// factory mwb-train uses: mock data, weighted data paths, missing files, resuming.
#include "backend/config/config.h"
#include "backend/data/blended_source.h"
#include "backend/data/data_sources.h"
#include "backend/data/mock_data.h"
#include "backend/data/tokenizer.h"
#include "data_test_util.h"

#include "support/suite.h"

#include <QtTest>

#include <random>

namespace test_data_blending {

using namespace mwb;
using namespace mwb::data;
using mwb::test::error_of;

namespace {

std::vector<int32_t> read_sample(const SampleSource& s, int64_t i) {
    std::vector<int32_t> out(static_cast<std::size_t>(s.sample_tokens()));
    s.read(i, out);
    return out;
}

std::vector<int32_t> lengths(std::size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::vector<int32_t> l(n);
    for (auto& x : l) x = static_cast<int32_t>(1 + gen() % 50);
    return l;
}

std::unique_ptr<Tokenizer> wide_tokenizer() {
    DataConfig d;
    d.tokenizer_type = "NullTokenizer";
    ModelConfig m;
    m.vocab_size = 60000;
    return make_tokenizer(d, m);
}

}  // namespace

class TestBlending : public QObject {
    Q_OBJECT
private slots:
    void greedy_choice_matches_megatron() {
        std::vector<int16_t> ds;
        std::vector<int64_t> sample;
        const std::vector<double> w{0.7, 0.3};
        build_blending_indices(w, 10, ds, sample);
        // Worked by hand from helpers.cpp: the source whose target share lags most is chosen.
        QCOMPARE(ds, (std::vector<int16_t>{0, 1, 0, 0, 1, 0, 0, 1, 0, 0}));
        QCOMPARE(sample, (std::vector<int64_t>{0, 0, 1, 2, 1, 3, 4, 2, 5, 6}));
    }

    void proportions_hold_within_one_percent() {
        const std::vector<double> w{0.5, 0.3, 0.15, 0.05};
        std::vector<int16_t> ds;
        std::vector<int64_t> sample;
        build_blending_indices(w, 50000, ds, sample);
        std::vector<int64_t> count(w.size(), 0);
        for (std::size_t i = 0; i < ds.size(); ++i) {
            ++count[static_cast<std::size_t>(ds[i])];
            if (i + 1 >= 1000 && (i + 1) % 997 == 0)  // every prefix of the stream, not only the whole
                for (std::size_t d = 0; d < w.size(); ++d)
                    QVERIFY(std::abs(static_cast<double>(count[d]) / static_cast<double>(i + 1) - w[d]) < 0.01);
        }
    }

    void data_path_is_read_like_megatron() {
        auto b = parse_data_path({"a"});
        QCOMPARE(b.prefixes, (std::vector<std::string>{"a"}));
        QVERIFY(b.weights.empty());
        b = parse_data_path({"a", "b"});
        QCOMPARE(b.prefixes, (std::vector<std::string>{"a", "b"}));
        QVERIFY(b.weights.empty());
        b = parse_data_path({"0.3", "a", "0.7", "b"});
        QCOMPARE(b.prefixes, (std::vector<std::string>{"a", "b"}));
        QCOMPARE(b.weights, (std::vector<double>{0.3, 0.7}));
        b = parse_data_path({"0.3 a 0.7 b"});  // one flag value holding the whole list
        QCOMPARE(b.prefixes, (std::vector<std::string>{"a", "b"}));
        QVERIFY(!error_of([] { parse_data_path({"0.3", "a", "b", "c"}); }).empty());
        QVERIFY(!error_of([] { parse_data_path({"-1", "a"}); }).empty());
        // Non-finite weights are named as such (NaN is not "negative"; inf would make every weight NaN).
        for (const char* w : {"nan", "inf", "-inf"}) {
            const std::string e = error_of([&] { parse_data_path({w, "a", "0.5", "b"}); });
            QVERIFY2(e.find("is not a finite number") != std::string::npos, e.c_str());
        }
    }

    void weighted_data_path_blends_in_proportion() {
        QTemporaryDir dir;
        const std::string a = dir.filePath("a").toStdString(), b = dir.filePath("b").toStdString();
        mwb::test::write_synthetic_dataset(a, lengths(300, 1));
        mwb::test::write_synthetic_dataset(b, lengths(500, 2));
        Config cfg;
        cfg.model.seq_length = 32;
        cfg.data.data_path = {"0.25", a, "0.75", b};
        cfg.data.data_cache_path = dir.filePath("cache").toStdString();
        const auto tok = wide_tokenizer();
        const int64_t n = 20000;
        const DataSources src = make_data_sources(cfg, *tok, n, 400);
        const auto* blend = dynamic_cast<const BlendedSampleSource*>(src.train.get());
        QVERIFY(blend);
        QCOMPARE(blend->size(), n);
        int64_t from_a = 0;
        for (int64_t i = 0; i < n; ++i) from_a += blend->dataset_of(i) == 0;
        QVERIFY(std::abs(static_cast<double>(from_a) / n - 0.25) < 0.01);
        for (int64_t i = 0; i < 200; ++i)
            QCOMPARE(read_sample(*blend, i), read_sample(blend->source(blend->dataset_of(i)), blend->sample_of(i)));
        QVERIFY(src.valid);
        QVERIFY(src.description.find("blend of 2 datasets") != std::string::npos);

        // Resuming at sample k in a new process reads what the first run would have read.
        const DataSources again = make_data_sources(cfg, *tok, n, 400);
        for (int64_t i = 15000; i < 15100; ++i) QCOMPARE(read_sample(*again.train, i), read_sample(*src.train, i));

        cfg.data.data_path = {a, b};  // unweighted: by tokens
        const DataSources unweighted = make_data_sources(cfg, *tok, 1000, 0);
        QVERIFY(dynamic_cast<const BlendedSampleSource*>(unweighted.train.get()));
        QVERIFY(!unweighted.valid);  // no validation samples asked for
    }

    void missing_files_are_named() {
        Config cfg;
        cfg.model.seq_length = 8;
        cfg.data.data_path = {"/nonexistent/corpus_text_document"};
        const auto tok = wide_tokenizer();
        const std::string e = error_of([&] { make_data_sources(cfg, *tok, 10, 0); });
        QVERIFY2(e.find("/nonexistent/corpus_text_document.idx") != std::string::npos, e.c_str());
        QTemporaryDir dir;
        const std::string p = dir.filePath("half").toStdString();
        mwb::test::write_synthetic_dataset(p, {5, 6});
        QFile::remove(QString::fromStdString(p + ".bin"));
        cfg.data.data_path = {p};
        const std::string e2 = error_of([&] { make_data_sources(cfg, *tok, 10, 0); });
        QVERIFY2(e2.find(p + ".bin") != std::string::npos, e2.c_str());
    }

    void mock_data_needs_no_files() {
        Config cfg;
        cfg.model.seq_length = 64;
        cfg.data.mock_data = true;
        const auto tok = make_tokenizer(DataConfig{}, ModelConfig{});
        const DataSources src = make_data_sources(cfg, *tok, 100, 10);
        QVERIFY(dynamic_cast<const MockSampleSource*>(src.train.get()));
        QVERIFY(src.valid);
        QCOMPARE(src.train->sample_tokens(), 65);
        const auto t = read_sample(*src.train, 5), v = read_sample(*src.valid, 5);
        QVERIFY(t != v);  // train and valid are different streams
        for (const int32_t id : t) QVERIFY(id >= 0 && id < tok->vocab_size());
    }
};

MWB_TEST_SUITE_APPLESS(test_data_blending, TestBlending)
}  // namespace test_data_blending
#include "test_blending.moc"
