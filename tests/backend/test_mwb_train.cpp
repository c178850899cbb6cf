// mwb-train as a user runs it: a real process, its exit codes, its messages, its run directory.
#include "support/fixtures.h"

#include "backend/config/cli.h"

#include <QProcess>
#include "support/skip.h"
#include "support/suite.h"

#include <QtTest>

#include <csignal>
#include <fstream>
#include <thread>

namespace test_backend_mwb_train {

namespace fs = std::filesystem;

namespace {

struct Result {
    int code = -1;
    QString out, err;
};

QString program() { return QString::fromStdString((mwb::test::binary_dir() / "backend" / "mwb-train").string()); }

Result run(const QStringList& args, int timeout_ms = 120000) {
    QProcess p;
    p.start(program(), args);
    if (!p.waitForFinished(timeout_ms)) p.kill();
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

QStringList tiny(const fs::path& run_dir) {
    return {"--preset", "tiny-cpu-demo", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "100",
            "--num-layers", "1",
            "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16", "--micro-batch-size", "2",
            "--global-batch-size", "2", "--lr-warmup-iters", "0", "--log-interval", "1", "--eval-interval", "0", "--eval-iters", "0",
            "--run-dir", QString::fromStdString(run_dir.string())};
}

int lines(const fs::path& file, const std::string& topic = "step") {
    std::ifstream in(file);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) n += line.find("\"topic\":\"" + topic + "\"") != std::string::npos;
    return n;
}

/// Words of an argument file: one option per line, "#" comments, double quotes group words.
QStringList argument_file(const fs::path& path) {
    std::ifstream in(path);
    std::string line;
    QStringList words;
    while (std::getline(in, line)) {
        if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
        std::string word;
        bool quoted = false, any = false;
        for (const char c : line) {
            if (c == '"') quoted = !quoted, any = true;
            else if (c == ' ' && !quoted) {
                if (any) words << QString::fromStdString(word);
                word.clear();
                any = false;
            } else word += c, any = true;
        }
        if (any) words << QString::fromStdString(word);
    }
    return words;
}

/// The resolved configuration mwb-train prints for `args` (exit 0 required).
nlohmann::json print_config(const QStringList& args, QString* err = nullptr) {
    const Result r = run(QStringList{"--print-config"} + args);
    if (err) *err = r.err;
    if (r.code != 0) {
        qWarning("%s", qPrintable(r.err));
        return nullptr;
    }
    return nlohmann::json::parse(r.out.toStdString());
}

/// Runs the argument file tests/backend/megatron/NAME through --print-config and checks each option: a
/// field holds the given value (or `resolved`'s, where Megatron-LM's resolution changes it), an alias
/// sets its field, a flag without effect is reported as such. Returns the options checked (-1 on failure).
int conformance(const std::string& name, const nlohmann::json& resolved) {
    const fs::path file = mwb::test::source_dir() / "tests" / "backend" / "megatron" / name;
    const QStringList args = argument_file(file);
    QString err;
    const auto j = print_config(args, &err);
    if (j.is_null()) return -1;
    int checked = 0;
    for (int i = 0; i < args.size(); ++i) {
        const std::string flag = args[i].toStdString();
        QStringList values;
        while (i + 1 < args.size() && !args[i + 1].startsWith("--")) values << args[++i];
        const std::string v = values.join(' ').toStdString();
        bool ok = false;
        if (const mwb::Field* f = mwb::find_config_field(flag.substr(2))) {
            const std::string key(f->name), type(f->type_name());
            const nlohmann::json& got = j.at(key);
            if (resolved.contains(key)) ok = got == resolved[key];
            else if (type == "bool") ok = got == (values.isEmpty() || v == "true");
            else if (type == "int") ok = got == std::stoll(v);
            else if (type == "float") ok = got == std::stod(v);
            else if (type == "list") ok = got == nlohmann::json(std::vector<std::string>{v});
            else ok = got == v;
        } else {
            for (const mwb::MegatronFlag& m : mwb::megatron_flags()) {
                if (m.flag != flag) continue;
                if (m.kind == mwb::FlagKind::Alias)
                    ok = j.at(std::string(m.field)) == nlohmann::json::parse(m.value.empty() ? v : std::string(m.value));
                else
                    ok = err.contains(QString::fromStdString(flag) + ": accepted, no effect here");
            }
        }
        if (!ok) {
            qWarning("%s: %s %s does not land where Megatron-LM puts it", name.c_str(), flag.c_str(), v.c_str());
            return -1;
        }
        ++checked;
    }
    return checked;
}

}  // namespace

class TestMwbTrain : public QObject {
    Q_OBJECT
private slots:
    void help_lists_megatron_flags() {
        const Result r = run({"--help"});
        QCOMPARE(r.code, 0);
        for (const char* flag : {"--num-layers", "--tensor-model-parallel-size", "--recompute-granularity", "--bf16",
                                 "--mock-data", "--save-interval", "--config"})
            QVERIFY2(r.out.contains(flag), flag);
    }

