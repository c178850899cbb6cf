// Text samples in the store (schema 4): a version-3 file as users have it (tests/store/fixtures/
// store_v3.sql, frozen; it kept a 1.1 run's samples whole in events) migrates and its samples move to
// their table; samples published over real ZeroMQ sockets land in it, newest iteration first, with
// both envelopes (mwb.telemetry/1 and /1.1); a malformed sample is refused with its field named and
// kept whole; the same prompt is compared across runs at their newest or a chosen iteration.
#include "ipc/wire_fixtures.h"
#include "store_fixtures.h"
#include "support/fixtures.h"
#include "support/suite.h"

#include "mwb/ipc/follower.h"
#include "mwb/ipc/server.h"
#include "mwb/store/sample.h"
#include "mwb/store/schema.h"
#include "mwb/store/store.h"

#include <QtTest>

namespace test_store_samples {

using namespace mwb;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kOld = "20261130-090000-gpt-5a6b7c8d";

fs::path make_v3(const test::TempDir& t) {
    return test::store_from_dump("store_v3.sql", t / "v3.sqlite");
}

json sample_fields(int64_t iteration, int64_t prompt_index, const std::string& prompt, const std::string& completion) {
    return test::sample_fields(iteration, prompt_index, prompt, completion, true);
}

std::string wire(const std::string& run, int64_t seq, const std::string& topic, const json& fields,
                 const char* schema = "mwb.telemetry/1.1") {
    return schema == std::string("mwb.telemetry/1") ? test::wire_message(run, seq, topic, fields)
                                                    : test::wire_message_1_1(run, seq, topic, fields);
}

ipc::Message msg(const std::string& text) {
    std::string why;
    auto m = ipc::parse_message(text, &why);
    if (!m) throw std::runtime_error("bad test message: " + why);
    return *m;
}

}  // namespace

class TestStoreSamples : public QObject {
    Q_OBJECT
private slots:
    void a_version_3_store_migrates_and_its_samples_move_to_their_table() {
        test::TempDir t;
        const fs::path file = make_v3(t);
        {
            store::Database raw(file);
            QCOMPARE(raw.user_version(), 3);
            QCOMPARE(raw.scalar_int("SELECT count(*) FROM events WHERE topic = 'sample'"), 3);
        }
        store::Store s(file);
        QCOMPARE(s.database().user_version(), store::kSchemaVersion);
        QCOMPARE(s.counts(kOld)["samples"], 3);
        QVERIFY(s.events(kOld, "sample").empty());        // moved, not copied
        QCOMPARE(s.events(kOld).size(), std::size_t{2});  // run.start and run.end stay
        const auto all = s.samples(kOld);
        QCOMPARE(all.size(), std::size_t{3});
        QCOMPARE(all[0].iteration, 4);  // newest first
        QCOMPARE(all[0].completion, " God created the heaven");
        QCOMPARE(all[0].seq, 7);
        QCOMPARE(all[1].iteration, 2);
        QCOMPARE(all[1].prompt_index, 0);
        QCOMPARE(all[2].prompt, "And the earth");
        QCOMPARE(all[2].finish_reason, "eos");
        QCOMPARE(all[2].consumed_tokens, 4096);
        QVERIFY(all[2].greedy);
        // the old data still reads as before, and the recorder resumes where it stopped
        QCOMPARE(s.series(kOld, "lm_loss").points, 4);
        QCOMPARE(s.next_seq(kOld), 9);
        QCOMPARE(s.run(kOld)->status, "finished");
    }

