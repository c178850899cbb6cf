// The typed telemetry records and the metric table (ipc/schema.h, ipc/metrics.h): every record of a
// real run written before the records existed (tests/fixtures/telemetry_run_pp2) reads into its type
// and writes back to the same JSON text; every table row round-trips through to_json/from_json; every
// built-in series has exactly one row; the phases are the table's rows in Phase order; the
// derivations against the formulas written out here; docs/protocol.md's table is the generated one.
#include "support/fixtures.h"
#include "support/suite.h"

#include "mwb/ipc/message.h"
#include "mwb/ipc/run_dir_log.h"
#include "mwb/ipc/schema.h"

#include <QtTest>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace test_ipc_metrics {

using namespace mwb;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// The body without the envelope: what a record's to_json writes.
json fields_of(const ipc::Message& m) {
    json b = m.body;
    for (const char* k : {"schema", "topic", "run_id", "seq", "time"}) b.erase(k);
    return b;
}

template <typename R>
std::string rewritten(const json& body) {
    return json(body.get<R>()).dump();
}

template <typename E>
std::string rewritten_event(const json& body) {
    return ipc::event_json(body.get<E>()).dump();
}

}  // namespace

class MetricsTest : public QObject {
    Q_OBJECT
private slots:
    void fixtureRecordsRewriteToTheSameText() {
        const fs::path run = test::source_dir() / "tests/fixtures/telemetry_run_pp2/run";
        std::map<std::string, int> seen;
        ipc::for_each_run_dir_message(run, [&](ipc::Message&& m) {
            const json b = fields_of(m);
            std::string again;
            std::string what = m.topic;
            if (m.topic == "step")
                again = rewritten<ipc::StepRecord>(b);
            else if (m.topic == "memory")
                again = rewritten<ipc::MemoryRecord>(b);
            else if (m.topic == "eval")
                again = rewritten<ipc::EvalRecord>(b);
            else if (m.topic == "run.start")
                again = rewritten<ipc::RunStartRecord>(b);
            else if (m.topic == "run.end")
                again = rewritten<ipc::RunEndRecord>(b);
            else if (m.topic == "event") {
                what = b.value("kind", "");
                if (what == "checkpoint_saved") again = rewritten_event<ipc::CheckpointSavedEvent>(b);
            }
            QVERIFY2(!again.empty(), ("no typed record for " + what).c_str());
            QCOMPARE(again, b.dump());
            ++seen[what];
        });
        QCOMPARE(seen["step"], 4);
        QCOMPARE(seen["memory"], 4);
        QCOMPARE(seen["eval"], 4);
        QCOMPARE(seen["run.start"], 1);
        QCOMPARE(seen["run.end"], 1);
        QCOMPARE(seen["checkpoint_saved"], 1);
    }

