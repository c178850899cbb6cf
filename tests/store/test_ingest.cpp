// Ingesting the wire's messages: each topic lands in its table, replays and out-of-order arrivals
// never duplicate or lose anything (next_seq stays the first missing seq), unknown topics and fields
// are kept, runs follow their lifecycle; and the app's run list, tags, notes and config diff.
#include "ipc/wire_fixtures.h"
#include "support/fixtures.h"
#include "support/suite.h"

#include "mwb/store/error.h"
#include "mwb/store/store.h"

#include <QtTest>

#include <random>

namespace test_store_ingest {

using namespace mwb;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

ipc::Message msg(const std::string& run, int64_t seq, const std::string& topic, const json& fields, double time = 0) {
    auto m = ipc::parse_message(test::wire_message(run, seq, topic, fields, time));
    if (!m) throw std::runtime_error("bad test message");
    return *m;
}

/// A small finished run: start, steps (with memory), an eval, a checkpoint event, end.
std::vector<ipc::Message> finished_run(const std::string& run, double t0, double lr = 1e-3) {
    std::vector<ipc::Message> v;
    int64_t seq = 0;
    v.push_back(msg(run, seq++, "run.start",
                    {{"config", {{"lr", lr}, {"hidden_size", 64}, {"log_interval", 1}, {"train_iters", 20}}},
                     {"topology", {{"world_size", 1}}},
                     {"hosts", {"h1"}},
                     {"derived", {{"parameters", 1000}}},
                     {"iteration", 0}},
                    t0));
    for (int it = 1; it <= 20; ++it) {
        // As the trainer writes them: per-rank times in ranks[], rank 0's memory in mem, then a memory record.
        const json ranks = json::array(
            {{{"rank", 0}, {"time", {{"forward_s", 0.1}, {"backward_s", 0.2}, {"pipeline_bubble_s", 0.01}}}},
             {{"rank", 1}, {"time", {{"forward_s", 0.12}, {"backward_s", 0.19}}}}});
        v.push_back(msg(run, seq++, "step",
                        {{"iteration", it},
                         {"lm_loss", 5.0 - 0.1 * it},
                         {"lr", lr},
                         {"grad_norm", 1.0},
                         {"mem_peak_bytes_max_rank", 900},
                         {"future_metric", it * 2},
                         {"ranks", ranks},
                         {"mem", {{"allocated", 100 + it}, {"peak", 500}}}},
                        t0 + it));
        v.push_back(msg(run, seq++, "memory",
                        {{"iteration", it},
                         {"ranks",
                          {{{"rank", 0},
                            {"allocated", 100 + it},
                            {"peak", 500},
                            {"reserved", 600},
                            {"by_category", {{"weights", {{"current", 10}, {"peak", 10}}}}}},
                           {{"rank", 1}, {"allocated", 200 + it}, {"peak", 900}}}}},
                        t0 + it));
        if (it == 10)
            v.push_back(msg(run, seq++, "eval", {{"iteration", 10}, {"lm_loss", 4.2}, {"ppl", 66.7}, {"samples", 8},
                                                    {"split", "valid"}, {"a_later_field", 1.5}},
                            t0 + 10.5));
        if (it == 15)
            v.push_back(
                msg(run, seq++, "event", {{"kind", "checkpoint_saved"}, {"iteration", 15}, {"path", "/c"}}, t0 + 15.5));
    }
    v.push_back(msg(run, seq++, "run.end", {{"status", "finished"}, {"reason", ""}, {"iteration", 20}}, t0 + 30));
    return v;
}

template <typename F>
QString error_of(F&& f) {
    try {
        f();
    } catch (const store::Error& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

}  // namespace

class TestStoreIngest : public QObject {
    Q_OBJECT
private slots:
    void every_topic_lands_in_its_table() {
        test::TempDir t;
        store::Store s(t / "h.sqlite");
        for (const auto& m : finished_run("r1-0a0b0c0d", 1000)) QVERIFY(s.ingest(m));
        const auto r = s.run("r1-0a0b0c0d");
        QVERIFY(r);
        QCOMPARE(r->name, "r1");  // the random suffix of the run directory's name is dropped
        QCOMPARE(r->status, "finished");
        QCOMPARE(*r->created, 1000.0);
        QCOMPARE(*r->finished, 1030.0);
        QCOMPARE(r->iteration, 20);
        QCOMPARE(*r->last_loss, 5.0 - 0.1 * 20);
        QCOMPARE(r->config["hidden_size"], 64);
        QCOMPARE(r->derived["parameters"], 1000);
        QCOMPARE(r->next_seq, 44);
        const auto counts = s.counts("r1-0a0b0c0d");
        QCOMPARE(counts.at("messages"), 44);
        QCOMPARE(counts.at("steps"), 20);
        QCOMPARE(counts.at("evals"), 1);
        QCOMPARE(counts.at("events"), 3);   // run.start, checkpoint, run.end
        QCOMPARE(counts.at("memory"), 40);  // two ranks, every interval
        QCOMPARE(s.evals("r1-0a0b0c0d").front().body["ppl"].get<double>(), 66.7);
        // every field comes back as it arrived: the columns and what the store kept in `extra`
        QCOMPARE(s.evals("r1-0a0b0c0d").front().body,
                 json({{"iteration", 10}, {"lm_loss", 4.2}, {"ppl", 66.7}, {"samples", 8}, {"split", "valid"},
                       {"a_later_field", 1.5}}));
        QCOMPARE(s.events("r1-0a0b0c0d", "run.end").front().body["status"], "finished");
        const auto mem = s.memory("r1-0a0b0c0d", 0);
        QCOMPARE(mem.size(), std::size_t{20});
        QCOMPARE(*mem.back().allocated, 120);
        QCOMPARE(mem.back().by_category["weights"]["peak"], 10);
        QCOMPARE(*s.memory("r1-0a0b0c0d", 1).back().peak, 900);
        // The step time breakdown is the slowest rank's per phase; unknown fields stay reachable.
        QCOMPARE(s.series("r1-0a0b0c0d", "forward_s").buckets.front().y_max, 0.12);
        QCOMPARE(s.series("r1-0a0b0c0d", "backward_s").buckets.front().y_max, 0.2);
        QCOMPARE(s.series("r1-0a0b0c0d", "pipeline_bubble_s").points, 20);
        QCOMPARE(s.series("r1-0a0b0c0d", "optimizer_s").points, 0);
        QCOMPARE(s.series("r1-0a0b0c0d", "mem_peak_bytes_max_rank").buckets.front().y_max, 900.0);
        QCOMPARE(s.series("r1-0a0b0c0d", "future_metric").buckets.back().y_max, 40.0);
        QVERIFY(error_of([&] { s.series("r1-0a0b0c0d", "x'; DROP TABLE runs; --"); }).contains("not a metric name"));
        QVERIFY(error_of([&] { s.series("nope", "lm_loss"); }).contains("no run 'nope'"));
    }

    void replays_and_shuffles_never_duplicate() {
        test::TempDir t;
        store::Store s(t / "h.sqlite");
        auto run = finished_run("r2", 2000);
        std::mt19937 rng(5);
        std::vector<ipc::Message> shuffled = run;
        std::shuffle(shuffled.begin() + 1, shuffled.end(), rng);
        std::size_t inserted = 0;
        {
            store::Store::Transaction tx(s);
            for (std::size_t i = 0; i < shuffled.size(); ++i) {
                inserted += s.ingest(shuffled[i]);
                if (i == shuffled.size() / 2) QVERIFY(s.next_seq("r2") < 44);  // a hole somewhere below
            }
            tx.commit();
        }
        QCOMPARE(inserted, run.size());
        QCOMPARE(s.next_seq("r2"), 44);
        for (const auto& m : run) QVERIFY(!s.ingest(m));  // a full replay adds nothing
        QCOMPARE(s.counts("r2").at("steps"), 20);
        QCOMPARE(s.series("r2", "lm_loss").points, 20);
        // Blocks stay exact across transactions and replays.
        const auto a = s.series("r2", "lm_loss", {std::nullopt, std::nullopt, 3}),
                   b = s.series_brute_force("r2", "lm_loss", {std::nullopt, std::nullopt, 3});
        QCOMPARE(a.buckets.size(), b.buckets.size());
        for (std::size_t i = 0; i < a.buckets.size(); ++i) QCOMPARE(a.buckets[i].y_min, b.buckets[i].y_min);
    }

    void a_rolled_back_batch_leaves_nothing() {
        test::TempDir t;
        store::Store s(t / "h.sqlite");
        {
            store::Store::Transaction tx(s);
            for (const auto& m : finished_run("r3", 1)) s.ingest(m);
        }  // no commit
        QVERIFY(s.runs().empty());
        QCOMPARE(s.next_seq("r3"), 0);
        for (const auto& m : finished_run("r3", 1)) QVERIFY(s.ingest(m));
        QCOMPARE(s.counts("r3").at("messages"), 44);
    }

    void runs_follow_their_lifecycle_and_unknown_topics_are_kept() {
        test::TempDir t;
        store::Store s(t / "h.sqlite");
        s.ingest(msg("r4", 0, "run.start", {{"config", {{"lr", 1}}}, {"iteration", 0}}, 50));
        QCOMPARE(s.run("r4")->status, "running");
        s.ingest(msg("r4", 1, "run.end", {{"status", "interrupted"}, {"reason", "signal"}, {"iteration", 7}}, 60));
        QCOMPARE(s.run("r4")->status, "interrupted");
        QCOMPARE(s.run("r4")->reason, "signal");
        // Resumed into the same run directory: the same run, running again, created unchanged.
        s.ingest(msg("r4", 2, "run.start", {{"config", {{"lr", 1}}}, {"iteration", 7}}, 70));
        QCOMPARE(s.run("r4")->status, "running");
        QVERIFY(!s.run("r4")->finished);
        QCOMPARE(*s.run("r4")->created, 50.0);
        s.ingest(msg("r4", 3, "alert.thermal", {{"celsius", 91}}, 71));
        s.ingest(msg("r4", 4, "memory",
                     {{"iteration", 8},
                      {"ranks", {{{"rank", 0}, {"allocated", 5}}, {{"rank", 3}, {"allocated", 9}, {"peak", 11}}}}},
                     72));
        QCOMPARE(s.events("r4", "alert.thermal").front().body["celsius"], 91);
        QCOMPARE(*s.memory("r4", 3).front().peak, 11);
        QCOMPARE(s.memory("r4").size(), std::size_t{2});
        QVERIFY(!s.ingest(*ipc::parse_message(test::wire_message("r4", -1, "heartbeat"))));  // not part of the series
        QCOMPARE(s.next_seq("r4"), 5);
    }

    void run_list_filters_tags_notes_and_deletion() {
        test::TempDir t;
        store::Store s(t / "h.sqlite");
        for (const auto& m : finished_run("alpha-1", 100, 1e-3)) s.ingest(m);
        for (const auto& m : finished_run("beta-2", 200, 3e-4)) s.ingest(m);
        s.ingest(msg("gamma_3", 0, "run.start", {{"iteration", 0}}, 300));
        s.add_tag("alpha-1", "baseline");
        s.add_tag("beta-2", "sweep");
        s.add_tag("gamma_3", "sweep");
        s.set_notes("beta-2", "lower lr 100%");
        s.set_name("gamma_3", "third");
        auto uids = [&](const store::RunFilter& f) {
            std::vector<std::string> v;
            for (const auto& r : s.runs(f)) v.push_back(r.uid);
            return v;
        };
        QCOMPARE(uids({}), (std::vector<std::string>{"gamma_3", "beta-2", "alpha-1"}));
        store::RunFilter f;
        f.tag = "sweep";
        QCOMPARE(uids(f), (std::vector<std::string>{"gamma_3", "beta-2"}));
        f = {};
        f.statuses = {"running"};
        QCOMPARE(uids(f), std::vector<std::string>{"gamma_3"});
        f = {};
        f.text = "100%";  // LIKE wildcards are literal
        QCOMPARE(uids(f), std::vector<std::string>{"beta-2"});
        f = {};
        f.text = "a_3";
        QCOMPARE(uids(f), std::vector<std::string>{"gamma_3"});
        f = {};
        f.text = "third";
        QCOMPARE(uids(f), std::vector<std::string>{"gamma_3"});
        f = {};
        f.created_after = 150;
        f.created_before = 250;
        QCOMPARE(uids(f), std::vector<std::string>{"beta-2"});
        f = {};
        f.limit = 1;
        f.offset = 1;
        QCOMPARE(uids(f), std::vector<std::string>{"beta-2"});
        s.remove_tag("gamma_3", "sweep");
        QVERIFY(s.run("gamma_3")->tags.empty());
        s.delete_run("beta-2");
        QVERIFY(!s.run("beta-2"));
        QCOMPARE(s.database().scalar_int("SELECT count(*) FROM steps"), 20);  // only alpha's remain
        QCOMPARE(s.database().scalar_int("SELECT count(*) FROM step_blocks WHERE run NOT IN (SELECT id FROM runs)"), 0);
        QVERIFY(error_of([&] { s.add_tag("nope", "x"); }).contains("no run 'nope'"));
    }

    void config_diff_lists_what_differs() {
        test::TempDir t;
        store::Store s(t / "h.sqlite");
        for (const auto& m : finished_run("a", 1, 1e-3)) s.ingest(m);
        for (const auto& m : finished_run("b", 2, 3e-4)) s.ingest(m);
        s.ingest(msg("c", 0, "run.start",
                     {{"config", {{"lr", 1e-3}, {"hidden_size", 64}, {"seq_length", 128}}},
                      {"topology", {{"world_size", 8}}},
                      {"iteration", 0}}));
        const auto d = s.config_diff({"a", "b", "c"});
        std::map<std::string, std::vector<json>> by_key;
        for (const auto& x : d) by_key[x.key] = x.values;
        QCOMPARE(by_key.size(), std::size_t{5});
        QCOMPARE(by_key["lr"], (std::vector<json>{1e-3, 3e-4, 1e-3}));
        QCOMPARE(by_key["seq_length"], (std::vector<json>{nullptr, nullptr, 128}));
        QCOMPARE(by_key["topology.world_size"], (std::vector<json>{1, 1, 8}));
        QVERIFY(by_key.count("log_interval") && by_key.count("train_iters"));
        QVERIFY(s.config_diff({"a", "a"}).empty());
    }
};

MWB_TEST_SUITE_GUILESS(test_store_ingest, TestStoreIngest)
}  // namespace test_store_ingest
#include "test_ingest.moc"