    void invalid_configs_stop_before_work_naming_the_field() {
        const std::pair<QStringList, QString> cases[] = {
            {{"--num-attention-heads", "5"}, "hidden_size (256) must be divisible by num_attention_heads (5)"},
            {{"--global-batch-size", "10", "--micro-batch-size", "4"}, "global_batch_size (10)"},
            {{"--bf16", "--fp16"}, "bf16 and fp16 cannot both be set"},
            {{"--recompute-granularity", "full"}, "recompute_method"},
            {{"--tensor-model-parallel-size", "2"}, "must divide the number of ranks (1)"},
            {{"--num-layers", "four"}, "--num-layers four: expected an integer"},
            {{"--lr-decay-style", "exp"}, "expected one of constant, linear, cosine"},
            {{"--config", "/nonexistent/run.json"}, "cannot read '/nonexistent/run.json'"},
            {{"--tokenizer-type", "GPT2BPETokenizer"}, "GPT2BPETokenizer needs vocab_file"},
            {{"--data-path", "/nonexistent/corpus"}, "'/nonexistent/corpus.idx' does not exist"},
        };
        for (const auto& [args, expected] : cases) {
            mwb::test::TempDir t;
            const QStringList base = args.contains("--config") ? QStringList{} : QStringList{"--preset", "tiny-cpu-demo"};
            const Result r = run(base + args + QStringList{"--run-dir", QString::fromStdString(t.path().string())});
            QVERIFY2(r.code == 2, qPrintable(args.join(' ') + " -> exit " + QString::number(r.code) + ": " + r.err));
            QVERIFY2(r.err.contains(expected), qPrintable(args.join(' ') + ": " + r.err));
            QVERIFY2(!fs::exists(t / "metrics.jsonl"), "an invalid run must not start");
        }
    }

    void unknown_config_key_names_file_and_key() {
        mwb::test::TempDir t;
        std::ofstream(t / "cfg.json") << R"({"num_layers": 2, "hidden_sise": 64})";
        const Result r = run({"--config", QString::fromStdString((t / "cfg.json").string())});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("unknown key \"hidden_sise\"") && r.err.contains("cfg.json") &&
                     r.err.contains("did you mean \"hidden_size\""),
                 qPrintable(r.err));
    }

    void print_config_resolves_the_embedded_demo() {
        const Result r = run({"--preset", "tiny-cpu-demo", "--print-config", "--train-iters", "70"});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        const auto j = nlohmann::json::parse(r.out.toStdString());
        QCOMPARE(j["train_iters"], 70);
        QCOMPARE(j["ffn_hidden_size"], 4 * j["hidden_size"].get<int>());
        QCOMPARE(j["tokenizer_type"], "ByteTokenizer");
    }