    void eventsAndSamplesWriteTheDocumentedFields() {
        // the kinds the fixture run has none of, against docs/protocol.md's field lists
        QCOMPARE(ipc::event_json(ipc::SkippedIterationEvent{7, 65536.0, "gradients are not finite"}).dump(),
                 std::string(R"({"iteration":7,"kind":"skipped_iteration","loss_scale":65536.0,)"
                             R"("reason":"gradients are not finite"})"));
        QCOMPARE(ipc::event_json(ipc::NanLossEvent{9}).dump(),
                 std::string(R"({"iteration":9,"kind":"nan_loss","loss":null})"));
        QCOMPARE(ipc::event_json(ipc::CheckpointLoadedEvent{4, "ck/iter_0000004"}).dump(),
                 std::string(R"({"iteration":4,"kind":"checkpoint_loaded","path":"ck/iter_0000004"})"));
        QCOMPARE(ipc::event_json(ipc::CheckpointNotFoundEvent{"ck"}).dump(),
                 std::string(R"({"kind":"checkpoint_not_found","path":"ck"})"));
        QCOMPARE(ipc::event_json(ipc::ControlAppliedEvent{"pause", "ui-1", 12}).dump(),
                 std::string(R"({"action":"pause","iteration":12,"kind":"control_applied","request_id":"ui-1"})"));
        QCOMPARE(ipc::event_json(ipc::SamplingSkippedEvent{"no prompts"}).dump(),
                 std::string(R"({"kind":"sampling_skipped","reason":"no prompts"})"));
        QCOMPARE(json(ipc::event_json(ipc::SamplingSkippedEvent{"no prompts"}).get<ipc::SamplingSkippedEvent>()).dump(),
                 std::string(R"({"reason":"no prompts"})"));
        QCOMPARE(json(ipc::RunEndRecord{"failed", "bad", std::nullopt}).dump(),
                 std::string(R"({"reason":"bad","status":"failed"})"));
        ipc::SampleMessage s;
        s.iteration = 20;
        s.consumed_tokens = 640;
        s.prompt_index = 1;
        s.prompt = "7 8";
        s.completion = " 9";
        s.prompt_tokens = 2;
        s.completion_tokens = 1;
        s.finish_reason = "length";
        s.greedy = true;
        s.top_k = 0;
        s.top_p = 1.0;
        s.seed = 5;
        s.time_s = 0.25;
        const json j = s;
        for (const char* k :
             {"iteration", "consumed_tokens", "prompt_index", "prompt", "completion", "prompt_tokens",
              "completion_tokens", "finish_reason", "greedy", "temperature", "top_k", "top_p", "seed", "time_s"})
            QVERIFY2(j.contains(k), k);
        QCOMPARE(j.size(), std::size_t{14});
        QCOMPARE(json(j.get<ipc::SampleMessage>()).dump(), j.dump());
    }

    void everyRowRoundTrips() {
        // a distinct value per row, written through the record, read back through the record
        ipc::StepRecord step;
        ipc::RankRecord rank;
        ipc::EvalRecord eval;
        double v = 1.5;
        for (const ipc::Metric& m : ipc::metrics()) {
            v += 1;
            if (const auto* i = std::get_if<int64_t ipc::StepRecord::*>(&m.field)) step.** i = static_cast<int64_t>(v);
            if (const auto* d = std::get_if<double ipc::StepRecord::*>(&m.field)) step.** d = v;
            if (const auto* o = std::get_if<std::optional<double> ipc::StepRecord::*>(&m.field)) step.** o = v;
        }
        for (std::size_t p = 0; p < ipc::kPhaseCount; ++p) rank.time.seconds[p] = 0.125 * static_cast<double>(p + 1);
        step.ranks = {rank};
        eval.lm_loss = 3.25;
        const json sj = step, ej = eval;
        const ipc::StepRecord back = sj.get<ipc::StepRecord>();
        const ipc::EvalRecord eback = ej.get<ipc::EvalRecord>();
        std::set<std::string_view> names;
        v = 1.5;
        for (const ipc::Metric& m : ipc::metrics()) {
            v += 1;
            QVERIFY2(names.insert(m.name).second, std::string(m.name).c_str());  // names are unique
            QVERIFY2(!m.label.empty() && !m.doc.empty(), std::string(m.name).c_str());
            const std::string key(m.key);
            switch (m.source) {
                case ipc::MetricSource::Step: {
                    QVERIFY2(!std::holds_alternative<std::monostate>(m.field), key.c_str());
                    QVERIFY2(sj.contains(key), key.c_str());
                    const double want = std::holds_alternative<int64_t ipc::StepRecord::*>(m.field)
                                            ? static_cast<double>(static_cast<int64_t>(v))
                                            : v;
                    QCOMPARE(sj[key].get<double>(), want);
                    if (const auto* i = std::get_if<int64_t ipc::StepRecord::*>(&m.field)) QCOMPARE(back.**i, step.**i);
                    if (const auto* d = std::get_if<double ipc::StepRecord::*>(&m.field)) QCOMPARE(back.**d, step.**d);
                    if (const auto* o = std::get_if<std::optional<double> ipc::StepRecord::*>(&m.field))
                        QCOMPARE(back.**o, step.**o);
                    break;
                }
                case ipc::MetricSource::SlowestRank: {
                    const json& t = sj["ranks"][0]["time"];
                    QVERIFY2(t.contains(key), key.c_str());
                    QCOMPARE(t.size(), ipc::kPhaseCount);
                    break;
                }
                case ipc::MetricSource::Eval:
                    QVERIFY2(ej.contains(key), key.c_str());
                    break;
                case ipc::MetricSource::Envelope:
                    QCOMPARE(key, std::string("time"));
                    break;
                case ipc::MetricSource::Derived:
                    QVERIFY(m.derivation != ipc::Derivation::None);
                    break;
            }
            // a row with a column is stored; a compared or charted row has a source readers can reach
            if (m.compare > 0) QVERIFY2(!m.column.empty(), key.c_str());
        }
        QCOMPARE(back.ranks.size(), std::size_t{1});
        QCOMPARE(back.ranks[0].time.seconds, rank.time.seconds);
        QCOMPARE(eback.lm_loss, 3.25);
        // optional numbers: null when empty, and empty again when read back
        ipc::StepRecord none;
        const json nj = none;
        QVERIFY(nj["lm_loss"].is_null() && nj["grad_norm"].is_null() && nj["mfu"].is_null());
        QVERIFY(!nj.get<ipc::StepRecord>().lm_loss);
    }

