// Safetensors against an independent writer and reader (safetensors_reference.py: numpy, from the
// format's specification): its files read back value for value (every F16 bit pattern as numpy
// decodes it), sharded directories, our files read by it, F16/BF16 rounding as numpy / float64
// nearest-even round, and malformed files (every truncation, random header corruption, crafted bad
// headers) refused with an error naming the file and the tensor, never a crash.
#include "backend/core/files.h"
#include "backend/data/data_test_util.h"
#include "backend/interop/safetensors.h"
#include "mwb/kernels/error.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

using namespace mwb;
using namespace mwb::interop;
using mwb::test::error_of;

namespace {

const char* kScript = MWB_TEST_SOURCE_DIR "/tests/backend/interop/safetensors_reference.py";

std::string bytes_of(const fs::path& p) {
    return mwb::test::read_bytes(p.string());
}
void put(const fs::path& p, std::string_view b) {
    mwb::test::write_bytes(p.string(), std::string(b));
}

// A file with header `json` and `data_bytes` zero bytes of data.
std::string file_with_header(const std::string& json, std::size_t data_bytes) {
    std::string out(8, '\0');
    const uint64_t n = json.size();
    std::memcpy(out.data(), &n, 8);
    return out + json + std::string(data_bytes, '\0');
}

std::vector<float> values(const SafetensorsFile& f, const StTensor& t) {
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    f.read_f32(t, v);
    return v;
}

}  // namespace

class TestSafetensors : public QObject {
    Q_OBJECT
    QTemporaryDir tmp_;
    fs::path dir() const { return tmp_.path().toStdString(); }

private slots:
    void initTestCase() {
        QVERIFY(tmp_.isValid());
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start("/usr/bin/python3", {kScript, "write", tmp_.path()});
        QVERIFY(p.waitForFinished(120000));
        QVERIFY2(p.exitCode() == 0, p.readAll().constData());
    }

    void reads_the_reference_writers_file() {
        const SafetensorsFile f(dir() / "model.safetensors");
        QCOMPARE(f.metadata().at("format"), std::string("pt"));
        QCOMPARE(f.tensors().size(), std::size_t{8});
        const auto expected = nlohmann::json::parse(read_file(dir() / "expected.json"));
        for (const auto& [name, e] : expected.items()) {
            const StTensor* t = f.find(name);
            QVERIFY2(t, name.c_str());
            QCOMPARE(std::string(dtype_name(t->dtype)), e["dtype"].get<std::string>());
            QCOMPARE(t->shape, e["shape"].get<std::vector<int64_t>>());
            const auto want = e["values"].get<std::vector<double>>();
            const auto got = values(f, *t);
            QCOMPARE(got.size(), want.size());
            for (std::size_t i = 0; i < got.size(); ++i) QCOMPARE(got[i], static_cast<float>(want[i]));
        }
        QCOMPARE(f.find("scalar")->numel(), int64_t{1});
        QCOMPARE(f.find("empty")->bytes, std::size_t{0});
        QVERIFY(!f.find("missing"));
    }

    void every_f16_bit_pattern_decodes_as_numpy() {
        const SafetensorsFile f(dir() / "f16_all.safetensors");
        const auto got = values(f, f.tensors()[0]);
        const auto want = nlohmann::json::parse(read_file(dir() / "f16_all.json")).get<std::vector<uint32_t>>();
        QCOMPARE(got.size(), std::size_t{65536});
        for (std::size_t i = 0; i < got.size(); ++i) {
            uint32_t g;
            std::memcpy(&g, &got[i], 4);
            if (g != want[i]) QFAIL(qPrintable(QString("F16 0x%1 -> 0x%2, numpy 0x%3").arg(i, 4, 16).arg(g, 8, 16).arg(want[i], 8, 16)));
        }
    }

    void writer_rounds_as_numpy_and_nearest_even() {
        const SafetensorsFile f(dir() / "rounding.safetensors");
        const auto x = values(f, *f.find("f32"));
        for (const auto& [dtype, name] : {std::pair{StDtype::F16, "f16"}, std::pair{StDtype::BF16, "bf16"}}) {
            std::vector<unsigned char> mine;
            encode_f32(x, dtype, mine);
            const StTensor& ref = *f.find(name);
            QCOMPARE(mine.size(), ref.bytes);
            for (std::size_t i = 0; i < x.size(); ++i)
                if (std::memcmp(mine.data() + 2 * i, ref.data + 2 * i, 2) != 0)
                    QFAIL(qPrintable(QString("%1 of %2 differs").arg(name).arg(static_cast<double>(x[i]), 0, 'g', 9)));
        }
    }

