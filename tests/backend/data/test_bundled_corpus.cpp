// The bundled corpus: the King James Bible from Debian's bible-kjv, one document per chapter, prepared
// into the user's data dir on first use (here a temporary XDG_DATA_HOME) and reused afterwards.
#include "backend/config/config.h"
#include "backend/data/bundled_corpus.h"
#include "backend/data/byte_tokenizer.h"
#include "backend/data/data_sources.h"
#include "backend/data/gpt2_bpe_tokenizer.h"
#include "backend/data/indexed_dataset.h"
#include "backend/data/null_tokenizer.h"
#include "data_test_util.h"

#include <QElapsedTimer>
#include "support/skip.h"
#include "support/suite.h"

#include <QtTest>

namespace test_data_bundled_corpus {

using namespace mwb;
using namespace mwb::data;

class TestBundledCorpus : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    fs::path gpt2_;  // GPT-2 files in the real user data dir, if fetched
private slots:
    void initTestCase() {
        gpt2_ = user_data_dir() / "tokenizers" / "gpt2";
        if (!QFile::exists("/usr/bin/bible") && !QFile::exists("/usr/games/bible"))
            MWB_SKIP("the bundled corpus needs Debian's bible-kjv and bible-kjv-text (scripts/setup.sh installs them)");
        qputenv("XDG_DATA_HOME", home_.path().toUtf8());
    }

    void builds_once_with_the_expected_size() {
        ByteTokenizer tok;
        QElapsedTimer timer;
        timer.start();
        const std::string prefix = ensure_bundled_corpus(tok, /*quiet=*/true);
        qInfo("built in %lld ms", static_cast<long long>(timer.elapsed()));  // a figure, not a check
        QVERIFY(QString::fromStdString(prefix).startsWith(home_.path() + "/mwb/data/kjv/"));
        const IndexedDataset ds(prefix);
        QCOMPARE(ds.document_count(), 1189);  // chapters
        QCOMPARE(ds.sequence_count(), 1189);
        const int64_t text_bytes = ds.token_count() - 1189;  // one byte per token, plus an EOD per chapter
        QVERIFY2(text_bytes > 4200000 && text_bytes < 4400000, qPrintable(QString::number(text_bytes)));
        const std::string genesis = tok.decode(ds.sequence(0));
        QVERIFY2(genesis.starts_with("Genesis 1\n\n  1 In the beginning God created the heaven and the earth.\n"),
                 genesis.substr(0, 80).c_str());
        QVERIFY(tok.decode(ds.sequence(1188)).find("The grace of our Lord Jesus Christ be with you all. Amen.") !=
                std::string::npos);
        const auto mtime = QFileInfo(QString::fromStdString(prefix + ".bin")).lastModified();
        QCOMPARE(ensure_bundled_corpus(tok, true), prefix);  // prepared once, then reused
        QCOMPARE(QFileInfo(QString::fromStdString(prefix + ".bin")).lastModified(), mtime);
    }

    void corpus_is_the_default_data_path() {
        Config cfg;
        cfg.model.seq_length = 256;
        ByteTokenizer tok;
        const DataSources src = make_data_sources(cfg, tok, 1000, 64);
        QVERIFY(src.valid);
        QVERIFY2(src.description.find("bundled corpus") != std::string::npos, src.description.c_str());
        std::vector<int32_t> sample(257);
        src.train->read(999, sample);
        for (const int32_t id : sample) QVERIFY(id >= 0 && id < 257);
    }

    void gpt2_corpus_has_the_same_text() {
        if (!fs::exists(gpt2_ / "vocab.json") || !fs::exists(gpt2_ / "merges.txt"))
            MWB_SKIP("GPT-2 files absent (scripts/fetch-gpt2-vocab.sh)");
        const GPT2BPETokenizer gpt2(gpt2_ / "vocab.json", gpt2_ / "merges.txt");
        ByteTokenizer bytes;
        const std::string p = ensure_bundled_corpus(gpt2, true), q = ensure_bundled_corpus(bytes, true);
        QVERIFY(p != q);  // one dataset per tokenizer
        const IndexedDataset a(p), b(q);
        QCOMPARE(a.document_count(), 1189);
        QVERIFY(a.token_count() < b.token_count() / 3);  // about 3.9 bytes per GPT-2 token
        for (const int64_t chapter : {0, 500, 1188})
            QCOMPARE(gpt2.decode(a.sequence(chapter)), bytes.decode(b.sequence(chapter)) + "<|endoftext|>");
    }

    void null_tokenizer_is_refused() {
        NullTokenizer tok(100, 99);
        const std::string e = mwb::test::error_of([&] { ensure_bundled_corpus(tok, true); });
        QVERIFY2(e.find("NullTokenizer") != std::string::npos, e.c_str());
    }
};

MWB_TEST_SUITE_APPLESS(test_data_bundled_corpus, TestBundledCorpus)
}  // namespace test_data_bundled_corpus
#include "test_bundled_corpus.moc"