    void everySeriesHasOneRowAndPhasesAreInOrder() {
        for (int s = 0; s < ipc::kSeriesCount; ++s) {
            int rows = 0;
            for (const ipc::Metric& m : ipc::metrics()) rows += static_cast<int>(m.series) == s;
            QVERIFY2(rows == 1, ("series " + std::to_string(s)).c_str());
            QCOMPARE(static_cast<int>(ipc::metric_of_series(static_cast<ipc::SeriesId>(s)).series), s);
        }
        const char* phases[] = {"forward_s", "backward_s",      "gradient_reduce_s", "optimizer_s",
                                "data_s",    "communication_s", "pipeline_bubble_s"};
        std::size_t n = 0;
        for (const ipc::Metric& m : ipc::metrics()) n += m.source == ipc::MetricSource::SlowestRank;
        QCOMPARE(n, ipc::kPhaseCount);
        for (std::size_t p = 0; p < ipc::kPhaseCount; ++p)
            QCOMPARE(std::string(ipc::phase_metric(static_cast<ipc::Phase>(p)).key), std::string(phases[p]));
        QCOMPARE(std::string(ipc::metric_of_series(ipc::SeriesId::Communication).name), std::string("communication_s"));
        QCOMPARE(std::string(ipc::metric_of_series(ipc::SeriesId::Bubble).name), std::string("pipeline_bubble_s"));
    }

    void chartedRowsAgreeWithinAChart() {
        // rows drawn in one Monitor chart share its title and value axis and have distinct lines;
        // only rows with a series are charted
        std::map<std::string_view, std::string_view> axis_of;
        std::set<std::pair<std::string_view, std::string_view>> lines;
        for (const ipc::Metric& m : ipc::metrics()) {
            const bool charted = !m.chart.title.empty() || !m.chart.axis.empty() || !m.chart.line.empty();
            if (!charted) continue;
            QVERIFY2(m.series != ipc::SeriesId::Count, std::string(m.name).c_str());
            const std::string_view title = ipc::chart_title(m);
            const auto [it, fresh] = axis_of.emplace(title, m.chart.axis);
            QVERIFY2(it->second == m.chart.axis, std::string(m.name).c_str());
            QVERIFY2(lines.emplace(title, ipc::chart_line(m)).second, std::string(m.name).c_str());
        }
        QCOMPARE(std::string(ipc::chart_title(ipc::metric_of_series(ipc::SeriesId::ValLoss))), std::string("Loss"));
        QCOMPARE(std::string(ipc::chart_line(ipc::metric_of_series(ipc::SeriesId::Loss))), std::string("train"));
        QCOMPARE(std::string(ipc::chart_line(ipc::metric_of_series(ipc::SeriesId::Lr))), std::string("Learning rate"));
    }

