// The Llama family from Hugging Face (interop/hf_llama.h, mwb-convert), against llama_reference.py: three
// tiny checkpoints in Hugging Face's conventions (LlamaForCausalLM with grouped-query attention, head_dim
// != hidden/heads, an untied head and llama3 RoPE scaling in F32; Qwen2ForCausalLM with q/k/v biases,
// grouped-query attention and tied embeddings in BF16; LlamaForCausalLM with every bias in F16), each
// sharded into two files with an index, written by the independent numpy writer, with the logits of a
// float64 PyTorch forward written from Hugging Face's definitions.
//   - After the mapping, and after `mwb-convert import-hf` + load_checkpoint, our model's logits equal
//     those to 1e-5 (relative to the largest logit). RoPE needs no permutation of the q/k rows: the
//     same weights with GPT-J pairs, or without the llama3 scaling, miss by far.
//   - Mapping back gives every tensor byte for byte; so does `export-hf` of the checkpoint after
//     `mwb-train --load --finetune` re-saved it from TP1xPP1, TP2xPP1 and TP2xPP2 (learning rate 0 at the
//     first step: the weights pass through each layout unchanged), sharded by --max-shard-size; the first
//     loss is the same in every layout.
//   - Malformed indexes, shards and configs are errors naming the file, the tensor or the key.
// A skip (exit 77) without /usr/bin/python3 + torch + numpy.
#include "backend/data/data_test_util.h"
#include "backend/checkpoint/checkpoint.h"
#include "backend/config/config_io.h"
#include "backend/config/validate.h"
#include "backend/core/files.h"
#include "backend/interop/hf_llama.h"
#include "backend/model/gpt_model.h"
#include "model_tensors.h"
#include "parallel/mpi_runs.h"

#include <QProcess>
#include <QtTest>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>

using namespace mwb;
using namespace mwb::interop;
using mwb::test::error_of;

namespace {

const char* kScript = MWB_TEST_SOURCE_DIR "/tests/backend/interop/llama_reference.py";

QString q(const fs::path& p) {
    return QString::fromStdString(p.string());
}

// The run's model for HF config `c`: sizes from the mapping, vocabulary padded as mwb-train pads it.
GptDims dims_of(const HfLlamaConfig& c, int64_t seq, int64_t micro_batch) {
    Config cfg;
    c.apply_to(cfg.model);
    cfg.data.tokenizer_type = "NullTokenizer";
    cfg.model.vocab_size = static_cast<int>(c.vocab);  // NullTokenizer: vocab_size ids, EOD among them
    resolve(cfg, 1, 0);
    GptDims d = GptDims::from_config(cfg);
    d.seq = seq;
    d.micro_batch = micro_batch;
    return d;
}

void import_into(GptModel& model, const SafetensorsModel& hf, const HfLlamaConfig& c) {
    mwb::test::fill_params(model, [&](const std::string& name, const std::vector<int64_t>& shape) {
        return llama_from_hf(hf, c, name, shape);
    });
}

// Every tensor of `b` is the tensor of `a` byte for byte (same names, dtype, shape).
void same_tensors(const SafetensorsModel& a, const SafetensorsModel& b, const QString& what) {
    QCOMPARE(b.names(), a.names());
    for (const std::string& name : a.names()) {
        const StTensor &x = a.get(name), &y = b.get(name);
        QVERIFY2(
            x.dtype == y.dtype && x.shape == y.shape && x.bytes == y.bytes && std::memcmp(x.data, y.data, x.bytes) == 0,
            qPrintable(what + ": " + QString::fromStdString(name)));
    }
}

int run_convert(const QStringList& args, QString& log) {
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(MWB_CONVERT_TOOL, args);
    if (!p.waitForFinished(120000)) p.kill();
    log = p.readAll();
    return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
}

}  // namespace

class TestHfLlama : public QObject {
    Q_OBJECT
    mwb::test::TempDir tmp_;
    nlohmann::json ref_;
    std::vector<int32_t> tokens_;

