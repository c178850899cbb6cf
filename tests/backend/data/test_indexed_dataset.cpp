// Megatron-LM's indexed dataset format: a .idx/.bin pair built byte by byte from the format's definition
// (not with our writer) loads correctly, our writer reproduces it exactly, and damaged or foreign files
// are refused with an error that names the file.
#include "backend/data/indexed_dataset.h"
#include "backend/data/npy.h"
#include "data_test_util.h"

#include "support/suite.h"

#include <QtTest>

namespace test_data_indexed_dataset {

using namespace mwb;
using namespace mwb::data;
using mwb::test::error_of;
using mwb::test::read_bytes;
using mwb::test::write_bytes;

namespace {

// Little-endian byte writer, spelled out from the format rather than copied from memory.
struct Bytes {
    std::string s;
    Bytes& raw(std::string_view v) {
        s.append(v);
        return *this;
    }
    Bytes& le(uint64_t v, int n) {
        for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
        return *this;
    }
};

// Four documents: [1 2 3] | [10 11] [12] (two sequences) | (empty) | [65535 0], as uint16.
struct HandBuilt {
    std::string idx, bin;
    HandBuilt() {
        Bytes b;
        for (const uint16_t t : {1, 2, 3, 10, 11, 12, 65535, 0}) b.le(t, 2);
        bin = b.s;
        Bytes i;
        i.raw(std::string_view("MMIDIDX\0\0", 9)).le(1, 8).le(8, 1).le(4, 8).le(5, 8);
        for (const uint32_t len : {3, 2, 1, 2}) i.le(len, 4);
        for (const uint64_t ptr : {0, 6, 10, 12}) i.le(ptr, 8);
        for (const uint64_t doc : {0, 1, 3, 3, 4}) i.le(doc, 8);
        idx = i.s;
    }
};

std::string prefix_in(const QTemporaryDir& dir, const char* name = "ds") {
    return dir.filePath(name).toStdString();
}

void write_pair(const std::string& prefix, const std::string& idx, const std::string& bin) {
    write_bytes(prefix + ".idx", idx);
    write_bytes(prefix + ".bin", bin);
}

}  // namespace

class TestIndexedDataset : public QObject {
    Q_OBJECT
private slots:
    void hand_built_files_load() {
        QTemporaryDir dir;
        const HandBuilt hb;
        QCOMPARE(hb.idx.size(), std::size_t{34 + 4 * 4 + 8 * 4 + 8 * 5});
        const std::string prefix = prefix_in(dir);
        write_pair(prefix, hb.idx, hb.bin);
        const IndexedDataset ds(prefix);
        QCOMPARE(ds.dtype(), TokenDType::UInt16);
        QCOMPARE(ds.sequence_count(), 4);
        QCOMPARE(ds.document_count(), 4);
        QCOMPARE(ds.token_count(), 8);
        QCOMPARE(ds.sequence(0), (std::vector<int32_t>{1, 2, 3}));
        QCOMPARE(ds.sequence(1), (std::vector<int32_t>{10, 11}));
        QCOMPARE(ds.sequence(2), (std::vector<int32_t>{12}));
        QCOMPARE(ds.sequence(3), (std::vector<int32_t>{65535, 0}));
        for (int64_t d = 0; d <= 4; ++d) QCOMPARE(ds.document_index(d), (std::array<int64_t, 5>{0, 1, 3, 3, 4}[d]));
        std::vector<int32_t> part(2);
        ds.read(0, 1, part);
        QCOMPARE(part, (std::vector<int32_t>{2, 3}));
        QVERIFY(!error_of([&] { ds.read(0, 2, part); }).empty());  // past the end of the sequence
    }