    void evalFieldsAreTheRecordsAndRoundTrip() {
        // every eval field is written and read back through its member; the wire's field list
        // (docs/protocol.md) is exactly the table's
        ipc::EvalRecord e;
        int64_t n = 10;
        for (const ipc::EvalField& f : ipc::eval_fields()) {
            ++n;
            if (const auto* i = std::get_if<int64_t ipc::EvalRecord::*>(&f.member)) e.** i = n;
            if (const auto* d = std::get_if<double ipc::EvalRecord::*>(&f.member))
                e.** d = static_cast<double>(n) + 0.5;
            if (const auto* t = std::get_if<std::string ipc::EvalRecord::*>(&f.member)) e.** t = "valid";
        }
        const json j = e;
        QCOMPARE(j.size(), ipc::eval_fields().size());
        std::set<std::string> keys;
        for (const ipc::EvalField& f : ipc::eval_fields()) QVERIFY(keys.insert(std::string(f.key)).second);
        QCOMPARE(keys, (std::set<std::string>{"iteration", "consumed_samples", "consumed_tokens", "split",
                                              "consumed_valid_samples", "lm_loss", "ppl", "samples", "time_s"}));
        QCOMPARE(json(j.get<ipc::EvalRecord>()).dump(), j.dump());
        const ipc::EvalRecord empty = json::object().get<ipc::EvalRecord>();
        QCOMPARE(empty.iteration, int64_t{-1});
        QVERIFY(std::isnan(empty.lm_loss) && empty.consumed_tokens == 0 && empty.split.empty());
    }

    void derivationsFollowTheirFormulas() {
        QCOMPARE(*ipc::mfu(150.0, 300.0), 0.5);
        QVERIFY(!ipc::mfu(150.0, 0.0));
        QCOMPARE(ipc::tokens_per_sec(8192.0, 0.5), 16384.0);
        // work 1.0 s of which 0.25 communication and 0.125 bubble: 0.625 computing
        ipc::PhaseTimes t;
        t[ipc::Phase::Forward] = 0.25;
        t[ipc::Phase::Backward] = 0.5;
        t[ipc::Phase::GradientReduce] = 0.125;
        t[ipc::Phase::Optimizer] = 0.0625;
        t[ipc::Phase::Data] = 0.0625;
        t[ipc::Phase::Communication] = 0.25;
        t[ipc::Phase::PipelineBubble] = 0.125;
        const ipc::TimeSplit s = t.split();
        QCOMPARE(s.compute, 0.625);
        QCOMPARE(s.communication, 0.25);
        QCOMPARE(s.bubble, 0.125);
        QCOMPARE(s.total, 1.0);
        // clock noise can make communication exceed the work: clamped, never negative
        const ipc::TimeSplit odd = ipc::split_time(0.1, 0.3, -0.01);
        QCOMPARE(odd.compute, 0.0);
        QCOMPARE(odd.bubble, 0.0);
        QCOMPARE(odd.total, 0.3);
    }

    void protocolDocHasTheGeneratedTable() {
        std::ifstream in(test::source_dir() / "docs/protocol.md");
        std::stringstream ss;
        ss << in.rdbuf();
        const std::string doc = ss.str();
        const std::string begin = "<!-- BEGIN GENERATED: ipc::metrics_reference_markdown -->\n";
        const auto a = doc.find(begin), b = doc.find("<!-- END GENERATED -->", a == std::string::npos ? 0 : a);
        QVERIFY2(a != std::string::npos && b != std::string::npos, "docs/protocol.md lacks the generated section");
        const std::string have = doc.substr(a + begin.size(), b - a - begin.size());
        if (have != ipc::metrics_reference_markdown()) {
            if (qEnvironmentVariableIsSet("MWB_UPDATE_DOCS")) {
                std::ofstream(test::source_dir() / "docs/protocol.md")
                    << doc.substr(0, a + begin.size()) + ipc::metrics_reference_markdown() + doc.substr(b);
            }
            QFAIL(
                "docs/protocol.md's metric table differs from ipc::metrics_reference_markdown() (run this test "
                "with MWB_UPDATE_DOCS=1 to rewrite it)");
        }
    }
};

MWB_TEST_SUITE_GUILESS(test_ipc_metrics, MetricsTest)
}  // namespace test_ipc_metrics
#include "test_metrics.moc"