    void samples_over_zeromq_land_in_their_table_newest_first() {
        test::TempDir t;
        const std::string run = "20261201-100000-gpt-0badcafe";
        ipc::ServerOptions o;
        o.run_id = run;
        o.control_endpoint = "";
        o.heartbeat_interval = 200ms;
        ipc::TelemetryServer server(o);
        std::vector<std::string> sent;
        sent.push_back(wire(run, 0, "run.start", {{"config", {{"log_interval", 1}}}, {"iteration", 0}}));
        // prompts as they come: UTF-8, a newline inside the completion, an empty completion
        const std::vector<std::string> prompts = {"In the beginning", "Ἐν ἀρχῇ ἦν ὁ λόγος", "And God said"};
        int64_t seq = 1;
        for (int64_t it : {10, 20, 30})
            for (int64_t p = 0; p < 3; ++p)
                sent.push_back(wire(run, seq++, "sample",
                                    sample_fields(it, p, prompts[static_cast<std::size_t>(p)],
                                                  p == 2 ? "" : " text at " + std::to_string(it) + "\nline two"),
                                    // both envelopes are read
                                    it == 20 ? "mwb.telemetry/1" : "mwb.telemetry/1.1"));
        for (const auto& m : sent) server.publish(json::parse(m)["topic"].get<std::string>(), m);
        QVERIFY(server.flush(5s));

        store::Store s(t / "h.sqlite");
        ipc::FollowerOptions f;
        f.endpoint = server.publish_endpoint();
        ipc::Follower follower(f);
        const auto deadline = std::chrono::steady_clock::now() + 15s;
        int64_t got = 0;
        while (got < static_cast<int64_t>(sent.size()) && std::chrono::steady_clock::now() < deadline)
            if (auto m = follower.next(50ms)) {
                QVERIFY(s.ingest(*m));
                ++got;
            }
        QCOMPARE(got, static_cast<int64_t>(sent.size()));
        QCOMPARE(s.counts(run)["samples"], 9);
        QCOMPARE(s.counts(run)["events"], 1);  // only run.start
        const auto all = s.samples(run);
        QCOMPARE(all.size(), std::size_t{9});
        for (std::size_t i = 0; i < all.size(); ++i) {
            QCOMPARE(all[i].iteration, 30 - 10 * static_cast<int64_t>(i / 3));
            QCOMPARE(all[i].prompt_index, static_cast<int64_t>(i % 3));
            QCOMPARE(all[i].prompt, prompts[i % 3]);
            // every field as published
            const json b = json::parse(sent[static_cast<std::size_t>(all[i].seq)]);
            QCOMPARE(all[i].completion, b["completion"].get<std::string>());
            QCOMPARE(all[i].consumed_tokens, b["consumed_tokens"].get<int64_t>());
            QCOMPARE(all[i].temperature, 0.8);
            QCOMPARE(all[i].top_k, 40);
            QCOMPARE(all[i].top_p, 0.95);
            QCOMPARE(all[i].seed, 1234);
            QCOMPARE(all[i].completion_tokens, 7);
            QCOMPARE(all[i].finish_reason, "length");
            QVERIFY(!all[i].greedy);
            QCOMPARE(*all[i].time, b["time"].get<double>());
        }
        store::SampleQuery q;
        q.iteration = 20;
        QCOMPARE(s.samples(run, q).size(), std::size_t{3});
        q.prompt_index = 1;
        QCOMPARE(s.samples(run, q).at(0).prompt, prompts[1]);
        // replays never duplicate
        for (const auto& m : sent) QVERIFY(!s.ingest(msg(m)));
        QCOMPARE(s.counts(run)["samples"], 9);
        QCOMPARE(s.next_seq(run), static_cast<int64_t>(sent.size()));
    }

    void a_malformed_sample_is_refused_with_its_field_named() {
        test::TempDir t;
        store::Store s(t / "h.sqlite");
        const std::string run = "20261201-110000-gpt-00000bad";
        struct Case {
            const char* field;
            json value;  // null: the field removed
        };
        const Case cases[] = {
            {"prompt", std::string(store::kMaxPromptBytes + 1, 'x')},
            {"completion", std::string(store::kMaxCompletionBytes + 1, 'y')},
            {"prompt_index", store::kMaxSamplePrompts},
            {"prompt_index", -1},
            {"iteration", "12"},
            {"iteration", 1.5},
            {"completion", nullptr},
            {"finish_reason", "stop"},
            {"top_p", 1.5},
            {"temperature", -0.1},
            {"greedy", 1},
            {"completion_tokens", -3},
        };
        int64_t seq = 0;
        for (const Case& c : cases) {
            json f = sample_fields(5, 0, "p", "c");
            if (c.value.is_null())
                f.erase(c.field);
            else
                f[c.field] = c.value;
            std::string why;
            QVERIFY(!store::parse_sample(f, &why));
            QVERIFY2(why.find(std::string("'") + c.field + "'") != std::string::npos, why.c_str());
            QVERIFY(s.ingest(msg(wire(run, seq++, "sample", f))));
        }
        QCOMPARE(s.counts(run)["samples"], 0);
        // kept whole, with the reason where an event's kind goes
        const auto kept = s.events(run, "sample");
        QCOMPARE(kept.size(), std::size_t{std::size(cases)});
        QVERIFY2(kept[2].kind.find("'prompt_index' must be an integer in 0..63") != std::string::npos,
                 kept[2].kind.c_str());
        QCOMPARE(s.next_seq(run), seq);
        // boundaries are accepted: the longest prompt, the last prompt index, 3.0 as an integer
        json ok = sample_fields(5, store::kMaxSamplePrompts - 1, std::string(store::kMaxPromptBytes, 'x'), "");
        ok["iteration"] = 5.0;
        QVERIFY(s.ingest(msg(wire(run, seq++, "sample", ok))));
        QCOMPARE(s.counts(run)["samples"], 1);
    }

