// Real mwb-train and mwb-generate processes:
//   - a training run with --sample-interval publishes `sample` records (schema mwb.telemetry/1.1) that a
//     follower receives over the run's ZeroMQ stream, and the same records land in samples.jsonl;
//   - a data-parallel run (mpirun -np 2) samples on rank 0, and mwb-generate on the checkpoint saved at
//     the last iteration, greedy, writes the completion the run sampled from the same weights;
//   - runs split by tensor and pipeline parallelism (TP 2, PP 2, TP 2 x PP 2 with sequence parallelism,
//     interleaved virtual stages, TP 2 x DP 2 with the distributed optimizer; a GPT and a Llama shape)
//     sample, greedy, exactly the tokens mwb-generate (one process, the checkpoint resharded) writes from
//     the weights saved at that iteration;
//   - mwb-generate under mpirun (TP 2, PP 2, TP 2 x PP 2) writes, greedy and sampled, exactly the --json
//     lines one process writes from the same checkpoint;
//   - mwb-generate reads a tensor-parallel checkpoint (resharded to one process), streams --json lines;
//   - bad input: a prompts file with an overlong line, bad flags — exit 2 naming them.
#include "mwb/ipc/follower.h"
#include "mwb/kernels/device.h"
#include "parallel/mpi_runs.h"
#include "support/jsonl.h"
#include "support/suite.h"
#include "support/trainer_process.h"

#include <QtTest>

#include <map>

namespace test_generate_processes {

using namespace mwb;
using namespace std::chrono_literals;

namespace {

QString generate_exe() {
    return test::qpath(test::binary_dir() / "backend" / "mwb-generate");
}

struct Output {
    int code = -1;
    QString out, err;
};

/// mwb-generate, under mpirun when ranks > 1.
Output run_generate(const QStringList& args, int ranks = 1) {
    QProcess p;
    test::start_ranks(p, ranks, generate_exe(), args);
    Output o;
    if (!p.waitForFinished(120000)) p.kill();
    o.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    o.out = p.readAllStandardOutput();
    o.err = p.readAllStandardError();
    return o;
}

std::vector<nlohmann::json> json_lines(const QString& text) {
    std::vector<nlohmann::json> out;
    for (const QString& line : text.split('\n', Qt::SkipEmptyParts))
        out.push_back(nlohmann::json::parse(line.toStdString()));
    return out;
}

void write(const std::filesystem::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary) << text;
}

/// mwb-generate --greedy --json's completion of each prompt of `prompts`, by prompt index.
std::map<int, std::string> greedy_completions(const std::filesystem::path& ckpt, const std::filesystem::path& prompts,
                                              int max_new_tokens, int expect_iteration) {
    const Output g =
        run_generate({"--load", test::qpath(ckpt), "--prompt-file", test::qpath(prompts), "--max-new-tokens",
                      QString::number(max_new_tokens), "--greedy", "--json", "--threads", "1"});
    if (g.code != 0) qWarning("mwb-generate: %s", qPrintable(g.err));
    const auto lines = json_lines(g.out);
    std::map<int, std::string> done;
    if (lines.empty() || lines.front()["model"]["iteration"].get<int>() != expect_iteration) return done;
    for (const auto& l : lines)
        if (l["type"] == "done") done[l["prompt_index"].get<int>()] = l["completion"].get<std::string>();
    return done;
}

/// Four layers of four heads with a wide init (std 0.3): after a few steps its greedy completions vary
/// token to token, so a misplaced shard, head or stage changes them.
QStringList varied_model() {
    return {"--num-layers", "4", "--num-attention-heads", "4", "--init-method-std", "0.3"};
}

/// The Llama family's choices: RoPE, RMSNorm, SwiGLU, grouped-query attention (2 groups), untied, no biases.
QStringList llama_shape() {
    return {"--position-embedding-type",
            "rope",
            "--normalization",
            "RMSNorm",
            "--swiglu",
            "--group-query-attention",
            "--num-query-groups",
            "2",
            "--untie-embeddings-and-output-weights",
            "--disable-bias-linear"};
}

/// The tiny model of tiny_run_args (NullTokenizer: prompts are space-separated ids).
QStringList tiny_model(const std::filesystem::path& run, int iterations, const QStringList& extra = {}) {
    return test::tiny_run_args(run, iterations, extra);
}

}  // namespace

