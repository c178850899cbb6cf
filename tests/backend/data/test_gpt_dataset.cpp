// GPTDataset: Megatron-LM's document/sample/shuffle indices (against a NumPy transcription of Megatron's
// code, fixtures/megatron_indices.json), samples against an independent reconstruction, determinism,
// split boundaries, the index cache, and resuming mid-stream.
#include "backend/config/config.h"
#include "backend/core/files.h"
#include "backend/data/byte_tokenizer.h"
#include "backend/data/data_sources.h"
#include "backend/data/gpt_dataset.h"
#include "backend/data/split.h"
#include "data_test_util.h"

#include "support/suite.h"

#include <QtTest>
#include <nlohmann/json.hpp>

#include <random>

namespace test_data_gpt_dataset {

using namespace mwb;
using namespace mwb::data;
using mwb::test::error_of;
using mwb::test::synthetic_token;
using mwb::test::write_synthetic_dataset;

namespace {

std::shared_ptr<const IndexedDataset> synthetic(const QTemporaryDir& dir, const std::vector<int32_t>& lengths,
                                                const char* name = "syn") {
    const std::string prefix = dir.filePath(name).toStdString();
    write_synthetic_dataset(prefix, lengths);
    return std::make_shared<const IndexedDataset>(prefix);
}

GPTDatasetOptions opts(int64_t seq, int64_t samples, uint32_t seed, const QTemporaryDir& cache,
                       Split split = Split::Train) {
    return {seq, samples, seed, split, cache.filePath("cache").toStdString()};
}

std::vector<int32_t> random_lengths(std::size_t n, uint32_t seed, int max_len) {
    std::mt19937 gen(seed);
    std::vector<int32_t> lengths(n);
    for (auto& l : lengths)
        l = static_cast<int32_t>(gen() % static_cast<uint32_t>(max_len + 1));  // includes empty ones
    return lengths;
}

std::vector<int32_t> read_sample(const SampleSource& s, int64_t i) {
    std::vector<int32_t> out(static_cast<std::size_t>(s.sample_tokens()));
    s.read(i, out);
    return out;
}

}  // namespace

class TestGptDataset : public QObject {
    Q_OBJECT
private slots:
    void indices_match_megatron() {
        const auto fixture = nlohmann::json::parse(read_file(MWB_DATA_FIXTURES "/megatron_indices.json"));
        QTemporaryDir dir;
        const auto ds = synthetic(dir, fixture["lengths"].get<std::vector<int32_t>>());
        bool saw_separate_final_epoch = false;
        for (const auto& c : fixture["cases"]) {
            const GPTDataset g(ds, {c["begin"], c["end"]}, opts(c["seq_length"], c["num_samples"], c["seed"], dir));
            const auto doc = c["document_index"].get<std::vector<int32_t>>();
            const auto smp = c["sample_index"].get<std::vector<int64_t>>();
            const auto shf = c["shuffle_index"].get<std::vector<int64_t>>();
            QCOMPARE(g.num_epochs(), c["epochs"].get<int64_t>());
            QVERIFY(std::equal(doc.begin(), doc.end(), g.document_index().begin(), g.document_index().end()));
            QVERIFY(std::equal(smp.begin(), smp.end(), g.sample_index().begin(), g.sample_index().end()));
            QVERIFY(std::equal(shf.begin(), shf.end(), g.shuffle_index().begin(), g.shuffle_index().end()));
            saw_separate_final_epoch |= c["separate_final_epoch"].get<bool>();
        }
        QVERIFY(saw_separate_final_epoch);
    }