    fs::path dir() const { return tmp_.path(); }
    HfLlamaConfig config_of(const std::string& kind) const {
        const fs::path f = dir() / kind / "config.json";
        return HfLlamaConfig::from_json(nlohmann::json::parse(read_file(f)), f.string());
    }
    std::vector<double> reference_logits(const std::string& kind) const {
        const std::string bytes = read_file(dir() / ref_["variants"][kind]["logits"].get<std::string>());
        std::vector<double> v(bytes.size() / 8);
        std::memcpy(v.data(), bytes.data(), v.size() * 8);
        return v;
    }
    /// The largest |ours - float64| over the real vocabulary, relative to the largest logit.
    double logit_error(const std::string& kind, const std::vector<float>& ours, int64_t padded_vocab) const {
        const std::vector<double> want = reference_logits(kind);
        const int64_t V = config_of(kind).vocab, rows = static_cast<int64_t>(want.size()) / V;
        double worst = 0, largest = 0;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t v = 0; v < V; ++v) {
                worst = std::max(worst, std::abs(ours[r * padded_vocab + v] - want[r * V + v]));
                largest = std::max(largest, std::abs(want[r * V + v]));
            }
        return worst / largest;
    }
    std::vector<float> our_logits(const std::string& kind, GptDims d, const fs::path& checkpoint = {}) {
        OpContext ctx;
        Allocator alloc;
        GptModel model(d, RecomputePolicy{}, DType::F32, ctx, alloc);
        if (checkpoint.empty()) {
            import_into(model, SafetensorsModel(dir() / kind), config_of(kind));
        } else {
            std::vector<CheckpointTensor> tensors;
            for (const ParamInfo& pi : model.layout()) {
                CheckpointTensor t;
                t.name = "param/" + pi.name;
                t.global_shape = t.shape = pi.global_shape;
                t.dest = model.params().f32() + pi.offset;
                t.padded_rows = role_is_vocabulary(pi.role);
                tensors.push_back(std::move(t));
            }
            const CheckpointState st = load_checkpoint(resolve_checkpoint_dir(checkpoint), tensors);
            if (st.iteration != 0) return {};
        }
        return model.forward_logits(tokens_.data());
    }
    GptDims dims(const std::string& kind) const { return dims_of(config_of(kind), ref_["seq"], ref_["micro_batch"]); }