    void sharded_directory() {
        const SafetensorsModel m(dir() / "sharded");
        const SafetensorsFile whole(dir() / "model.safetensors");
        QCOMPARE(m.names().size(), std::size_t{8});
        for (const StTensor& t : whole.tensors()) {
            const StTensor& s = m.get(t.name);
            QCOMPARE(s.shape, t.shape);
            QCOMPARE(s.bytes, t.bytes);
            QVERIFY(std::memcmp(s.data, t.data, t.bytes) == 0);
        }
        QVERIFY(m.file_of("f64").path().filename() == "model-00002-of-00002.safetensors");
        const SafetensorsModel single(dir());
        QVERIFY(single.contains("ids"));
        QVERIFY(error_of([&] { m.get("nope"); }).find("no tensor 'nope'") != std::string::npos);

        // A broken index: each error names the index and what is wrong.
        const fs::path bad = dir() / "bad_index";
        fs::create_directories(bad);
        for (const auto& e : fs::directory_iterator(dir() / "sharded")) fs::copy_file(e.path(), bad / e.path().filename());
        const auto index = nlohmann::json::parse(read_file(bad / "model.safetensors.index.json"));
        const auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
            auto j = index;
            edit(j);
            write_file_atomic(bad / "model.safetensors.index.json", j.dump());
            return error_of([&] { SafetensorsModel{bad}; });
        };
        std::string e = with([](nlohmann::json& j) { j["weight_map"]["f64"] = "../model.safetensors"; });
        QVERIFY2(e.find("not a file name") != std::string::npos, e.c_str());
        e = with([](nlohmann::json& j) { j["weight_map"]["f64"] = "model-00003-of-00002.safetensors"; });
        QVERIFY2(e.find("does not exist") != std::string::npos, e.c_str());
        e = with([](nlohmann::json& j) { j["weight_map"]["f64"] = "model-00001-of-00002.safetensors"; });
        QVERIFY2(e.find("'f64'") != std::string::npos, e.c_str());
        e = with([](nlohmann::json& j) { j["weight_map"].erase("ids"); });
        QVERIFY2(e.find("'ids'") != std::string::npos && e.find("does not list it") != std::string::npos, e.c_str());
        QVERIFY(error_of([&] { SafetensorsModel{dir() / "nowhere"}; }).find("no model.safetensors") != std::string::npos);
    }

    void our_files_read_by_the_reference() {
        std::vector<float> a(24), b(6);
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.37f * static_cast<float>(i) - 3.1f;
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = 1000.5f / static_cast<float>(i + 1);
        std::vector<unsigned char> af, bh, bb;
        encode_f32(a, StDtype::F32, af);
        encode_f32(b, StDtype::F16, bh);
        encode_f32(b, StDtype::BF16, bb);
        const fs::path out = dir() / "ours.safetensors";
        write_safetensors(out,
                          {{"wte", StDtype::F32, {4, 6}, af}, {"h", StDtype::F16, {2, 3}, bh}, {"bf", StDtype::BF16, {6}, bb},
                           {"nothing", StDtype::F32, {0}, {}}},
                          {{"format", "pt"}});
        // Our reader agrees with itself; the bytes of each tensor are what we wrote.
        const SafetensorsFile f(out);
        QCOMPARE(f.metadata().at("format"), std::string("pt"));
        QVERIFY(std::memcmp(f.find("wte")->data, af.data(), af.size()) == 0);
        QCOMPARE(reinterpret_cast<uintptr_t>(f.find("wte")->data) % 8, uintptr_t{0});  // 8-aligned data
        // The reference reader decodes them to the values our conversions promise.
        nlohmann::json expected;
        const auto add = [&](const char* name, const char* dt, std::vector<int64_t> shape) {
            expected[name] = {{"dtype", dt}, {"shape", shape}, {"values", values(f, *f.find(name))}};
        };
        add("wte", "F32", {4, 6});
        add("h", "F16", {2, 3});
        add("bf", "BF16", {6});
        add("nothing", "F32", {0});
        write_file_atomic(dir() / "ours.json", expected.dump());
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start("/usr/bin/python3", {kScript, "read", QString::fromStdString(out.string()),
                                     QString::fromStdString((dir() / "ours.json").string())});
        QVERIFY(p.waitForFinished(60000));
        QVERIFY2(p.exitCode() == 0, p.readAll().constData());
        QVERIFY(values(f, *f.find("wte")) == a);
        // Nothing half-written: a failed write leaves no file and no temporary.
        const std::string e = error_of([&] { write_safetensors(dir() / "x.safetensors", {{"t", StDtype::F32, {3}, af}}); });
        QVERIFY2(e.find("'t'") != std::string::npos, e.c_str());
        QVERIFY(!fs::exists(dir() / "x.safetensors"));
        for (const auto& entry : fs::directory_iterator(dir())) QVERIFY(entry.path().string().find(".tmp.") == std::string::npos);
    }

    void every_truncation_is_an_error() {
        const std::string good = bytes_of(dir() / "model.safetensors");
        const fs::path p = dir() / "cut.safetensors";
        for (std::size_t n = 0; n < good.size(); ++n) {
            put(p, std::string_view(good).substr(0, n));
            const std::string e = error_of([&] { SafetensorsFile{p}; });
            if (e.find(p.string()) == std::string::npos)
                QFAIL(qPrintable(QString("truncated to %1 bytes: '%2'").arg(n).arg(QString::fromStdString(e))));
        }
    }

    void corrupted_headers_never_crash() {
        const std::string good = bytes_of(dir() / "model.safetensors");
        uint64_t n = 0;
        std::memcpy(&n, good.data(), 8);
        const fs::path p = dir() / "fuzz.safetensors";
        std::mt19937 gen(1);
        int refused = 0;
        for (int round = 0; round < 2000; ++round) {
            std::string b = good;
            const int flips = 1 + static_cast<int>(gen() % 4);
            for (int k = 0; k < flips; ++k) {
                const std::size_t at = gen() % (8 + n);  // the length or the JSON
                b[at] = static_cast<char>(gen() % 3 == 0 ? "0123456789[]{}\",: -"[gen() % 19] : gen() % 256);
            }
            put(p, b);
            try {
                const SafetensorsFile f(p);
                // Accepted: then every tensor must lie inside the file and read without fault.
                for (const StTensor& t : f.tensors()) {
                    std::vector<float> v(static_cast<std::size_t>(t.numel()));
                    try {
                        f.read_f32(t, v);
                    } catch (const mwb::Error&) {
                    }
                }
            } catch (const mwb::Error& e) {
                ++refused;
                QVERIFY(std::string(e.what()).find(p.string()) != std::string::npos);
            }
        }
        QVERIFY(refused > 1000);
    }

    void bad_headers_name_file_and_tensor() {
        const fs::path p = dir() / "bad.safetensors";
        const auto err = [&](const std::string& json, std::size_t data) {
            put(p, file_with_header(json, data));
            return error_of([&] { SafetensorsFile{p}; });
        };
        const auto expect = [&](const std::string& json, std::size_t data, const char* a, const char* b = "") {
            const std::string e = err(json, data);
            if (e.find(p.string()) == std::string::npos || e.find(a) == std::string::npos ||
                e.find(b) == std::string::npos)
                QFAIL(qPrintable(QString("header %1: '%2'").arg(QString::fromStdString(json), QString::fromStdString(e))));
        };
        expect("not json", 0, "does not start with");
        expect("{\"a\": ", 0, "not valid JSON");
        expect("[1]", 0, "does not start with");
        expect(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
               16, "'w' appears twice");
        expect(R"({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", 8, "'w'", "unknown dtype 'Q4'");
        expect(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8, "'w'", "needs 12 bytes");
        expect(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8, "'w'", "non-negative");
        expect(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4, "'w'", "past the end");
        expect(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8, "'w'", "end before");
        expect(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "v": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
               12, "'v'", "overlap");
        expect(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12, "'w'", "gap");
        expect(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 12, "cover 8 bytes");
        expect(R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]}})", 8, "'w'");
        expect(R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})", 8, "'w'", "dtype, shape and data_offsets");
        expect(R"({"__metadata__": {"a": 1}})", 0, "__metadata__ 'a'");
        expect(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", 8, "'w'", "data_offsets");
        // A header length beyond the file or the 100 MB limit.
        std::string huge(16, '\0');
        const uint64_t big = uint64_t{1} << 40;
        std::memcpy(huge.data(), &big, 8);
        put(p, huge);
        QVERIFY(error_of([&] { SafetensorsFile{p}; }).find("outside [2,") != std::string::npos);
        put(p, file_with_header("{}", 0).substr(0, 9));
        QVERIFY(error_of([&] { SafetensorsFile{p}; }).find("truncated") != std::string::npos);
        // read_f32 of a dtype it cannot convert names it.
        put(p, file_with_header(R"({"q": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}})", 2));
        const SafetensorsFile f(p);
        std::vector<float> v(2);
        const std::string e = error_of([&] { f.read_f32(f.tensors()[0], v); });
        QVERIFY2(e.find("'q'") != std::string::npos && e.find("F8_E4M3") != std::string::npos, e.c_str());
    }
};

int main(int argc, char** argv) {
    if (QProcess::execute("/usr/bin/python3", {"-c", "import numpy"}) != 0) {
        std::printf("SKIP: the reference writer needs /usr/bin/python3 with numpy (apt-get install python3-numpy)\n");
        return 77;
    }
    QCoreApplication app(argc, argv);
    TestSafetensors t;
    return QTest::qExec(&t, argc, argv);
}

#include "test_safetensors.moc"