class TestSamplesAndCli : public QObject {
    Q_OBJECT
private slots:
    void samples_reach_the_stream_and_the_run_directory() {
        test::TempDir t;
        write(t / "prompts.txt", "1 2 3\n\n7 8 9 10 11\n");
        test::Child c;
        c.start(test::trainer_exe(),
                tiny_model(t / "run", 600,
                           {"--sample-interval", "200", "--sample-prompts", test::qpath(t / "prompts.txt"),
                            "--sample-max-new-tokens", "6", "--sample-temperature", "0.8", "--sample-top-k", "5",
                            "--sample-seed", "99"}));
        ipc::FollowerOptions fo;
        fo.endpoint = (t / "run").string();
        ipc::Follower f(fo);
        std::vector<nlohmann::json> streamed;
        bool ended = false;
        const auto deadline = std::chrono::steady_clock::now() + 120s;
        while (!ended && std::chrono::steady_clock::now() < deadline) {
            auto m = f.next(500ms);
            if (!m) continue;
            if (m->topic == "sample") streamed.push_back(m->body);
            ended = m->topic == "run.end";
        }
        QCOMPARE(c.wait(), 0);
        QVERIFY(ended);
        QCOMPARE(f.stats().from_files, uint64_t{0});  // everything came over ZeroMQ (live or snapshot)
        QCOMPARE(streamed.size(), std::size_t{6});    // iterations 200, 400, 600 x two prompts
        const auto filed = test::jsonl_records(t / "run" / "samples.jsonl", "sample");
        QCOMPARE(filed.size(), streamed.size());
        for (std::size_t i = 0; i < streamed.size(); ++i) {
            const auto& s = streamed[i];
            QCOMPARE(s, filed[i]);
            QCOMPARE(s["schema"].get<std::string>(), std::string("mwb.telemetry/1.1"));
            QCOMPARE(s["iteration"].get<int64_t>(), int64_t(200 * (i / 2 + 1)));
            QCOMPARE(s["consumed_tokens"].get<int64_t>(), s["iteration"].get<int64_t>() * 4 * 64);
            QCOMPARE(s["prompt_index"].get<int64_t>(), int64_t(i % 2));
            QCOMPARE(s["prompt"].get<std::string>(), std::string(i % 2 ? "7 8 9 10 11" : "1 2 3"));
            QCOMPARE(s["prompt_tokens"].get<int64_t>(), int64_t(i % 2 ? 5 : 3));
            const auto n = s["completion_tokens"].get<int64_t>();
            const std::string reason = s["finish_reason"];
            QVERIFY((reason == "length" && n == 6) || (reason == "eos" && n < 6));
            // NullTokenizer text: the ids, space-separated, each inside the vocabulary
            const QStringList ids =
                QString::fromStdString(s["completion"].get<std::string>()).split(' ', Qt::SkipEmptyParts);
            QCOMPARE(ids.size(), n);
            for (const QString& id : ids) QVERIFY(id.toInt() >= 0 && id.toInt() <= 100);
            QCOMPARE(s["greedy"].get<bool>(), false);
            QCOMPARE(s["temperature"].get<double>(), 0.8);
            QCOMPARE(s["top_k"].get<int64_t>(), int64_t{5});
            QCOMPARE(s["top_p"].get<double>(), 1.0);
            QCOMPARE(s["seed"].get<int64_t>(), int64_t{99});
            QVERIFY(s["time_s"].get<double>() >= 0);
        }
        // Every other message of the run says 1.1 as well.
        for (const auto& e : test::jsonl_records(t / "run" / "events.jsonl", "run.start"))
            QCOMPARE(e["schema"].get<std::string>(), std::string("mwb.telemetry/1.1"));
    }

