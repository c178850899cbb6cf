// mwb-plan as a user runs it, and the presets: every preset loads in mwb-plan, in the config library
// (as mwb-train and the app load it) and, where one process can run it, in mwb-train itself.
#include "published.h"
#include "support/fixtures.h"
#include "support/suite.h"

#include "backend/config/config_io.h"
#include "backend/config/validate.h"
#include "mwb/planner/presets.h"

#include <QProcess>
#include <QtTest>

#include <fstream>

namespace test_planner_mwb_plan {

namespace {

struct Result {
    int code = -1;
    QString out, err;
};

Result run(const QString& program, const QStringList& args) {
    QProcess p;
    p.start(program, args);
    if (!p.waitForFinished(120000)) p.kill();
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

Result plan(const QStringList& args) {
    return run(QString::fromStdString((mwb::test::binary_dir() / "planner" / "mwb-plan").string()), args);
}

const char* kPresets[] = {"gpt3-125m",      "gpt3-350m",    "gpt3-760m",       "gpt3-1.3b",    "gpt3-2.7b",
                          "gpt3-6.7b",      "gpt3-13b",     "gpt3-175b",       "mt-nlg-530b",  "megatron-1t",
                          "tiny-cpu-demo",  "llama-3.2-1b", "llama-3.2-3b",    "llama-3.1-8b", "llama-3.1-70b",
                          "llama-3.1-405b", "llama-2-7b",   "mistral-7b-v0.1", "qwen2.5-7b",   "tinyllama-1.1b"};

/// The Llama-family row of a preset, or nullptr for the GPT ones.
const mwb::test::LlamaRow* llama_row(const std::string& name) {
    for (const auto& r : mwb::test::kLlamaFamily)
        if (name == r.preset) return &r;
    return nullptr;
}

}  // namespace

class TestMwbPlan : public QObject {
    Q_OBJECT
private slots:
    void every_preset_plans_and_fits_its_cluster() {
        for (const char* name : kPresets) {
            const bool cpu = std::string(name) == "tiny-cpu-demo";
            // Llama-family presets: DGX H100 nodes, as many as their layout was chosen for.
            const mwb::test::LlamaRow* llama = llama_row(name);
            QStringList args = {"--preset", name, "--cluster", cpu ? "cpu" : llama ? "H100" : "A100-80GB", "--json"};
            if (llama) args << "--nodes" << QString::number(llama->nodes);
            const Result r = plan(args);
            QVERIFY2(r.code == 0, qPrintable(QString("%1: exit %2 %3 %4").arg(name).arg(r.code).arg(r.err, r.out)));
            const auto j = nlohmann::json::parse(r.out.toStdString());
            QVERIFY2(j["estimated"] && j["fits"] && j["runnable"], name);
            for (const char* category : {"weights", "gradients", "optimizer", "activations", "workspace", "data"})
                QVERIFY(j["memory"]["per_rank"]["by_category"][category]["peak"].get<int64_t>() >= 0);
            for (const char* group : {"tp", "sp", "pp", "dp"})
                QVERIFY(j["communication"]["bytes_sent"].contains(group));
        }
    }

    void presets_load_as_configs_and_validate_on_their_world() {
        QCOMPARE(mwb::planner::preset_names().size(), std::size(kPresets));
        for (const char* name : kPresets) {
            mwb::Config c = mwb::planner::load_preset(name);
            const int replica = c.parallel.tensor_model_parallel_size * c.parallel.pipeline_model_parallel_size;
            mwb::resolve(c, replica, 257);
            const auto issues = mwb::validate(c, replica);
            QVERIFY2(issues.empty(),
                     qPrintable(QString("%1: %2").arg(name, issues.empty() ? "" : issues[0].message.c_str())));
        }
        // Published shapes: GPT-3 175B (Brown et al. 2020, Table 2.1), MT-NLG 530B, the 1T model.
        const mwb::Config g = mwb::planner::load_preset("gpt3-175b");
        QCOMPARE(g.model.num_layers, 96);
        QCOMPARE(g.model.hidden_size, 12288);
        QCOMPARE(g.training.global_batch_size, 1536);
        const mwb::Config t = mwb::planner::load_preset("megatron-1t");
        QCOMPARE(t.parallel.pipeline_model_parallel_size, 64);
    }

    // mwb-train reads the presets: a single process runs the small ones; the others stop at validation
    // asking for their world size, and for nothing else.
    void mwb_train_reads_the_presets() {
        const QString train = QString::fromStdString((mwb::test::binary_dir() / "backend" / "mwb-train").string());
        for (const char* name : kPresets) {
            const QString path = QString::fromStdString(mwb::planner::preset_path(name).string());
            const Result r = run(train, {"--config", path, "--print-config", "--device", "cpu"});
            const mwb::Config c = mwb::planner::load_preset(name);
            if (c.parallel.tensor_model_parallel_size * c.parallel.pipeline_model_parallel_size == 1) {
                QVERIFY2(r.code == 0, qPrintable(QString(name) + ": " + r.err));
            } else {
                QVERIFY2(
                    r.code == 2 && r.err.contains("must divide the number of ranks (1)") && !r.err.contains("problems"),
                    qPrintable(QString(name) + ": " + r.err));
            }
        }
    }