    void writer_reproduces_the_hand_built_bytes() {
        QTemporaryDir dir;
        const std::string prefix = prefix_in(dir);
        IndexedDatasetBuilder b(prefix, TokenDType::UInt16);
        b.add_document(std::vector<int32_t>{1, 2, 3});
        b.add_document(std::vector<int32_t>{10, 11, 12}, std::vector<int32_t>{2, 1});
        b.add_document(std::vector<int32_t>{});  // Megatron's add_document([], []): a document without sequences
        b.add_document(std::vector<int32_t>{65535, 0});
        b.finalize();
        const HandBuilt hb;
        QVERIFY(read_bytes(prefix + ".idx") == hb.idx);
        QVERIFY(read_bytes(prefix + ".bin") == hb.bin);
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), 2);  // no temporaries left
    }

    void dtypes_follow_megatron() {
        QCOMPARE(optimal_dtype(257), TokenDType::UInt16);
        QCOMPARE(optimal_dtype(50257), TokenDType::UInt16);
        QCOMPARE(optimal_dtype(65499), TokenDType::UInt16);
        QCOMPARE(optimal_dtype(65500), TokenDType::Int32);
        QCOMPARE(dtype_size(TokenDType::Int64), 8);

        QTemporaryDir dir;
        const std::string prefix = prefix_in(dir, "wide");
        IndexedDatasetBuilder b(prefix, TokenDType::Int32);
        b.add_document(std::vector<int32_t>{100000, 7, 2147483647});
        b.finalize();
        const std::string idx = read_bytes(prefix + ".idx");
        QCOMPARE(static_cast<int>(idx[17]), 4);  // Megatron's code for int32
        QCOMPARE(read_bytes(prefix + ".bin").size(), std::size_t{12});
        QCOMPARE(IndexedDataset(prefix).sequence(0), (std::vector<int32_t>{100000, 7, 2147483647}));

        IndexedDatasetBuilder narrow(prefix_in(dir, "narrow"), TokenDType::UInt16);
        const std::string e = error_of([&] { narrow.add_document(std::vector<int32_t>{70000}); });
        QVERIFY2(e.find("70000") != std::string::npos && e.find("uint16") != std::string::npos, e.c_str());
    }

    void uint8_and_multimodal_indices_load() {
        QTemporaryDir dir;
        const std::string prefix = prefix_in(dir);
        Bytes i;
        i.raw(std::string_view("MMIDIDX\0\0", 9)).le(1, 8).le(1, 1).le(2, 8).le(2, 8);
        i.le(2, 4).le(1, 4).le(0, 8).le(2, 8).le(0, 8).le(2, 8);
        i.le(0, 1).le(1, 1);  // one int8 mode per sequence (Megatron's multimodal flavour)
        write_pair(prefix, i.s, std::string("\x05\x06\x07", 3));
        const IndexedDataset ds(prefix);
        QCOMPARE(ds.dtype(), TokenDType::UInt8);
        QCOMPARE(ds.sequence(1), (std::vector<int32_t>{7}));
        QCOMPARE(ds.document_count(), 1);
    }

    void damaged_files_are_refused_by_name_data() {
        QTest::addColumn<QString>("which");
        QTest::addColumn<QString>("expected");
        for (const char* row : {"idx_truncated", "idx_shorter_than_header", "foreign", "version", "dtype_code",
                                "float_dtype", "huge_counts", "doc_indices", "bin_truncated", "bin_missing",
                                "dtype_contradicts_bin"})
            QTest::newRow(row) << QString(row) << QString();
    }
    void damaged_files_are_refused_by_name() {
        QFETCH(QString, which);
        QTemporaryDir dir;
        const std::string prefix = prefix_in(dir);
        HandBuilt hb;
        std::string idx = hb.idx, bin = hb.bin;
        std::string names = prefix + ".idx";
        if (which == "idx_truncated") idx.resize(idx.size() - 8);
        if (which == "idx_shorter_than_header") idx.resize(20);
        if (which == "foreign") idx = "{\"this is\": \"a JSON file, not a Megatron-LM index at all\"}";
        if (which == "version") idx[9] = 2;
        if (which == "dtype_code") idx[17] = 9;
        if (which == "float_dtype") idx[17] = 6;
        if (which == "huge_counts") idx[25] = 0x7f;           // top byte of the sequence count
        if (which == "doc_indices") idx[idx.size() - 8] = 3;  // last document index no longer the sequence count
        if (which == "bin_truncated") bin.resize(bin.size() - 2), names = prefix + ".bin";
        // uint8 instead of uint16: every pointer and length still lies inside the .bin, but the tokens
        // it records fill half of it.
        if (which == "dtype_contradicts_bin") idx[17] = 1, names = "dtype code (1) does not match";
        write_pair(prefix, idx, bin);
        if (which == "bin_missing") QFile::remove(QString::fromStdString(prefix + ".bin")), names = prefix + ".bin";
        const std::string e = error_of([&] { IndexedDataset ds(prefix); });
        QVERIFY2(!e.empty(), "no error");
        QVERIFY2(e.find(names) != std::string::npos, e.c_str());
    }

    void npy_files_round_trip_and_are_checked() {
        QTemporaryDir dir;
        const fs::path path = dir.filePath("a.npy").toStdString();
        const std::vector<int64_t> values{1, -2, 3, 4, 5, 6};
        write_npy<int64_t>(path, values, std::vector<int64_t>{3, 2});
        const std::string bytes = read_bytes(path.string());
        QCOMPARE(bytes.substr(0, 6), std::string("\x93NUMPY"));
        QCOMPARE((bytes.size() - values.size() * 8) % 64, std::size_t{0});  // data aligned like numpy's
        QVERIFY(bytes.find("'descr': '<i8', 'fortran_order': False, 'shape': (3, 2), }") != std::string::npos);
        const NpyInts back = read_npy_ints(path);
        QCOMPARE(back.shape, (std::vector<int64_t>{3, 2}));
        QCOMPARE(back.values, values);
        write_bytes(path.string(), bytes.substr(0, bytes.size() - 4));
        const std::string e = error_of([&] { read_npy_ints(path); });
        QVERIFY2(e.find(path.string()) != std::string::npos, e.c_str());
    }
};

MWB_TEST_SUITE_APPLESS(test_data_indexed_dataset, TestIndexedDataset)
}  // namespace test_data_indexed_dataset
#include "test_indexed_dataset.moc"
