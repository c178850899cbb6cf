// GPT2LMHeadModel weights <-> Megatron names (interop/hf_gpt2.h), against gpt2_reference.py: a
// checkpoint in Hugging Face's conventions written by the independent numpy writer, and the loss of a
// float64 PyTorch forward written from GPT-2's definition. After the mapping, our model's loss on the
// same tokens matches it to 1e-5 (F32 and BF16 weights); mapping back gives every tensor byte for
// byte, also through a padded vocabulary. A skip (exit 77) without /usr/bin/python3 + torch + numpy.
#include "backend/data/data_test_util.h"
#include "backend/checkpoint/checkpoint.h"
#include "backend/core/files.h"
#include "backend/interop/hf_gpt2.h"
#include "model_tensors.h"
#include "backend/model/gpt_model.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>

using namespace mwb;
using namespace mwb::interop;
using mwb::test::error_of;

namespace {

const char* kScript = MWB_TEST_SOURCE_DIR "/tests/backend/interop/gpt2_reference.py";

GptDims dims_of(const HfGpt2Config& c, int64_t seq, int64_t micro_batch, int64_t padded_vocab) {
    GptDims d;
    d.layers = c.layers;
    d.hidden = c.hidden;
    d.heads = c.heads;
    d.ffn = c.ffn;
    d.seq = seq;
    d.micro_batch = micro_batch;
    d.vocab = padded_vocab;
    d.max_positions = c.positions;
    d.tied_output = true;
    d.norm_eps = static_cast<float>(c.norm_eps);
    return d;
}

void import_into(GptModel& model, const SafetensorsModel& hf, const HfGpt2Config& c) {
    mwb::test::fill_params(model, [&](const std::string& name, const std::vector<int64_t>& shape) {
        return gpt2_from_hf(hf, c, name, shape);
    });
}

}  // namespace

class TestHfGpt2 : public QObject {
    Q_OBJECT
    QTemporaryDir tmp_;
    nlohmann::json ref_;
    fs::path dir() const { return tmp_.path().toStdString(); }

    void check(const char* kind, StDtype dtype) {
        const SafetensorsModel hf(dir() / kind);
        const HfGpt2Config c =
            HfGpt2Config::from_json(nlohmann::json::parse(read_file(dir() / kind / "config.json")), "config.json");
        const auto tokens = ref_["tokens"].get<std::vector<std::vector<int32_t>>>();
        std::vector<int32_t> flat;
        for (const auto& row : tokens) flat.insert(flat.end(), row.begin(), row.end());
        OpContext ctx;
        Allocator alloc;
        {
            GptModel model(dims_of(c, ref_["seq"], ref_["micro_batch"], c.vocab), RecomputePolicy{}, DType::F32, ctx,
                           alloc);
            import_into(model, hf, c);
            const double loss = model.evaluate(flat.data()), want = ref_[std::string("loss_") + kind];
            QVERIFY2(std::abs(loss - want) <= 1e-5 * std::abs(want),
                     qPrintable(QString("%1: loss %2, float64 PyTorch %3").arg(kind).arg(loss, 0, 'g', 12).arg(want, 0, 'g', 12)));
        }
        // Back to Hugging Face, through a vocabulary padded to 384 rows: every tensor byte for byte.
        GptModel padded(dims_of(c, ref_["seq"], ref_["micro_batch"], 384), RecomputePolicy{}, DType::F32, ctx, alloc);
        import_into(padded, hf, c);
        const auto back = gpt2_to_hf(mwb::test::params_of(padded), c);
        QCOMPARE(back.size(), hf.names().size() - 1);  // all but the causal-mask buffer
        for (const NamedTensor& t : back) {
            const StTensor& src = hf.get(t.name);
            QCOMPARE(t.shape, src.shape);
            std::vector<unsigned char> bytes;
            encode_f32(t.values, dtype, bytes);
            QCOMPARE(bytes.size(), src.bytes);
            QVERIFY2(std::memcmp(bytes.data(), src.data, src.bytes) == 0, t.name.c_str());
        }
    }

private slots:
    void initTestCase() {
        QVERIFY(tmp_.isValid());
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start("/usr/bin/python3", {kScript, tmp_.path()});
        QVERIFY(p.waitForFinished(300000));
        QVERIFY2(p.exitCode() == 0, p.readAll().constData());
        ref_ = nlohmann::json::parse(read_file(dir() / "reference.json"));
    }

    void f32_weights_match_pytorch_and_round_trip() { check("f32", StDtype::F32); }
    void bf16_weights_match_pytorch_and_round_trip() { check("bf16", StDtype::BF16); }