    // mwb-plan search finds layouts for every Llama-family preset on Hopper and Blackwell nodes.
    void llama_presets_search_on_h100_h200_b200() {
        for (const auto& row : mwb::test::kLlamaFamily)
            for (const char* device : {"H100", "H200", "B200"}) {
                const Result r = plan({"search", "--preset", row.preset, "--cluster", device, "--nodes",
                                       QString::number(row.nodes), "--top", "3", "--json"});
                const QString what = QString("%1 on %2: exit %3 %4").arg(row.preset, device).arg(r.code).arg(r.err);
                QVERIFY2(r.code == 0, qPrintable(what));
                const auto j = nlohmann::json::parse(r.out.toStdString());
                QVERIFY2(!j["ranked"].empty(), qPrintable(what));
                QVERIFY2(j["ranked"][0]["mfu"].get<double>() > 0.1 &&
                             j["ranked"][0]["memory_peak_bytes"] <= j["ranked"][0]["memory_limit_bytes"],
                         qPrintable(what));
            }
    }

    // The published count, digit for digit, in the text report.
    void llama_report_prints_the_published_count() {
        const Result r = plan({"--preset", "llama-3.1-8b", "--cluster", "H100"});
        QVERIFY2(r.out.contains("8,030,261,248") && r.out.contains("8 key/value groups") && r.out.contains("SwiGLU") &&
                     r.out.contains("RoPE (base 500000)"),
                 qPrintable(r.out));
    }

    void text_report_has_the_tables() {
        const Result r = plan({"--preset", "gpt3-175b", "--cluster", "a100", "--nodes", "128"});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        for (const char* part : {"Memory per rank", "weights", "gradients", "optimizer", "activations", "workspace",
                                 "Communication per rank", "all_gather", "pipeline bubble", "tokens/s", "MFU", "days"})
            QVERIFY2(r.out.contains(part), part);
    }

    void search_ranks_layouts() {
        const Result r = plan({"search", "--preset", "gpt3-13b", "--cluster", "H100", "--nodes", "2", "--top", "5"});
        QVERIFY2(r.code == 0, qPrintable(r.err + r.out));
        QVERIFY(r.out.contains("fastest") && r.out.contains(" 5. "));
        const Result j = plan({"search", "--preset", "gpt3-13b", "--cluster", "H100", "--nodes", "2", "--json"});
        QCOMPARE(nlohmann::json::parse(j.out.toStdString())["ranked"].size(), 10u);
    }

    void errors_name_what_is_wrong() {
        Result r = plan({"--preset", "gpt3-9000b"});
        QVERIFY(r.code == 2 && r.err.contains("unknown preset \"gpt3-9000b\"") && r.err.contains("gpt3-175b"));
        r = plan({"--preset", "gpt3-125m", "--cluster", "TPUv9"});
        QVERIFY(r.code == 2 && r.err.contains("unknown cluster device \"TPUv9\"") && r.err.contains("H100-SXM"));
        r = plan({"--config", "/nonexistent/run.json"});
        QVERIFY(r.code == 2 && r.err.contains("/nonexistent/run.json"));
        mwb::test::TempDir t;
        std::ofstream(t / "bad.json") << R"({"num_layers": 2, "hiden_size": 64})";
        r = plan({"--config", QString::fromStdString((t / "bad.json").string())});
        QVERIFY2(r.code == 2 && r.err.contains("hiden_size") && r.err.contains("bad.json"), qPrintable(r.err));
        // An invalid layout: exit 3, each problem named by its field.
        r = plan(
            {"--preset", "gpt3-125m", "--tensor-model-parallel-size", "5", "--cluster", "A100-80GB", "--nodes", "1"});
        QVERIFY2(r.code == 3 &&
                     r.out.contains("num_attention_heads (12) must be divisible by tensor_model_parallel_size (5)"),
                 qPrintable(r.out));
        // Too big: exit 3, by how much.
        r = plan({"--preset", "gpt3-175b", "--cluster", "A100-40GB", "--pipeline-model-parallel-size", "2"});
        QVERIFY2(r.code == 3 && r.out.contains("memory: pipeline stage 0 needs") && r.out.contains("too much"),
                 qPrintable(r.out));
    }

    void megatron_accounting_and_overrides() {
        const Result e = plan({"--preset", "gpt3-175b", "--cluster", "A100-80GB", "--json"});
        const Result m =
            plan({"--preset", "gpt3-175b", "--cluster", "A100-80GB", "--json", "--accounting", "megatron"});
        const auto je = nlohmann::json::parse(e.out.toStdString()), jm = nlohmann::json::parse(m.out.toStdString());
        QCOMPARE(jm["accounting"], "megatron");
        QVERIFY(jm["memory"]["per_rank"]["by_category"]["activations"]["peak"] !=
                je["memory"]["per_rank"]["by_category"]["activations"]["peak"]);
        const Result o = plan({"--preset", "gpt3-175b", "--cluster", "A100-80GB", "--json", "--memory-gib", "40",
                               "--efficiency", "0.5", "--inter-node-gbps", "50"});
        const auto jo = nlohmann::json::parse(o.out.toStdString());
        QCOMPARE(jo["time"]["compute_efficiency"].get<double>(), 0.5);
        QCOMPARE(jo["fits"].get<bool>(), false);
    }
};

MWB_TEST_SUITE_GUILESS(test_planner_mwb_plan, TestMwbPlan)
}  // namespace test_planner_mwb_plan
#include "test_mwb_plan.moc"