    void trains_and_writes_the_run_directory() {
        mwb::test::TempDir t;
        const Result r = run(tiny(t.path()) + QStringList{"--train-iters", "3", "--transformer-impl", "local"});
        QVERIFY2(r.code == 0, qPrintable(r.err + r.out));
        // A Megatron-LM flag without effect here: said once at start, recorded in run.json.
        QVERIFY2(r.out.contains("--transformer-impl: accepted, no effect here"), qPrintable(r.out));
        std::ifstream run_json(t / "run.json");
        const auto accepted = nlohmann::json::parse(run_json)["accepted_flags"];
        QCOMPARE(accepted.size(), std::size_t{1});
        QCOMPARE(accepted[0]["flag"], "--transformer-impl");
        QCOMPARE(accepted[0]["values"], nlohmann::json{"local"});
        QVERIFY2(r.out.contains("iter      3/3") && r.out.contains("tok/s") && r.out.contains("ETA"), qPrintable(r.out));
        QVERIFY(r.out.contains(QString::fromStdString(t.path().string())));
        QCOMPARE(lines(t / "metrics.jsonl"), 3);
        QVERIFY(fs::exists(t / "run.json"));
    }

    void without_a_gpu_auto_trains_on_the_cpu_and_cuda_is_refused() {
        mwb::test::TempDir t;
        const Result a = run(tiny(t / "auto") + QStringList{"--train-iters", "1", "--device", "auto"});
        if ((a.out + a.err).contains("device auto: using the GPU")) MWB_SKIP("this machine has a usable GPU");
        QVERIFY2(a.code == 0, qPrintable(a.err + a.out));
        QCOMPARE((a.out + a.err).count("device auto: using the CPU ("), 1);  // says why, once
        const Result c = run(tiny(t / "cuda") + QStringList{"--train-iters", "1", "--device", "cuda"});
        QCOMPARE(c.code, 2);  // a configuration error: nothing started
        QVERIFY2(c.err.contains("--device") && c.err.contains("device cuda: "), qPrintable(c.err));
        QVERIFY(!fs::exists(t / "cuda" / "metrics.jsonl"));
    }

    // ---- issue 16: command-line parse failures -----------------------------------------------------

    void a_blend_on_the_command_line_is_a_list() {
        const auto j = print_config({"--preset", "tiny-cpu-demo", "--data-path", "0.3", "corpus_a", "0.7", "corpus_b",
                                     "--seed", "7"});
        QVERIFY(!j.is_null());
        QCOMPARE(j["data_path"], (nlohmann::json{"0.3", "corpus_a", "0.7", "corpus_b"}));
        QCOMPARE(j["seed"], 7);  // the list ends at the next flag
    }

    void lr_zero_trains_and_only_a_missing_lr_is_required() {
        // Megatron-LM accepts --lr 0; "lr is required" is for a run without --lr.
        const QStringList model = {"--num-layers",          "1", "--hidden-size", "32",
                                   "--num-attention-heads", "2", "--seq-length",  "16",
                                   "--train-iters",         "1", "--mock-data"};
        const auto j = print_config(model + QStringList{"--lr", "0"});
        QVERIFY(!j.is_null());
        QCOMPARE(j.at("lr").get<double>(), 0.0);
        mwb::test::TempDir t;
        const Result zero = run(tiny(t / "zero") + QStringList{"--lr", "0", "--min-lr", "0", "--train-iters", "2"});
        QVERIFY2(zero.code == 0, qPrintable(zero.err));
        QCOMPARE(lines(t / "zero" / "metrics.jsonl"), 2);
        const Result missing = run(model + QStringList{"--run-dir", QString::fromStdString(t.path().string())});
        QVERIFY2(missing.code == 2 && missing.err.contains("lr is required (--lr X)"), qPrintable(missing.err));
        const Result negative =
            run(model + QStringList{"--lr", "-0.5", "--run-dir", QString::fromStdString(t.path().string())});
        QVERIFY2(negative.code == 2 && negative.err.contains("lr must not be negative (got -0.5)"),
                 qPrintable(negative.err));
    }