    // mwb-convert: import-hf writes a checkpoint whose weights give the same loss; export-hf of it
    // gives back every tensor byte for byte.
    void convert_tool_round_trip() {
        const QString tool = MWB_CONVERT_TOOL;
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start(tool, {"import-hf", tmp_.path() + "/bf16", "--save", tmp_.path() + "/ckpt"});
        QVERIFY(p.waitForFinished(120000));
        QVERIFY2(p.exitCode() == 0, p.readAll().constData());
        const fs::path iter = resolve_checkpoint_dir(dir() / "ckpt");
        QCOMPARE(iter.filename().string(), std::string("iter_0000000"));

        const HfGpt2Config c =
            HfGpt2Config::from_json(nlohmann::json::parse(read_file(dir() / "bf16" / "config.json")), "config.json");
        OpContext ctx;
        Allocator alloc;
        // The saved vocabulary is padded (to 256 here: already a multiple of 128).
        GptModel model(dims_of(c, ref_["seq"], ref_["micro_batch"], 256), RecomputePolicy{}, DType::F32, ctx, alloc);
        std::vector<CheckpointTensor> tensors;
        for (const ParamInfo& pi : model.layout()) {
            CheckpointTensor t;
            t.name = "param/" + pi.name;
            t.global_shape = t.shape = pi.global_shape;
            t.dest = model.params().f32() + pi.offset;
            tensors.push_back(std::move(t));
        }
        const CheckpointState st = load_checkpoint(iter, tensors);
        QCOMPARE(st.iteration, int64_t{0});
        // Weights only: mwb-train --load starts a fresh optimizer from it.
        for (const auto& t : nlohmann::json::parse(read_file(iter / "metadata.json"))["tensors"])
            QVERIFY(t["name"].get<std::string>().starts_with("param/"));
        std::vector<int32_t> flat;
        for (const auto& row : ref_["tokens"]) flat.insert(flat.end(), row.begin(), row.end());
        const double loss = model.evaluate(flat.data()), want = ref_["loss_bf16"];
        QVERIFY2(std::abs(loss - want) <= 1e-5 * std::abs(want), qPrintable(QString("loss %1 vs %2").arg(loss).arg(want)));

        p.start(tool, {"export-hf", tmp_.path() + "/ckpt", "--output", tmp_.path() + "/exported", "--dtype", "BF16"});
        QVERIFY(p.waitForFinished(120000));
        QVERIFY2(p.exitCode() == 0, p.readAll().constData());
        const SafetensorsModel src(dir() / "bf16"), back(dir() / "exported");
        QCOMPARE(back.names().size(), src.names().size() - 1);
        for (const std::string& name : back.names()) {
            const StTensor &a = src.get(name), &b = back.get(name);
            QCOMPARE(b.shape, a.shape);
            QVERIFY2(b.dtype == a.dtype && b.bytes == a.bytes && std::memcmp(a.data, b.data, a.bytes) == 0, name.c_str());
        }
        const auto cfg = nlohmann::json::parse(read_file(dir() / "exported" / "config.json"));
        QCOMPARE(HfGpt2Config::from_json(cfg, "exported").hidden, c.hidden);
        QVERIFY(fs::exists(dir() / "exported" / "generation_config.json"));

        p.start(tool, {"import-hf", tmp_.path() + "/nothing-here", "--save", tmp_.path() + "/x"});
        QVERIFY(p.waitForFinished(60000));
        QVERIFY(p.exitCode() != 0);
    }

    void bad_configs_and_shapes_are_named() {
        auto cfg = nlohmann::json::parse(read_file(dir() / "f32" / "config.json"));
        const auto err = [&](const nlohmann::json& j) { return error_of([&] { HfGpt2Config::from_json(j, "cfg.json"); }); };
        auto j = cfg;
        j["architectures"] = {"LlamaForCausalLM"};
        j["model_type"] = "llama";
        QVERIFY(err(j).find("cfg.json: architectures") != std::string::npos);
        j = cfg;
        j["activation_function"] = "relu";
        QVERIFY(err(j).find("activation_function 'relu'") != std::string::npos);
        j = cfg;
        j.erase("n_embd");
        QVERIFY(err(j).find("\"n_embd\"") != std::string::npos);
        // A config that disagrees with the weights: the error names the tensor and both shapes.
        j = cfg;
        j["n_embd"] = 64;
        const HfGpt2Config wrong = HfGpt2Config::from_json(j, "cfg.json");
        const SafetensorsModel hf(dir() / "f32");
        const std::string e = error_of([&] { gpt2_from_hf(hf, wrong, "decoder.final_layernorm.weight", {64}); });
        QVERIFY2(e.find("transformer.ln_f.weight") != std::string::npos && e.find("[32]") != std::string::npos, e.c_str());
        QVERIFY(error_of([&] { gpt2_from_hf(hf, wrong, "decoder.layers.7.mlp.linear_fc1.weight", {1}); })
                    .find("no counterpart") != std::string::npos);
    }
};

int main(int argc, char** argv) {
    if (QProcess::execute("/usr/bin/python3", {"-c", "import torch, numpy"}) != 0) {
        std::printf("SKIP: the reference needs /usr/bin/python3 with torch and numpy (python3-torch, python3-numpy)\n");
        return 77;
    }
    QCoreApplication app(argc, argv);
    TestHfGpt2 t;
    return QTest::qExec(&t, argc, argv);
}

#include "test_hf_gpt2.moc"
