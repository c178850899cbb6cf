// preprocess (mwb-data preprocess): JSON lines and text into indexed datasets as Megatron's
// preprocess_data.py writes them; parallel output identical to serial; errors with file and line;
// the mwb-data command line end to end.
#include "backend/data/byte_tokenizer.h"
#include "backend/data/indexed_dataset.h"
#include "backend/data/preprocess.h"
#include "data_test_util.h"

#include <QProcess>
#include "support/skip.h"
#include "support/suite.h"

#include <QtTest>
#include <nlohmann/json.hpp>

namespace test_data_preprocess {

using namespace mwb;
using namespace mwb::data;
using mwb::test::error_of;
using mwb::test::read_bytes;
using mwb::test::write_bytes;

namespace {

std::vector<int32_t> with_eod(std::string_view text) {
    std::vector<int32_t> ids(text.begin(), text.end());
    for (auto& id : ids) id = static_cast<unsigned char>(id);
    if (!ids.empty()) ids.push_back(ByteTokenizer::kEod);
    return ids;
}

QString tool() {
    return QStringLiteral(MWB_DATA_TOOL);
}

}  // namespace

class TestPreprocess : public QObject {
    Q_OBJECT
private slots:
    void json_lines_become_documents() {
        QTemporaryDir dir;
        const std::string in = dir.filePath("in.jsonl").toStdString();
        write_bytes(in,
                    "{\"text\": \"first doc\", \"title\": \"A\"}\n"
                    "\n"
                    "{\"text\": \"\", \"title\": \"empty text\"}\n"
                    "{\"text\": [\"one. \", \"\", \"two.\"], \"title\": \"B\", \"extra\": 1}\n"
                    "{\"title\": \"C\", \"text\": \"caf\\u00e9 \\ud83d\\ude80\"}\n");
        PreprocessOptions o;
        o.inputs = {in};
        o.output_prefix = dir.filePath("out").toStdString();
        o.json_keys = {"text", "title"};
        o.append_eod = true;
        o.progress = false;
        ByteTokenizer tok;
        const PreprocessResult r = preprocess(o, tok);
        QCOMPARE(r.prefixes,
                 (std::vector<std::string>{o.output_prefix + "_text_document", o.output_prefix + "_title_document"}));
        QCOMPARE(r.documents, 4);

        const IndexedDataset text(r.prefixes[0]);
        QCOMPARE(text.document_count(), 4);
        QCOMPARE(text.sequence_count(), 4);  // the empty text has no sequence; the list has two non-empty ones
        QCOMPARE(text.sequence(0), with_eod("first doc"));
        QCOMPARE(text.document_index(1), 1);
        QCOMPARE(text.document_index(2), 1);  // document 1 (empty) has no sequences
        QCOMPARE(text.sequence(1), (std::vector<int32_t>{'o', 'n', 'e', '.', ' '}));
        QCOMPARE(text.sequence(2), with_eod("two."));  // EOD goes to the last sentence, as Megatron
        QCOMPARE(text.sequence(3), with_eod("caf\xc3\xa9 \xf0\x9f\x9a\x80"));
        const IndexedDataset title(r.prefixes[1]);
        QCOMPARE(title.sequence(1), with_eod("empty text"));
    }

    void parallel_output_equals_serial() {
        QTemporaryDir dir;
        const std::string in = dir.filePath("big.jsonl").toStdString();
        std::string lines;
        for (int i = 0; i < 3000; ++i) {
            std::string text = "doc " + std::to_string(i) + ":";
            for (int k = 0; k < i % 97; ++k) text += " word" + std::to_string(k * i % 13);
            lines += nlohmann::json{{"text", text}}.dump() + "\n";
        }
        write_bytes(in, lines);
        ByteTokenizer tok;
        PreprocessOptions o;
        o.inputs = {in};
        o.progress = false;
        o.append_eod = true;
        o.workers = 1;
        o.output_prefix = dir.filePath("serial").toStdString();
        const auto a = preprocess(o, tok).prefixes[0];
        o.workers = 4;
        o.output_prefix = dir.filePath("parallel").toStdString();
        const auto b = preprocess(o, tok).prefixes[0];
        QVERIFY(read_bytes(a + ".bin") == read_bytes(b + ".bin"));
        QVERIFY(read_bytes(a + ".idx") == read_bytes(b + ".idx"));
        QCOMPARE(IndexedDataset(b).document_count(), 3000);
    }