    void parse_errors_exit_2_with_a_suggestion() {
        const Result misspelt = run({"--num-layer", "3"});
        QCOMPARE(misspelt.code, 2);
        QVERIFY2(misspelt.err.contains("did you mean --num-layers?"), qPrintable(misspelt.err));
        const Result no_value = run({"--num-layers"});  // CLI11's own code would be 109 or 114
        QCOMPARE(no_value.code, 2);
        QVERIFY2(no_value.err.contains("--num-layers"), qPrintable(no_value.err));
        const Result far = run({"--zzzzzzzzzzzzzzzz"});
        QCOMPARE(far.code, 2);
        QVERIFY2(far.err.contains("unknown flag --zzzzzzzzzzzzzzzz") && !far.err.contains("did you mean"),
                 qPrintable(far.err));
    }

    void non_finite_values_are_refused_by_name() {
        for (const char* v : {"inf", "nan", "-inf", "1e400"}) {
            const Result r = run({"--preset", "tiny-cpu-demo", "--lr", v, "--print-config"});
            QCOMPARE(r.code, 2);
            QVERIFY2(r.err.contains(QString("--lr %1: expected a finite number").arg(v)), qPrintable(r.err));
        }
        mwb::test::TempDir t;
        std::ofstream(t / "big.json") << R"({"num_layers": 2, "lr": 1e400})";
        const Result r = run({"--config", QString::fromStdString((t / "big.json").string()), "--print-config"});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("lr in " + QString::fromStdString((t / "big.json").string())) && r.err.contains("1e400"),
                 qPrintable(r.err));
    }

    // ---- issue 15: Megatron-LM's defaults, its flags ----------------------------------------------

    void megatron_flags_start_from_megatron_defaults() {
        // The command of issue 15: no warm-up, min_lr, dropout or decay style that nobody asked for.
        const QStringList args{"--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "512",
                               "--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4",
                               "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "1",
                               "--global-batch-size", "8", "--train-iters", "10", "--lr", "1e-4"};
        const auto j = print_config(args);
        QVERIFY(!j.is_null());
        QCOMPARE(j["lr_warmup_iters"], 0);
        QCOMPARE(j["min_lr"], 0.0);
        QCOMPARE(j["hidden_dropout"], 0.1);
        QCOMPARE(j["attention_dropout"], 0.1);
        QCOMPARE(j["adam_beta2"], 0.999);
        QCOMPARE(j["weight_decay"], 0.01);
        QCOMPARE(j["lr_decay_style"], "linear");
        QCOMPARE(j["lr_decay_iters"], 10);
        // A required option that is missing is named.
        const Result r = run({"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                              "--seq-length", "32", "--lr", "1e-3", "--print-config"});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("--train-iters") && r.err.contains("--train-samples") && r.err.contains("required"),
                 qPrintable(r.err));
    }

    void no_model_flags_run_the_demo_preset() {
        const auto demo = print_config({});
        const auto with_logging = print_config({"--log-interval", "5", "--threads", "1"});
        const auto named = print_config({"--preset", "tiny-cpu-demo"});
        QVERIFY(!demo.is_null() && !with_logging.is_null() && !named.is_null());
        QCOMPARE(demo["hidden_size"], 256);
        QCOMPARE(demo["lr"], 0.003);
        QCOMPARE(demo, named);
        QCOMPARE(with_logging["lr"], 0.003);
        QCOMPARE(with_logging["log_interval"], 5);
        const auto gpt3 = print_config({"--preset", "gpt3-125m", "--train-iters", "7"});
        QVERIFY(!gpt3.is_null());
        QCOMPARE(gpt3["hidden_size"], 768);
        QCOMPARE(gpt3["train_iters"], 7);
        const Result unknown = run({"--preset", "no-such-preset", "--print-config"});
        QCOMPARE(unknown.code, 2);
        QVERIFY2(unknown.err.contains("gpt3-175b"), qPrintable(unknown.err));  // lists the presets there are
    }

    void megatron_only_flags_are_accepted_aliased_or_refused() {
        QString err;
        const auto j = print_config({"--preset", "tiny-cpu-demo", "--disable-bias-linear", "--use-flash-attn", "--transformer-impl",
                                     "transformer_engine", "--wandb-project", "p", "--no-log-loss-scale-to-tensorboard",
                                     "--persistent-save-interval", "40", "--context-parallel-size", "1"},
                                    &err);
        QVERIFY(!j.is_null());
        QCOMPARE(j["add_bias_linear"], false);                 // store_false aliases
        QCOMPARE(j["log_loss_scale_to_tensorboard"], false);
        QCOMPARE(j["save_interval"], 40);                       // second name of --save-interval
        QVERIFY2(err.contains("--use-flash-attn: accepted, no effect here") && err.contains("--transformer-impl") &&
                     err.contains("Weights & Biases is not contacted"),
                 qPrintable(err));
        for (const QStringList& bad : {QStringList{"--apply-layernorm-1p"}, QStringList{"--fp8-format", "hybrid"},
                                       QStringList{"--context-parallel-size", "2"}}) {
            const Result r = run(QStringList{"--preset", "tiny-cpu-demo", "--print-config"} + bad);
            QCOMPARE(r.code, 2);
            QVERIFY2(r.err.contains(bad.front() + " ") || r.err.contains(bad.front() + ":"), qPrintable(r.err));
            QVERIFY2(r.err.contains("not supported yet"), qPrintable(r.err));
        }
        // The table never shadows a field (one way to set each thing).
        for (const mwb::MegatronFlag& m : mwb::megatron_flags())
            QVERIFY2(!mwb::find_config_field(std::string(m.flag.substr(2))), std::string(m.flag).c_str());
    }

    void megatron_example_script_conformance() {
        // Every option of (shortened) Megatron-LM example scripts lands on the field Megatron sets.
        QCOMPARE(conformance("train_gpt3_175b_distributed.args", {}), 33);
        const auto gpt3 = print_config(
            argument_file(mwb::test::source_dir() / "tests" / "backend" / "megatron" / "train_gpt3_175b_distributed.args"));
        QCOMPARE(gpt3["global_batch_size"], 8);  // the schedule's last batch size, as Megatron-LM sets it
        // Megatron-LM too turns sequence_parallel off at tensor_model_parallel_size 1 (validate_args).
        // --attention-backend fused is Transformer Engine's cuDNN attention: ours is cudnn.
        QCOMPARE(conformance("train_llama3_8b_h100_fp8.args", {{"sequence_parallel", false}, {"attention_backend", "cudnn"}}),
                 66);
        // What the shortened Llama copy leaves out is refused by name.
        for (const QStringList& bad : {QStringList{"--apply-layernorm-1p"}, QStringList{"--decoupled-lr", "5.0e-4"},
                                       QStringList{"--grad-reduce-in-bf16"}, QStringList{"--fp8-format", "hybrid"}}) {
            const Result r = run(QStringList{"--preset", "tiny-cpu-demo", "--print-config"} + bad);
            QVERIFY2(r.code == 2 && r.err.contains("not supported yet"), qPrintable(bad.join(' ') + ": " + r.err));
        }
    }

    void sigterm_checkpoints_and_exits_130() {
        mwb::test::TempDir t;
        QProcess p;
        p.start(program(), tiny(t / "run") + QStringList{"--train-iters", "100000", "--save",
                                                        QString::fromStdString((t / "ckpt").string())});
        QVERIFY(p.waitForStarted());
        for (int i = 0; i < 600 && lines(t / "run" / "metrics.jsonl") < 1; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        QVERIFY(lines(t / "run" / "metrics.jsonl") >= 1);
        ::kill(static_cast<pid_t>(p.processId()), SIGTERM);
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 130);
        QVERIFY(fs::exists(t / "ckpt" / "latest"));
        std::ifstream events(t / "run" / "events.jsonl");
        std::string line, last;
        while (std::getline(events, line)) last = line;
        QVERIFY2(last.find("\"status\":\"interrupted\"") != std::string::npos, last.c_str());
    }
};

MWB_TEST_SUITE_GUILESS(test_backend_mwb_train, TestMwbTrain)
}  // namespace test_backend_mwb_train
#include "test_mwb_train.moc"
