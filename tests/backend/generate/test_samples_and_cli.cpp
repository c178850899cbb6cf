// Real mwb-train and mwb-generate processes:
//   - a training run with --sample-interval publishes `sample` records (schema mwb.telemetry/1.1) that a
//     follower receives over the run's ZeroMQ stream, and the same records land in samples.jsonl;
//   - a data-parallel run (mpirun -np 2) samples on rank 0, and mwb-generate on the checkpoint saved at
//     the last iteration, greedy, writes the completion the run sampled from the same weights;
//   - mwb-generate reads a tensor-parallel checkpoint (resharded to one process), streams --json lines;
//   - bad input: TP with sampling, a prompts file with an overlong line, bad flags — exit 2 naming them.
#include "mwb/ipc/follower.h"
#include "mwb/kernels/device.h"
#include "parallel/mpi_runs.h"
#include "support/jsonl.h"
#include "support/trainer_process.h"

#include <QtTest>

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

Output run_generate(const QStringList& args) {
    QProcess p;
    p.start(generate_exe(), args);
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
        // Plain mode streams the same text after the echoed prompt.
        const Output plain = run_generate(
            {"--load", test::qpath(t / "ckpt"), "--prompt", "5 6 7", "--max-new-tokens", "10", "--greedy"});
        QCOMPARE(plain.code, 0);
        QVERIFY2(plain.out.startsWith("5 6 7"), qPrintable(plain.out));
        QVERIFY(plain.out.contains(QString::fromStdString(samples[2]["completion"].get<std::string>())));
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
        QCOMPARE(
            test::run_train(
                1, tiny_model(t / "run2", 2, {"--sample-interval", "1", "--tensor-model-parallel-size", "2"}), log),
            2);
        QVERIFY2(log.contains("sample_interval needs the whole model"), qPrintable(log));
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

QTEST_GUILESS_MAIN(TestSamplesAndCli)
#include "test_samples_and_cli.moc"