    void errors_name_file_and_line() {
        QTemporaryDir dir;
        const std::string in = dir.filePath("bad.jsonl").toStdString();
        write_bytes(in, "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text\": oops}\n");
        ByteTokenizer tok;
        PreprocessOptions o;
        o.inputs = {in};
        o.output_prefix = dir.filePath("out").toStdString();
        o.progress = false;
        std::string e = error_of([&] { preprocess(o, tok); });
        QVERIFY2(e.find(in + ":3") != std::string::npos && e.find("JSON") != std::string::npos, e.c_str());
        write_bytes(in, "{\"body\": \"no text key\"}\n");
        e = error_of([&] { preprocess(o, tok); });
        QVERIFY2(e.find(in + ":1") != std::string::npos && e.find("'text'") != std::string::npos, e.c_str());
        o.inputs = {dir.filePath("missing.jsonl").toStdString()};
        e = error_of([&] { preprocess(o, tok); });
        QVERIFY2(e.find("missing.jsonl") != std::string::npos, e.c_str());
        QVERIFY(!QFile::exists(dir.filePath("out_text_document.idx")));  // nothing half-written is left
    }

    void text_files_by_unit() {
        QTemporaryDir dir;
        const std::string in = dir.filePath("book.txt").toStdString();
        write_bytes(in, "Chapter one.\nStill one.\n\n\nChapter two.\n");
        ByteTokenizer tok;
        PreprocessOptions o;
        o.inputs = {in};
        o.progress = false;
        o.output_prefix = dir.filePath("file").toStdString();
        QCOMPARE(IndexedDataset(preprocess(o, tok).prefixes[0]).document_count(), 1);
        o.text_unit = TextUnit::Paragraph;
        o.output_prefix = dir.filePath("para").toStdString();
        const IndexedDataset para(preprocess(o, tok).prefixes[0]);
        QCOMPARE(para.document_count(), 2);
        QCOMPARE(tok.decode(para.sequence(0)), std::string("Chapter one.\nStill one."));
        o.text_unit = TextUnit::Line;
        o.output_prefix = dir.filePath("line").toStdString();
        QCOMPARE(IndexedDataset(preprocess(o, tok).prefixes[0]).document_count(), 3);
    }

    void command_line_end_to_end() {
        if (!QFile::exists(tool())) MWB_SKIP("mwb-data is not built");
        QTemporaryDir dir;
        const QString in = dir.filePath("in.jsonl");
        write_bytes(in.toStdString(), "{\"text\": \"hello\"}\n{\"text\": \"world!\"}\n");
        QProcess p;
        p.start(tool(), {"preprocess", "--input", in, "--output-prefix", dir.filePath("cli"), "--append-eod",
                         "--workers", "2"});
        QVERIFY(p.waitForFinished(30000));
        QCOMPARE(p.exitCode(), 0);
        const QString prefix = QString::fromUtf8(p.readAllStandardOutput()).trimmed();
        QCOMPARE(prefix, dir.filePath("cli_text_document"));
        p.start(tool(), {"info", prefix});
        QVERIFY(p.waitForFinished(30000));
        const QString info = QString::fromUtf8(p.readAllStandardOutput());
        QVERIFY2(info.contains("documents  2") && info.contains("tokens     13") && info.contains("uint16"),
                 qPrintable(info));
        p.start(tool(), {"info", dir.filePath("nothing")});
        QVERIFY(p.waitForFinished(30000));
        QCOMPARE(p.exitCode(), 1);
        QVERIFY(QString::fromUtf8(p.readAllStandardError()).contains(dir.filePath("nothing.idx")));
        // tokenize: the ids of a text and the bytes each stands for.
        p.start(tool(), {"tokenize", "hi\n"});
        QVERIFY(p.waitForFinished(30000));
        QCOMPARE(p.exitCode(), 0);
        const QString shown = QString::fromUtf8(p.readAllStandardOutput());
        QVERIFY2(shown.contains("ByteTokenizer: vocab_size 257, eod 256") && shown.contains("     104  'h'") &&
                     shown.contains("      10  '\\x0a'"),
                 qPrintable(shown));
        p.start(tool(), {"tokenize", "--tokenizer-type", "HuggingFaceTokenizer", "x"});
        QVERIFY(p.waitForFinished(30000));
        QCOMPARE(p.exitCode(), 1);
        QVERIFY(QString::fromUtf8(p.readAllStandardError()).contains("tokenizer_model"));
    }
};

MWB_TEST_SUITE_APPLESS(test_data_preprocess, TestPreprocess)
}  // namespace test_data_preprocess
#include "test_preprocess.moc"