    void samples_span_documents_data() {
        QTest::addColumn<int>("seq");
        QTest::addColumn<int>("samples");
        QTest::addColumn<int>("max_len");
        QTest::newRow("short docs, many epochs") << 16 << 500 << 10;
        QTest::newRow("long docs") << 8 << 300 << 60;
        QTest::newRow("one epoch") << 32 << 0 << 40;
        QTest::newRow("seq 1") << 1 << 200 << 5;
    }
    void samples_span_documents() {
        QFETCH(int, seq);
        QFETCH(int, samples);
        QFETCH(int, max_len);
        QTemporaryDir dir;
        const auto lengths = random_lengths(40, 3, max_len);
        const auto ds = synthetic(dir, lengths);
        const GPTDataset g(ds, {5, 37}, opts(seq, samples, 1234, dir));
        QVERIFY(g.size() >= samples);
        // Independently: the documents in document-index order form one token stream; unshuffled sample k
        // is the window [k·seq, k·seq + seq] of it (consecutive samples share one token).
        std::vector<int32_t> stream;
        for (const int32_t id : g.document_index())
            for (int32_t j = 0; j < lengths[static_cast<std::size_t>(id)]; ++j)
                stream.push_back(synthetic_token(id, j));
        for (int64_t i = 0; i < g.size(); ++i) {
            const int64_t k = g.shuffle_index()[static_cast<std::size_t>(i)];
            QVERIFY(static_cast<std::size_t>(k * seq + seq) < stream.size());
            const std::vector<int32_t> expected(stream.begin() + k * seq, stream.begin() + k * seq + seq + 1);
            QCOMPARE(read_sample(g, i), expected);
        }
        QCOMPARE(read_sample(g, g.size() + 3), read_sample(g, 3));  // index i reads sample i % size()
    }

    void same_seed_same_samples_other_seed_other_order() {
        QTemporaryDir dir, other;
        const auto lengths = random_lengths(60, 5, 30);
        const auto ds = synthetic(dir, lengths);
        const GPTDataset a(ds, {0, 60}, opts(16, 200, 1234, dir));
        const GPTDataset b(ds, {0, 60}, opts(16, 200, 1234, other));  // built again, in another cache
        const GPTDataset c(ds, {0, 60}, opts(16, 200, 4321, other));
        QVERIFY(!b.loaded_from_cache());
        QCOMPARE(a.size(), b.size());
        int differ = 0;
        for (int64_t i = 0; i < a.size(); ++i) {
            QCOMPARE(read_sample(a, i), read_sample(b, i));
            differ += read_sample(a, i) != read_sample(c, i);
        }
        QVERIFY2(differ > a.size() / 2, qPrintable(QString::number(differ)));
    }

    void split_boundaries_follow_megatron() {
        using R = std::array<SequenceRange, 3>;
        const auto same = [](const R& a, const R& b) {
            for (int i = 0; i < 3; ++i)
                if (a[i].begin != b[i].begin || a[i].end != b[i].end) return false;
            return true;
        };
        QVERIFY(same(split_ranges("969,30,1", 1189), R{{{0, 1152}, {1152, 1188}, {1188, 1189}}}));
        QVERIFY(same(split_ranges("99,1,0", 1000), R{{{0, 990}, {990, 1000}, {0, 0}}}));
        QVERIFY(same(split_ranges("1,1,1", 10), R{{{0, 3}, {3, 7}, {7, 10}}}));
        QVERIFY(same(split_ranges("100", 5), R{{{0, 5}, {0, 0}, {0, 0}}}));
        QVERIFY(same(split_ranges("1,1", 5), R{{{0, 2}, {2, 5}, {0, 0}}}));  // round(2.5) = 2, half to even
        QVERIFY(same(split_ranges("0.9 0.1", 20), R{{{0, 18}, {18, 20}, {0, 0}}}));
        QVERIFY(error_of([] { split_ranges("9,x,1", 10); }).find("split") != std::string::npos);
        QVERIFY(!error_of([] { split_ranges("0,0,0", 10); }).empty());
        QVERIFY(!error_of([] { split_ranges("1,2,3,4", 10); }).empty());

        // Each split's samples only come from its own sequences.
        QTemporaryDir dir;
        const auto ds = synthetic(dir, random_lengths(100, 9, 20));
        const auto ranges = split_ranges("80,15,5", 100);
        for (const Split s : {Split::Train, Split::Valid, Split::Test}) {
            const SequenceRange r = ranges[static_cast<std::size_t>(s)];
            const GPTDataset g(ds, r, opts(8, 100, 1234, dir, s));
            for (const int32_t id : g.document_index()) QVERIFY(id >= r.begin && id < r.end);
        }
    }