    void data_parallel_samples_match_mwb_generate_on_the_checkpoint() {
        test::TempDir t;
        write(t / "prompts.txt", "5 6 7\n40 41\n");
        QString log;
        const int code =
            test::run_train(2,
                            tiny_model(t / "run", 40,
                                       {"--global-batch-size", "8", "--sample-interval", "20", "--sample-prompts",
                                        test::qpath(t / "prompts.txt"), "--sample-max-new-tokens", "10", "--save",
                                        test::qpath(t / "ckpt"), "--save-interval", "40"}),
                            log);
        QVERIFY2(code == 0, qPrintable(log));
        const auto samples = test::jsonl_records(t / "run" / "samples.jsonl", "sample");
        QCOMPARE(samples.size(), std::size_t{4});
        const Output g =
            run_generate({"--load", test::qpath(t / "ckpt"), "--prompt-file", test::qpath(t / "prompts.txt"),
                          "--max-new-tokens", "10", "--greedy", "--json", "--threads", "1"});
        QVERIFY2(g.code == 0, qPrintable(g.err));
        const auto lines = json_lines(g.out);
        QVERIFY(!lines.empty());
        QCOMPARE(lines.front()["type"].get<std::string>(), std::string("start"));
        QCOMPARE(lines.front()["prompts"].get<int>(), 2);
        QCOMPARE(lines.front()["model"]["iteration"].get<int>(), 40);
        std::map<int, std::string> done;
        std::map<int, int> tokens;
        for (const auto& l : lines) {
            if (l["type"] == "token") ++tokens[l["prompt_index"].get<int>()];
            if (l["type"] == "done") done[l["prompt_index"].get<int>()] = l["completion"].get<std::string>();
        }
        for (int i = 0; i < 2; ++i) {
            const auto& s = samples[2 + i];  // the samples at iteration 40: the checkpoint's weights
            QCOMPARE(s["iteration"].get<int>(), 40);
            QCOMPARE(done[i], s["completion"].get<std::string>());
            QCOMPARE(tokens[i], s["completion_tokens"].get<int>());
        }
        // Plain mode streams the same text after the echoed prompt: the whole line is decode(prompt ids +
        // completion ids), the NullTokenizer's space between the two included.
        const Output plain = run_generate(
            {"--load", test::qpath(t / "ckpt"), "--prompt", "5 6 7", "--max-new-tokens", "10", "--greedy"});
        QCOMPARE(plain.code, 0);
        QCOMPARE(plain.out, "5 6 7 " + QString::fromStdString(samples[2]["completion"].get<std::string>()) + "\n");
    }