    // The store's sample is ipc's record: every field the trainer writes (to_json) is checked, stored
    // and read back, so a field added to ipc::SampleMessage without the store's check table or
    // column fails here.
    void every_field_of_the_wire_record_is_stored() {
        // the record written as the trainer writes it (to_json: every member, a new one included)
        const auto sent = sample_fields(12, 2, "In the beginning", " was the word").get<ipc::SampleMessage>();
        const json fields = sent;
        std::string why;
        const auto parsed = store::parse_sample(fields, &why);
        QVERIFY2(parsed, why.c_str());
        QCOMPARE(json(static_cast<const ipc::SampleMessage&>(*parsed)).dump(), fields.dump());
        test::TempDir t;
        store::Store s(t / "s.sqlite");
        const std::string run = "20261201-120000-gpt-0a1b2c3d";
        QVERIFY(s.ingest(msg(wire(run, 0, "sample", fields))));
        const auto back = s.samples(run);
        QCOMPARE(back.size(), std::size_t{1});
        QCOMPARE(json(static_cast<const ipc::SampleMessage&>(back[0])).dump(), fields.dump());
        QCOMPARE(back[0].run, run);
        QCOMPARE(back[0].seq, 0);
        QVERIFY(back[0].time.has_value());
    }

    void the_same_prompt_compares_across_runs() {
        test::TempDir t;
        store::Store s(t / "h.sqlite");
        const std::string a = "20261201-120000-a-0000000a", b = "20261201-120000-b-0000000b",
                          c = "20261201-120000-c-0000000c";
        int64_t seq = 0;
        for (int64_t it : {100, 200, 300}) {
            s.ingest(msg(wire(a, seq++, "sample", sample_fields(it, 0, "Once", "a" + std::to_string(it)))));
            s.ingest(msg(wire(a, seq++, "sample", sample_fields(it, 1, "Twice", "a2-" + std::to_string(it)))));
        }
        seq = 0;
        for (int64_t it : {150, 250})  // b samples the prompts in the other order
            s.ingest(msg(wire(b, seq++, "sample", sample_fields(it, 1, "Once", "b" + std::to_string(it)))));
        s.ingest(msg(wire(c, 0, "run.start", {{"config", json::object()}})));
        const std::vector<std::string> runs = {a, b, c};
        QCOMPARE(s.sample_prompts(runs), (std::vector<std::string>{"Once", "Twice"}));
        auto latest = s.prompt_samples(runs, "Once");
        QCOMPARE(latest.size(), std::size_t{3});
        QCOMPARE(latest[0]->completion, "a300");
        QCOMPARE(latest[1]->completion, "b250");
        QVERIFY(!latest[2]);  // c never sampled
        auto at = s.prompt_samples(runs, "Once", 200);
        QCOMPARE(at[0]->completion, "a200");
        QCOMPARE(at[1]->completion, "b150");
        QVERIFY(!s.prompt_samples(runs, "Once", 99)[0]);
        QVERIFY(!s.prompt_samples(runs, "Twice")[1]);
        // deleting a run deletes its samples
        s.delete_run(a);
        QCOMPARE(s.database().scalar_int("SELECT count(*) FROM samples"), 2);
    }
};

MWB_TEST_SUITE_GUILESS(test_store_samples, TestStoreSamples)
}  // namespace test_store_samples
#include "test_samples.moc"