    void index_cache_is_reused_and_repaired() {
        QTemporaryDir dir;
        const auto ds = synthetic(dir, random_lengths(30, 4, 25));
        const GPTDataset first(ds, {0, 30}, opts(12, 150, 1234, dir));
        QVERIFY(!first.loaded_from_cache());
        QVERIFY(!first.cache_prefix().empty());
        QVERIFY(QString::fromStdString(first.cache_prefix()).endsWith("-GPTDataset-train"));
        const GPTDataset second(ds, {0, 30}, opts(12, 150, 1234, dir));
        QVERIFY(second.loaded_from_cache());
        QVERIFY(std::ranges::equal(first.shuffle_index(), second.shuffle_index()));
        QVERIFY(std::ranges::equal(first.sample_index(), second.sample_index()));

        // A damaged cache file is noticed and rebuilt, not trusted.
        const std::string sample_file = first.cache_prefix() + "-sample_index.npy";
        std::string bytes = mwb::test::read_bytes(sample_file);
        mwb::test::write_bytes(sample_file, bytes.substr(0, bytes.size() - 16));
        const GPTDataset third(ds, {0, 30}, opts(12, 150, 1234, dir));
        QVERIFY(!third.loaded_from_cache());
        QVERIFY2(third.describe().find("rebuilt") != std::string::npos, third.describe().c_str());
        QVERIFY(std::ranges::equal(first.sample_index(), third.sample_index()));
        QVERIFY(GPTDataset(ds, {0, 30}, opts(12, 150, 1234, dir)).loaded_from_cache());

        // Other parameters, other cache files.
        QVERIFY(!GPTDataset(ds, {0, 30}, opts(12, 151, 1234, dir)).loaded_from_cache());
    }

    void default_cache_is_megatrons_and_unwritable_is_survivable() {
        QTemporaryDir dir;
        const auto ds = synthetic(dir, random_lengths(20, 8, 25));
        const GPTDataset g(ds, {0, 20}, {8, 50, 1234, Split::Train, ""});
        QVERIFY(QString::fromStdString(g.cache_prefix()).startsWith(dir.filePath("syn/cache/GPTDataset_indices/")));
        const std::string blocked = dir.filePath("not_a_dir").toStdString();
        mwb::test::write_bytes(blocked, "x");
        const GPTDataset h(ds, {0, 20}, {8, 50, 1234, Split::Train, blocked + "/cache"});
        QVERIFY(h.cache_prefix().empty());
        QVERIFY2(h.describe().find("not cached") != std::string::npos, h.describe().c_str());
        QVERIFY(std::ranges::equal(g.shuffle_index(), h.shuffle_index()));
    }

    void too_little_data_is_explained() {
        QTemporaryDir dir;
        const auto ds = synthetic(dir, {3, 2});
        const std::string e = error_of([&] { GPTDataset g(ds, {0, 2}, opts(8, 10, 1, dir)); });
        QVERIFY2(e.find("5 tokens") != std::string::npos && e.find("seq_length") != std::string::npos, e.c_str());
    }

    void resume_reads_the_same_stream() {
        QTemporaryDir dir;
        const std::string prefix = dir.filePath("corpus").toStdString();
        write_synthetic_dataset(prefix, random_lengths(200, 12, 40));
        Config cfg;
        cfg.model.seq_length = 16;
        cfg.data.data_path = {prefix};
        cfg.data.data_cache_path = dir.filePath("cache").toStdString();
        ByteTokenizer bytes_tok;  // ids fit: synthetic tokens are checked against the tokenizer
        const int64_t k = 137, n = 50;
        const auto check = [&](const Tokenizer& tok) {
            const DataSources run = make_data_sources(cfg, tok, 1000, 100);
            std::vector<std::vector<int32_t>> full;
            for (int64_t i = 0; i < k + n; ++i) full.push_back(read_sample(*run.train, i));
            const DataSources resumed = make_data_sources(cfg, tok, 1000, 100);  // a new process, from the cache
            for (int64_t i = k; i < k + n; ++i)
                QCOMPARE(read_sample(*resumed.train, i), full[static_cast<std::size_t>(i)]);
            QVERIFY(resumed.valid);
        };
        QVERIFY(!error_of([&] { make_data_sources(cfg, bytes_tok, 10, 0); }).empty());  // ids beyond 256
        DataConfig d;
        d.tokenizer_type = "NullTokenizer";
        ModelConfig m;
        m.vocab_size = 60000;
        const auto wide = make_tokenizer(d, m);
        check(*wide);
    }
};

MWB_TEST_SUITE_APPLESS(test_data_gpt_dataset, TestGptDataset)
}  // namespace test_data_gpt_dataset
#include "test_gpt_dataset.moc"
