// The run directory's record stream across restarts: seq continues, and a record the previous process
// could not finish (disk full, killed inside a write) neither swallows the next run's first record nor
// stays behind as a line no reader can parse.
#include "support/fixtures.h"
#include "support/suite.h"

#include "backend/telemetry/run_dir.h"

#include <QtTest>

#include <fstream>

namespace test_backend_run_dir {

using namespace mwb;
namespace fs = std::filesystem;

namespace {

std::vector<nlohmann::json> parse_lines(const fs::path& file) {
    std::vector<nlohmann::json> out;
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded()) throw std::runtime_error("unparseable line in " + file.string() + ": " + line);
        out.push_back(j);
    }
    return out;
}

std::string bytes_of(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

class TestRunDir : public QObject {
    Q_OBJECT
private slots:
    void a_torn_last_record_is_cut_before_appending() {
        test::TempDir t;
        {
            RunDir dir(t.path(), "test");
            dir.publish("step", {{"iteration", 1}});
            dir.publish("step", {{"iteration", 2}});
            dir.publish("event", {{"kind", "x"}});
        }
        // What a full disk leaves: the first bytes of a third step record, no newline.
        const std::string torn = "{\"schema\":\"mwb.telemetry/1\",\"topic\":\"step\",\"run_id\":\"r\",\"seq\":3,\"iter";
        std::ofstream(t / "metrics.jsonl", std::ios::app) << torn;
        {
            RunDir dir(t.path(), "test");
            QCOMPARE(dir.next_seq(), int64_t{4});  // the torn record's seq 3 never completed: the repair event has it
            dir.publish("step", {{"iteration", 3}});
        }
        const auto metrics = parse_lines(t / "metrics.jsonl");  // throws on a glued line
        QCOMPARE(metrics.size(), std::size_t{3});
        QCOMPARE(metrics.back()["iteration"], 3);
        QCOMPARE(metrics.back()["seq"], 4);
        const auto events = parse_lines(t / "events.jsonl");
        QCOMPARE(events.back()["kind"], "torn_record_dropped");
        QCOMPARE(events.back()["file"], "metrics.jsonl");
        QCOMPARE(events.back()["bytes"].get<std::size_t>(), torn.size());
        QCOMPARE(events.back()["seq"], 3);
    }

    void a_file_of_one_torn_line_is_emptied_and_intact_files_are_untouched() {
        test::TempDir t;
        std::ofstream(t / "events.jsonl") << "{\"schema\":\"mwb.telemetry/1\",\"topic\":\"run.st";
        {
            RunDir dir(t.path(), "test");
            QCOMPARE(dir.next_seq(), int64_t{1});  // 0 went to the repair event
        }
        const auto events = parse_lines(t / "events.jsonl");
        QCOMPARE(events.size(), std::size_t{1});
        QCOMPARE(events[0]["kind"], "torn_record_dropped");
        const std::string before = bytes_of(t / "events.jsonl");
        { RunDir again(t.path(), "test"); }
        QCOMPARE(bytes_of(t / "events.jsonl"), before);
    }
};

MWB_TEST_SUITE_APPLESS(test_backend_run_dir, TestRunDir)
}  // namespace test_backend_run_dir
#include "test_run_dir.moc"