private slots:
    void initTestCase() {
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start("/usr/bin/python3", {kScript, q(dir())});
        QVERIFY(p.waitForFinished(300000));
        QVERIFY2(p.exitCode() == 0, p.readAll().constData());
        ref_ = nlohmann::json::parse(read_file(dir() / "reference.json"));
        for (const auto& row : ref_["tokens"]) tokens_.insert(tokens_.end(), row.begin(), row.end());
    }

    void logits_match_pytorch_data() {
        QTest::addColumn<QString>("kind");
        for (const char* k : {"llama", "qwen2", "biased"}) QTest::newRow(k) << QString(k);
    }
    void logits_match_pytorch() {
        QFETCH(QString, kind);
        const std::string k = kind.toStdString();
        const GptDims d = dims(k);
        QCOMPARE(d.vocab, int64_t{256});  // 200 ids padded to a multiple of 128: padding rows are zero
        const double err = logit_error(k, our_logits(k, d), d.vocab);
        qInfo("%s: largest logit error %.3g (relative to the largest logit)", k.c_str(), err);
        QVERIFY2(err <= 1e-5, qPrintable(QString("%1: logits differ by %2 of the largest").arg(kind).arg(err)));
    }

    // The check above can fail: GPT-J's pairing (what Meta's original checkpoints need, before
    // transformers' conversion permutes q/k), or RoPE without the llama3 scaling, give other logits.
    void rope_convention_is_proven_by_the_logits() {
        GptDims d = dims("llama");
        d.rotary_interleaved = true;
        const double interleaved = logit_error("llama", our_logits("llama", d), d.vocab);
        d = dims("llama");
        d.rope_scaling = false;
        const double unscaled = logit_error("llama", our_logits("llama", d), d.vocab);
        qInfo("GPT-J pairs: error %.3g; no llama3 scaling: error %.3g", interleaved, unscaled);
        QVERIFY(interleaved > 1e-2);
        QVERIFY(unscaled > 1e-4);
    }

    // Megatron tensors back to Hugging Face's, through the padded vocabulary: every tensor byte for byte.
    void mapping_round_trips_bytes_data() { logits_match_pytorch_data(); }
    void mapping_round_trips_bytes() {
        QFETCH(QString, kind);
        const std::string k = kind.toStdString();
        const SafetensorsModel hf(dir() / k);
        const HfLlamaConfig c = config_of(k);
        OpContext ctx;
        Allocator alloc;
        GptModel model(dims(k), RecomputePolicy{}, DType::F32, ctx, alloc);
        import_into(model, hf, c);
        const auto back = llama_to_hf(mwb::test::params_of(model), c);
        QCOMPARE(back.size(), hf.names().size());
        for (const NamedTensor& t : back) {
            const StTensor& src = hf.get(t.name);
            QCOMPARE(t.shape, src.shape);
            std::vector<unsigned char> bytes;
            encode_f32(t.values, src.dtype, bytes);
            QCOMPARE(bytes.size(), src.bytes);
            QVERIFY2(std::memcmp(bytes.data(), src.data, src.bytes) == 0, t.name.c_str());
        }
        // The config too: what from_json read, to_json writes back.
        const HfLlamaConfig again = HfLlamaConfig::from_json(c.to_json(), "to_json");
        QCOMPARE(again.to_json(), c.to_json());
        QCOMPARE(QString::fromStdString(again.architecture), QString::fromStdString(c.architecture));
    }

    // mwb-convert import-hf, mwb-train --finetune in three layouts, export-hf: the same tensors.
    void convert_train_export_round_trip_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("dtype");
        QTest::newRow("llama") << "llama"
                               << "";  // the run is F32: the default dtype is the source's
        QTest::newRow("qwen2") << "qwen2"
                               << "BF16";
    }
    void convert_train_export_round_trip() {
        QFETCH(QString, kind);
        QFETCH(QString, dtype);
        const std::string k = kind.toStdString();
        const fs::path imported = dir() / (k + "_imported");
        QString log;
        QVERIFY2(run_convert({"import-hf", q(dir() / k), "--save", q(imported)}, log) == 0, qPrintable(log));
        // The imported checkpoint: iteration 0, weights only, the same logits.
        const GptDims d = dims(k);
        const std::vector<float> logits = our_logits(k, d, imported);
        QVERIFY2(!logits.empty(), "the imported checkpoint is not at iteration 0");
        QVERIFY(logit_error(k, logits, d.vocab) <= 1e-5);
        const auto meta = nlohmann::json::parse(read_file(resolve_checkpoint_dir(imported) / "metadata.json"));
        for (const auto& t : meta["tensors"]) QVERIFY(t["name"].get<std::string>().starts_with("param/"));

        struct Layout {
            const char* name;
            int ranks;
            QStringList flags;
        };
        const std::vector<Layout> layouts = {
            {"tp1pp1", 1, {}},
            {"tp2pp1", 2, {"--tensor-model-parallel-size", "2"}},
            {"tp2pp2", 4, {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"}}};
        double first_loss = 0;
        for (const Layout& l : layouts) {
            const fs::path saved = dir() / (k + "_" + l.name), run = dir() / (k + "_run_" + l.name);
            // lr 0 at the first step (warm-up from 0): the weights go through the layout unchanged.
            QStringList args = {"--config",
                                q(imported / "model_config.json"),
                                "--load",
                                q(imported),
                                "--finetune",
                                "--save",
                                q(saved),
                                "--mock-data",
                                "--seq-length",
                                "16",
                                "--micro-batch-size",
                                "2",
                                "--global-batch-size",
                                "4",
                                "--train-iters",
                                "1",
                                "--lr",
                                "1e-3",
                                "--lr-warmup-iters",
                                "1",
                                "--lr-decay-iters",
                                "10",
                                "--eval-iters",
                                "1",
                                "--log-interval",
                                "1",
                                "--threads",
                                "1",
                                "--run-dir",
                                q(run)};
            QVERIFY2(mwb::test::run_train(l.ranks, args + l.flags, log) == 0, qPrintable(log));
            const auto steps = mwb::test::records(run, "step");
            QCOMPARE(steps.size(), std::size_t{1});
            QCOMPARE(steps[0]["iteration"].get<int64_t>(), int64_t{1});  // --finetune: from iteration 0
            const double loss = steps[0]["lm_loss"];
            if (first_loss == 0) first_loss = loss;
            QVERIFY2(std::abs(loss - first_loss) <= 1e-5 * first_loss,
                     qPrintable(QString("%1: first loss %2, TP1xPP1 %3")
                                    .arg(l.name)
                                    .arg(loss, 0, 'g', 10)
                                    .arg(first_loss, 0, 'g', 10)));

            if (l.ranks == 4) QVERIFY(fs::exists(saved / "iter_0000001" / "tp01_pp01.bin"));  // saved by 4 shards

            const fs::path exported = dir() / (k + "_exported_" + l.name);
            QStringList exp = {"export-hf", q(saved), "--output", q(exported), "--max-shard-size", "20KB"};
            if (!dtype.isEmpty()) exp << "--dtype" << dtype;
            QVERIFY2(run_convert(exp, log) == 0, qPrintable(log));
            QVERIFY(fs::exists(exported / "model.safetensors.index.json"));
            QVERIFY(!fs::exists(exported / "model.safetensors"));
            const auto index = nlohmann::json::parse(read_file(exported / "model.safetensors.index.json"));
            std::set<std::string> shards;
            for (const auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
            QVERIFY(shards.size() >= 3);  // 20 KB shards of ~120 KB (F32) or ~60 KB (BF16)
            same_tensors(SafetensorsModel(dir() / k), SafetensorsModel(exported), l.name);
            const auto config = nlohmann::json::parse(read_file(exported / "config.json"));
            const HfLlamaConfig c = HfLlamaConfig::from_json(config, "exported config.json"), src = config_of(k);
            QCOMPARE(c.to_json(), src.to_json());
            if (k == "qwen2") {  // its HuggingFaceTokenizer: ids from it, files copied
                QCOMPARE(config["bos_token_id"].get<int>(), 1);
                QCOMPARE(config["eos_token_id"].get<int>(), 2);
                for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
                    QVERIFY2(read_file(exported / f) == read_file(dir() / k / f), f);
            } else {
                QCOMPARE(config["eos_token_id"].get<int>(), 199);  // the NullTokenizer's EOD: the last id
                QVERIFY(!config.contains("bos_token_id") && !fs::exists(exported / "tokenizer.json"));
            }
            const auto generation = nlohmann::json::parse(read_file(exported / "generation_config.json"));
            QCOMPARE(generation["eos_token_id"], config["eos_token_id"]);
        }
        // --finetune from a trained checkpoint (iteration 1, with Adam moments): back to iteration 0, the same
        // data and weights, so the same first loss; without it the run has nothing left to train.
        const fs::path trained = dir() / (k + "_tp2pp2");
        for (const bool finetune : {true, false}) {
            const fs::path run = dir() / (k + (finetune ? "_run_finetune" : "_run_resume"));
            QStringList args = {"--config",    q(imported / "model_config.json"),
                                "--load",      q(trained),
                                "--mock-data", "--seq-length",
                                "16",          "--micro-batch-size",
                                "2",           "--global-batch-size",
                                "4",           "--train-iters",
                                "1",           "--lr",
                                "1e-3",        "--lr-warmup-iters",
                                "1",           "--lr-decay-iters",
                                "10",          "--eval-iters",
                                "1",           "--log-interval",
                                "1",           "--threads",
                                "1",           "--run-dir",
                                q(run)};
            if (finetune) args << "--finetune";
            QVERIFY2(mwb::test::run_train(1, args, log) == 0, qPrintable(log));
            const auto steps = mwb::test::records(run, "step");
            QCOMPARE(steps.size(), finetune ? std::size_t{1} : std::size_t{0});
            if (finetune) QVERIFY(std::abs(steps[0]["lm_loss"].get<double>() - first_loss) <= 1e-5 * first_loss);
        }

        // One file when it fits (the default 5GB), and the stale shards of the earlier export are gone.
        const fs::path exported = dir() / (k + "_exported_tp2pp2");
        QVERIFY2(run_convert({"export-hf", q(dir() / (k + "_tp2pp2")), "--output", q(exported), "--dtype",
                              dtype.isEmpty() ? "F32" : dtype},
                             log) == 0,
                 qPrintable(log));
        QVERIFY(fs::exists(exported / "model.safetensors"));
        QVERIFY(!fs::exists(exported / "model.safetensors.index.json"));
        same_tensors(SafetensorsModel(dir() / k), SafetensorsModel(exported), "one file");
    }

    void malformed_indexes_and_shards_are_named() {
        const fs::path src = dir() / "llama";
        const auto broken = [&](const std::string& name,
                                const std::function<void(const fs::path&)>& edit) -> std::string {
            const fs::path d = dir() / ("broken_" + name);
            fs::create_directories(d);
            for (const auto& e : fs::directory_iterator(src)) fs::copy_file(e.path(), d / e.path().filename());
            edit(d);
            QString log;
            const int rc = run_convert({"import-hf", q(d), "--save", q(dir() / ("broken_ckpt_" + name))}, log);
            if (rc == 0 || fs::exists(dir() / ("broken_ckpt_" + name) / "latest")) log = "(a checkpoint was written)";
            return log.toStdString();
        };
        const auto edit_index = [](const fs::path& d, const std::function<void(nlohmann::json&)>& f) {
            nlohmann::json j = nlohmann::json::parse(read_file(d / "model.safetensors.index.json"));
            f(j);
            write_file_atomic(d / "model.safetensors.index.json", j.dump());
        };
        const std::string shard1 = "model-00001-of-00002.safetensors", shard2 = "model-00002-of-00002.safetensors";
        std::string e = broken("missing_shard", [&](const fs::path& d) { fs::remove(d / shard2); });
        QVERIFY2(e.find("shard '" + shard2 + "'") != std::string::npos && e.find("does not exist") != std::string::npos,
                 e.c_str());
        // The index maps a tensor to the shard that does not hold it.
        e = broken("wrong_shard", [&](const fs::path& d) {
            edit_index(d, [&](nlohmann::json& j) { j["weight_map"]["lm_head.weight"] = shard1; });
        });
        QVERIFY2(
            e.find("'lm_head.weight' is mapped to " + shard1 + " but that file does not hold it") != std::string::npos,
            e.c_str());
        // A shard holds a tensor the index does not list.
        e = broken("unlisted", [&](const fs::path& d) {
            edit_index(d, [&](nlohmann::json& j) { j["weight_map"].erase("lm_head.weight"); });
        });
        QVERIFY2(e.find("'lm_head.weight'") != std::string::npos && e.find("does not list it") != std::string::npos,
                 e.c_str());
        // A tensor in two shards: a copy of shard 2's lm_head.weight added to shard 1.
        e = broken("twice", [&](const fs::path& d) {
            const SafetensorsFile one(src / shard1), two(src / shard2);
            std::vector<StWriteTensor> ts;
            for (const StTensor& t : one.tensors()) ts.push_back({t.name, t.dtype, t.shape, {t.data, t.bytes}});
            const StTensor* head = two.find("lm_head.weight");
            ts.push_back({head->name, head->dtype, head->shape, {head->data, head->bytes}});
            write_safetensors(d / shard1, ts);
        });
        QVERIFY2(e.find("'lm_head.weight' is in " + shard1) != std::string::npos &&
                     e.find("another shard") != std::string::npos,
                 e.c_str());
        // A tensor missing altogether.
        e = broken("missing_tensor", [&](const fs::path& d) {
            const SafetensorsFile two(src / shard2);
            std::vector<StWriteTensor> ts;
            for (const StTensor& t : two.tensors())
                if (t.name != "lm_head.weight") ts.push_back({t.name, t.dtype, t.shape, {t.data, t.bytes}});
            write_safetensors(d / shard2, ts);
            edit_index(d, [&](nlohmann::json& j) { j["weight_map"].erase("lm_head.weight"); });
        });
        QVERIFY2(e.find("no tensor 'lm_head.weight'") != std::string::npos, e.c_str());
        // A path instead of a file name, a truncated shard, an index that is not JSON.
        e = broken("path", [&](const fs::path& d) {
            edit_index(d, [&](nlohmann::json& j) { j["weight_map"]["lm_head.weight"] = "../" + shard2; });
        });
        QVERIFY2(e.find("is not a file name in the directory") != std::string::npos, e.c_str());
        e = broken("truncated", [&](const fs::path& d) { fs::resize_file(d / shard2, fs::file_size(d / shard2) - 3); });
        QVERIFY2(e.find(shard2) != std::string::npos && e.find("truncated") != std::string::npos, e.c_str());
        e = broken("not_json", [&](const fs::path& d) {
            write_file_atomic(d / "model.safetensors.index.json", "{\"weight_map\": ");
        });
        QVERIFY2(e.find("model.safetensors.index.json: not valid JSON") != std::string::npos, e.c_str());
        // A config that disagrees with the weights names the tensor and both shapes.
        e = broken("shape", [&](const fs::path& d) {
            nlohmann::json j = nlohmann::json::parse(read_file(d / "config.json"));
            j["intermediate_size"] = 41;
            write_file_atomic(d / "config.json", j.dump());
        });
        // Invalid input (exit status 2): an unsupported config.json, a layout the model cannot take.
        QString log;
        const fs::path windowed = dir() / "windowed";
        fs::create_directories(windowed);
        for (const auto& entry : fs::directory_iterator(src))
            fs::copy_file(entry.path(), windowed / entry.path().filename());
        nlohmann::json j = nlohmann::json::parse(read_file(windowed / "config.json"));
        j["sliding_window"] = 4096;
        write_file_atomic(windowed / "config.json", j.dump());
        QCOMPARE(run_convert({"import-hf", q(windowed), "--save", q(dir() / "windowed_ckpt")}, log), 2);
        QVERIFY2(log.contains("sliding_window"), qPrintable(log));
        QCOMPARE(run_convert(
                     {"import-hf", q(src), "--save", q(dir() / "tp4_ckpt"), "--tensor-model-parallel-size", "4"}, log),
                 2);
        QVERIFY2(log.contains("num_query_groups"), qPrintable(log));  // 2 key/value heads do not split over 4 ranks
        QVERIFY(!fs::exists(dir() / "tp4_ckpt" / "latest"));
        QVERIFY2(e.find("model.layers.0.mlp.gate_proj.weight' has shape [40, 32]") != std::string::npos &&
                     e.find("[41, 32]") != std::string::npos,
                 e.c_str());
    }

    // --max-shard-size as Hugging Face's convert_file_size_to_int reads it (decimal GB/MB/KB, binary GiB/MiB/KiB).
    void shard_sizes_parse_as_hugging_face() {
        QCOMPARE(parse_byte_size("5GB"), uint64_t{5'000'000'000});
        QCOMPARE(parse_byte_size("500MB"), uint64_t{500'000'000});
        QCOMPARE(parse_byte_size("2GiB"), uint64_t{2} << 30);
        QCOMPARE(parse_byte_size("20KB"), uint64_t{20'000});
        QCOMPARE(parse_byte_size("1.5MiB"), uint64_t{1'572'864});
        QCOMPARE(parse_byte_size("4096"), uint64_t{4096});
        for (const char* bad : {"", "GB", "5XB", "-1", "0", "5 GB", "1e30"})
            QVERIFY2(
                error_of([&] { parse_byte_size(bad); }).find(std::string("size '") + bad + "'") != std::string::npos,
                bad);
    }

    void unsupported_configs_name_the_key() {
        const nlohmann::json base = nlohmann::json::parse(read_file(dir() / "llama" / "config.json"));
        const auto err = [&](const std::function<void(nlohmann::json&)>& f) {
            nlohmann::json j = base;
            f(j);
            return error_of([&] { HfLlamaConfig::from_json(j, "cfg.json"); });
        };
        const auto has = [](const std::string& e, const char* what) {
            if (e.find("cfg.json") != std::string::npos && e.find(what) != std::string::npos) return true;
            qWarning("error '%s' does not name %s", e.c_str(), what);
            return false;
        };
        QVERIFY(has(err([](auto& j) { j["rope_scaling"]["rope_type"] = "yarn"; }), "rope_scaling.rope_type"));
        QVERIFY(
            has(err([](auto& j) { j["rope_scaling"]["high_freq_factor"] = 2.0; }), "rope_scaling.high_freq_factor"));
        QVERIFY(has(err([](auto& j) { j["rope_scaling"]["original_max_position_embeddings"] = 4096; }),
                    "rope_scaling.original_max_position_embeddings"));
        QVERIFY(has(err([](auto& j) { j["rope_scaling"].erase("factor"); }), "rope_scaling.factor"));
        QVERIFY(has(err([](auto& j) { j["num_local_experts"] = 8; }), "num_local_experts"));
        QVERIFY(has(err([](auto& j) { j["hidden_act"] = "gelu"; }), "hidden_act"));
        QVERIFY(has(err([](auto& j) { j["attention_bias"] = true; }), "attention_bias"));
        QVERIFY(has(err([](auto& j) { j["rope_theta"] = 10000.5; }), "rope_theta"));
        QVERIFY(has(err([](auto& j) { j["partial_rotary_factor"] = 0.5; }), "partial_rotary_factor"));
        QVERIFY(has(err([](auto& j) { j.erase("hidden_size"); }), "\"hidden_size\""));
        QVERIFY(has(err([](auto& j) { j["num_key_value_heads"] = 3; }), "num_key_value_heads"));
        QVERIFY(has(err([](auto& j) {
                        j["architectures"] = {"MistralForCausalLM"};
                        j["sliding_window"] = 4096;
                    }),
                    "sliding_window"));
        QVERIFY(has(err([](auto& j) {
                        j["architectures"] = {"Qwen2ForCausalLM"};
                        j["use_sliding_window"] = true;
                    }),
                    "use_sliding_window"));
        QVERIFY(has(err([](auto& j) { j["architectures"] = {"MixtralForCausalLM"}; }), "MixtralForCausalLM"));
        // Mistral without a window is accepted (null, as Mistral v0.2+ ship it).
        nlohmann::json mistral = base;
        mistral["architectures"] = {"MistralForCausalLM"};
        mistral["sliding_window"] = nullptr;
        QCOMPARE(QString::fromStdString(HfLlamaConfig::from_json(mistral, "m").architecture),
                 QString("MistralForCausalLM"));
        // export-hf names what a Llama-family model cannot have.
        ModelConfig m;
        config_of("llama").apply_to(m);
        m.rotary_interleaved = true;
        QVERIFY(error_of([&] { HfLlamaConfig::from_model(m, "ckpt"); }).find("rotary_interleaved") !=
                std::string::npos);
    }
};

int main(int argc, char** argv) {
    if (QProcess::execute("/usr/bin/python3", {"-c", "import torch, numpy"}) != 0) {
        std::printf("SKIP: the reference needs /usr/bin/python3 with torch and numpy (python3-torch, python3-numpy)\n");
        return 77;
    }
    QCoreApplication app(argc, argv);
    TestHfLlama t;
    return QTest::qExec(&t, argc, argv);
}

#include "test_hf_llama.moc"