    void split_models_sample_what_one_process_generates() {
        // The reference decodes the saved checkpoint on one process, the weights the run sampled from.
        test::TempDir t;
        write(t / "prompts.txt", "5 6 7\n40 41\n99\n");
        const QStringList base = varied_model() + QStringList{"--sample-interval",       "4",
                                                              "--sample-prompts",        test::qpath(t / "prompts.txt"),
                                                              "--sample-max-new-tokens", "12",
                                                              "--save-interval",         "4"};
        struct Layout {
            const char* name;
            int ranks;
            QStringList args;
        };
        const Layout layouts[] = {
            {"gpt_tp2", 2, {"--tensor-model-parallel-size", "2"}},
            {"gpt_pp2", 2, {"--pipeline-model-parallel-size", "2"}},
            {"gpt_tp2_pp2_sp",
             4,
             {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--sequence-parallel"}},
            {"llama_tp2_pp2_virtual", 4,
             llama_shape() + QStringList{"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                                         "--num-layers-per-virtual-pipeline-stage", "1", "--global-batch-size", "8"}},
            {"llama_tp2_dp2_distributed", 4,
             llama_shape() + QStringList{"--tensor-model-parallel-size", "2", "--global-batch-size", "8",
                                         "--use-distributed-optimizer"}},
        };
        for (const Layout& l : layouts) {
            const auto run = t / l.name, ckpt = t / (std::string(l.name) + "_ckpt");
            QString log;
            const int code = test::run_train(
                l.ranks, tiny_model(run, 4, base + l.args + QStringList{"--save", test::qpath(ckpt)}), log);
            QVERIFY2(code == 0, qPrintable(QString(l.name) + ": " + log));
            const auto samples = test::jsonl_records(run / "samples.jsonl", "sample");
            QVERIFY2(samples.size() == 3, l.name);
            const auto reference = greedy_completions(ckpt, t / "prompts.txt", 12, 4);
            QVERIFY2(reference.size() == 3, l.name);
            for (int i = 0; i < 3; ++i) {
                const auto& s = samples[static_cast<std::size_t>(i)];
                QCOMPARE(s["iteration"].get<int>(), 4);
                QCOMPARE(s["prompt_index"].get<int>(), i);
                QVERIFY2(s["completion"].get<std::string>() == reference.at(i),
                         qPrintable(QString("%1 prompt %2: sampled '%3', one process '%4'")
                                        .arg(l.name)
                                        .arg(i)
                                        .arg(QString::fromStdString(s["completion"].get<std::string>()))
                                        .arg(QString::fromStdString(reference.at(i)))));
            }
            // Not a degenerate model: the greedy completion repeats no single token throughout.
            const QStringList ids = QString::fromStdString(reference.at(0)).split(' ', Qt::SkipEmptyParts);
            QVERIFY2(ids.size() == 12 && ids.count(ids.front()) < 12, l.name);
        }
    }

    void mwb_generate_under_mpirun_writes_what_one_process_writes() {
        test::TempDir t;
        write(t / "prompts.txt", "5 6 7\n40 41\n99\n");
        const QStringList base = varied_model();
        const std::pair<const char*, QStringList> models[] = {{"gpt", base}, {"llama", base + llama_shape()}};
        for (const auto& [name, args] : models) {
            const auto ckpt = t / (std::string(name) + "_ckpt");
            QString log;
            const int code =
                test::run_train(1, tiny_model(t / name, 4, args + QStringList{"--save", test::qpath(ckpt)}), log);
            QVERIFY2(code == 0, qPrintable(log));
            for (const QStringList& mode :
                 {QStringList{"--greedy"}, QStringList{"--temperature", "0.9", "--top-p", "0.9", "--seed", "5"}}) {
                const QStringList gen = QStringList{"--load",
                                                    test::qpath(ckpt),
                                                    "--prompt-file",
                                                    test::qpath(t / "prompts.txt"),
                                                    "--max-new-tokens",
                                                    "12",
                                                    "--json",
                                                    "--threads",
                                                    "1"} +
                                        mode;
                const auto lines = [](const Output& o) {
                    auto l = json_lines(o.out);
                    for (auto& j : l) j.erase("tokens_per_sec");  // the only field that is a timing
                    return l;
                };
                const Output one = run_generate(gen);
                QVERIFY2(one.code == 0, qPrintable(one.err));
                const auto reference = lines(one);
                QVERIFY(reference.size() > 4);  // start, tokens, three done lines
                QCOMPARE(std::count_if(reference.begin(), reference.end(),
                                       [](const auto& j) { return j["type"] == "done"; }),
                         std::ptrdiff_t{3});
                const std::pair<int, QStringList> layouts[] = {
                    {2, {"--tensor-model-parallel-size", "2"}},
                    {2, {"--pipeline-model-parallel-size", "2"}},
                    {4, {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"}}};
                for (const auto& [ranks, layout] : layouts) {
                    const Output split = run_generate(gen + layout, ranks);
                    QVERIFY2(split.code == 0, qPrintable(split.err));
                    QVERIFY2(lines(split) == reference, qPrintable(QString("%1 %2 on %3 ranks:\n%4\none process:\n%5")
                                                                       .arg(name, (mode + layout).join(' '))
                                                                       .arg(ranks)
                                                                       .arg(split.out, one.out)));
                }
            }
        }
        // A layout that does not fit the ranks or the model: exit 2 naming the flag.
        const auto ckpt = test::qpath(t / "gpt_ckpt");
        const Output wrong = run_generate({"--load", ckpt, "--prompt", "1", "--tensor-model-parallel-size", "4"}, 2);
        QCOMPARE(wrong.code, 2);
        QVERIFY2(wrong.err.contains("--tensor-model-parallel-size 4"), qPrintable(wrong.err));
        const Output three = run_generate({"--load", ckpt, "--prompt", "1"}, 3);
        QCOMPARE(three.code, 2);
        QVERIFY2(three.err.contains("must divide the model's 4 attention heads"), qPrintable(three.err));
    }

    void tensor_parallel_checkpoint_generates_after_resharding() {
        test::TempDir t;
        QString log;
        const int code = test::run_train(
            2, tiny_model(t / "run", 10, {"--tensor-model-parallel-size", "2", "--save", test::qpath(t / "ckpt")}),
            log);
        QVERIFY2(code == 0, qPrintable(log));
        const QStringList args{
            "--load", test::qpath(t / "ckpt"), "--prompt", "3 4 5",   "--prompt", "9",      "--max-new-tokens",
            "5",      "--temperature",         "0.9",      "--top-p", "0.9",      "--seed", "5",
            "--json"};
        const Output a = run_generate(args), b = run_generate(args);
        QVERIFY2(a.code == 0, qPrintable(a.err));
        auto la = json_lines(a.out), lb = json_lines(b.out);
        for (auto* lines : {&la, &lb})
            for (auto& l : *lines) l.erase("tokens_per_sec");  // the only field that is a timing
        QCOMPARE(la, lb);                                      // same seed, same text
        int done = 0;
        for (const auto& l : la) done += l["type"] == "done";
        QCOMPARE(done, 2);

        // Per-prompt done lines: a prompt of 61 ids in the 64-position context may take 3 new tokens, the
        // other 10; its done line comes right after its own last token, while the other prompt goes on.
        QStringList long_prompt;
        for (int i = 0; i < 61; ++i) long_prompt << QString::number(1 + i % 50);
        const Output e = run_generate({"--load", test::qpath(t / "ckpt"), "--prompt", long_prompt.join(' '), "--prompt",
                                       "9", "--max-new-tokens", "10", "--greedy", "--json"});
        QVERIFY2(e.code == 0, qPrintable(e.err));
        const auto le = json_lines(e.out);
        std::map<int, std::size_t> done_at, last_token_at;
        std::size_t last_token = 0;
        for (std::size_t k = 0; k < le.size(); ++k) {
            const std::string type = le[k]["type"].get<std::string>();
            if (type == "start") continue;
            const int i = le[k]["prompt_index"].get<int>();
            if (type == "token") {
                QVERIFY2(!done_at.count(i), "a token line after its prompt's done line");
                last_token_at[i] = last_token = k;
            }
            if (type == "done") {
                QVERIFY(!done_at.count(i));
                done_at[i] = k;
            }
        }
        QCOMPARE(done_at.size(), std::size_t{2});
        QCOMPARE(le[done_at[0]]["completion_tokens"].get<int>(), 3);
        QCOMPARE(le[done_at[0]]["finish_reason"].get<std::string>(), std::string("length"));
        QVERIFY(done_at[0] > last_token_at[0]);
        QVERIFY2(done_at[0] < last_token, "prompt 0's done line waited for the end of the batch");
        QCOMPARE(done_at[1], le.size() - 1);
    }

    void bad_input_exits_2_naming_it() {
        test::TempDir t;
        write(t / "prompts.txt", "1 2\n3\n" + std::string(5000, '7') + "\n");
        QString log;
        QCOMPARE(
            test::run_train(1,
                            tiny_model(t / "run", 2,
                                       {"--sample-interval", "1", "--sample-prompts", test::qpath(t / "prompts.txt")}),
                            log),
            2);
        QVERIFY2(log.contains("prompts.txt' line 3") && log.contains("4096"), qPrintable(log));
        // Words for the NullTokenizer (space-separated ids): refused before training, naming the file and
        // the prompt, not an exit 1 from inside the tokenizer.
        write(t / "words.txt", "In the beginning\n");
        QCOMPARE(
            test::run_train(1,
                            tiny_model(t / "run_words", 2,
                                       {"--sample-interval", "1", "--sample-prompts", test::qpath(t / "words.txt")}),
                            log),
            2);
        QVERIFY2(log.contains("words.txt: prompt 1 cannot be tokenized"), qPrintable(log));
        // No prompts file: the run trains and says once why it does not sample.
        QCOMPARE(test::run_train(1, tiny_model(t / "run3", 2, {"--sample-interval", "1"}), log), 0);
        const auto events = test::jsonl_records(t / "run3" / "events.jsonl", "event");
        QVERIFY(
            std::any_of(events.begin(), events.end(), [](const auto& e) { return e["kind"] == "sampling_skipped"; }));
        QVERIFY(!std::filesystem::exists(t / "run3" / "samples.jsonl"));

        const Output no_prompt = run_generate({"--load", test::qpath(t / "nothing"), "--json"});
        QCOMPARE(no_prompt.code, 2);
        const auto err = json_lines(no_prompt.out);
        QCOMPARE(err.size(), std::size_t{1});
        QCOMPARE(err[0]["type"].get<std::string>(), std::string("error"));
        QVERIFY(no_prompt.err.contains("--prompt"));
        const Output missing = run_generate({"--load", test::qpath(t / "nothing"), "--prompt", "1"});
        QCOMPARE(missing.code, 2);
        QVERIFY2(missing.err.contains("--load") && missing.err.contains("nothing"), qPrintable(missing.err));
        const Output bad_p = run_generate({"--load", test::qpath(t / "nothing"), "--prompt", "1", "--top-p", "1.5"});
        QCOMPARE(bad_p.code, 2);
        QVERIFY(bad_p.err.contains("--top-p"));
        const Output bad_flag = run_generate({"--load", "x", "--prompt", "1", "--no-such-flag"});
        QCOMPARE(bad_flag.code, 2);
        const Output bad_device = run_generate({"--load", "x", "--prompt", "1", "--device", "tpu"});
        QCOMPARE(bad_device.code, 2);
        QVERIFY2(bad_device.err.contains("--device must be cpu or cuda"), qPrintable(bad_device.err));
        // --device cuda: refused naming the flag and why where there is no GPU (or no CUDA in the build);
        // with one, the device is taken and the missing checkpoint is what fails.
        const Output cuda = run_generate({"--load", test::qpath(t / "nothing"), "--prompt", "1", "--device", "cuda"});
        QCOMPARE(cuda.code, 2);
        const DeviceReport r = probe_devices();
        if (r.cuda_kernels_built && r.cuda_devices > 0)
            QVERIFY2(cuda.err.contains("--load"), qPrintable(cuda.err));
        else
            QVERIFY2(cuda.err.contains("--device cuda: ") && cuda.err.contains("use --device cpu") &&
                         (cuda.err.contains(r.cuda_kernels_built ? "no usable GPU" : "built without CUDA")),
                     qPrintable(cuda.err));
    }
};

MWB_TEST_SUITE_GUILESS(test_generate_processes, TestSamplesAndCli)
}  // namespace test_generate_processes
#include "test_samples_and_cli.moc"
