// The whole model against PyTorch: for the fixtures made by tests/reference/make_gpt_reference.py and
// make_llama_reference.py (independent float64 torch implementations of GPT and of the Llama block),
// the loss, every parameter's gradient, and the parameters after one clipped AdamW step must match.
#include "support/fixtures.h"
#include "support/reference.h"

#include "config/config.h"
#include "model/gpt_model.h"
#include "optim/optimizer.h"

#include <QtTest>

using namespace mwb;

namespace {

struct Case {
    GptDims dims;
    TrainingConfig training;
    int64_t micro_batches = 1;
};

Case make_case(const nlohmann::json& c) {
    Case k;
    k.dims.layers = c["num_layers"];
    k.dims.hidden = c["hidden_size"];
    k.dims.heads = c["num_attention_heads"];
    k.dims.ffn = c["ffn_hidden_size"];
    k.dims.seq = c["seq_length"];
    k.dims.micro_batch = c["micro_batch_size"];
    k.dims.vocab = c["padded_vocab"];
    k.dims.max_positions = c["seq_length"];
    k.dims.tied_output = !c["untie_embeddings_and_output_weights"].get<bool>();
    k.dims.rmsnorm = c["normalization"] == "RMSNorm";
    k.dims.norm_eps = c["layernorm_epsilon"];
    // Llama-family fields (absent from the GPT fixtures: GPT's values).
    k.dims.groups = c.value("num_query_groups", 0);
    k.dims.kv_channels = c.value("kv_channels", 0);
    k.dims.swiglu = c.value("swiglu", false);
    k.dims.linear_bias = c.value("add_bias_linear", true);
    k.dims.qkv_bias = c.value("add_qkv_bias", false);
    if (c.value("position_embedding_type", std::string("learned_absolute")) == "rope") {
        k.dims.positions = GptDims::Positions::Rope;
        k.dims.rotary_dim =
            static_cast<int64_t>(static_cast<double>(k.dims.head_dim()) * c["rotary_percent"].get<double>());
        k.dims.rotary_base = c["rotary_base"];
        k.dims.rope_scaling = c["use_rope_scaling"];
        k.dims.rope_scaling_factor = c["rope_scaling_factor"];
        k.dims.rotary_interleaved = c.value("rotary_interleaved", false);
    }
    k.training.lr = c["lr"];
    k.training.adam_beta1 = c["adam_beta1"];
    k.training.adam_beta2 = c["adam_beta2"];
    k.training.adam_eps = c["adam_eps"];
    k.training.weight_decay = c["weight_decay"];
    k.training.clip_grad = c["clip_grad"];
    k.micro_batches = c["global_batch_size"].get<int64_t>() / k.dims.micro_batch;
    return k;
}

}  // namespace

class TestGptReference : public QObject {
    Q_OBJECT
private slots:
    void matches_pytorch_data() {
        QTest::addColumn<QString>("fixture");
        QTest::newRow("tied LayerNorm") << "gpt_reference_tied_layernorm.json";
        QTest::newRow("untied RMSNorm, 2 micro-batches") << "gpt_reference_untied_rmsnorm_accum.json";
        QTest::newRow("Llama: GQA 2 of 4 heads, scaled RoPE, SwiGLU, no biases")
            << "llama_reference_gqa_rope_scaled.json";
        QTest::newRow("Llama: MQA, QKV bias, head dim 12, half rotary, 2 micro-batches")
            << "llama_reference_mqa_qkv_bias.json";
        QTest::newRow("Llama: interleaved RoPE pairs (2i, 2i+1) on 3/4 of a 16-dim head, GQA")
            << "llama_reference_gqa_rope_interleaved.json";
    }
    void matches_pytorch() {
        QFETCH(QString, fixture);
        const nlohmann::json fx = test::load_fixture(fixture.toStdString());
        const Case k = make_case(fx["config"]);
        OpContext ctx;
        Allocator alloc;
        GptModel model(k.dims, RecomputePolicy{}, DType::F32, ctx, alloc);
        const ParamLayout& layout = model.layout();
        QCOMPARE(layout.size(), fx["tensors"].size());
        for (const auto& t : fx["tensors"]) {
            const auto values = test::decode_array<float>(t["initial_f32"]);
            const TensorView v = layout.view(model.params(), layout.index_of(t["name"]));
            QCOMPARE(static_cast<int64_t>(values.size()), v.numel());
            std::copy(values.begin(), values.end(), v.f32());
        }

        const auto tokens = fx["tokens"].get<std::vector<int32_t>>();
        const int64_t per_micro = k.dims.micro_batch * (k.dims.seq + 1);
        double loss = 0;
        for (int64_t m = 0; m < k.micro_batches; ++m)
            loss +=
                model.forward_backward(tokens.data() + m * per_micro, 1.0f / static_cast<float>(k.micro_batches), 0, 0);
        loss /= static_cast<double>(k.micro_batches);
        const double ref_loss = fx["loss"];
        QVERIFY2(std::abs(loss - ref_loss) <= 1e-5 * std::abs(ref_loss),
                 qPrintable(QString("loss %1 vs torch %2").arg(loss, 0, 'g', 10).arg(ref_loss, 0, 'g', 10)));

        // Gradients: per tensor, relative to the tensor's largest gradient (fp32 vs float64 sums).
        for (const auto& t : fx["tensors"]) {
            const auto ref = test::decode_array<double>(t["grad_f64"]);
            const TensorView g = layout.view(model.grads(), layout.index_of(t["name"]));
            const std::vector<float> got(g.f32(), g.f32() + g.numel());
            const double err = test::normwise_error(got, ref);
            QVERIFY2(err < 1e-5,
                     qPrintable(
                         QString("gradient of %1: normwise error %2").arg(QString::fromStdString(t["name"])).arg(err)));
        }

        // One clipped AdamW step (decay on weights, none on biases and norms), as torch.optim.AdamW.
        Optimizer opt(layout, model.params(), model.grads(), k.training, DType::F32, ctx, alloc);
        const StepResult r = opt.step(k.training.lr, 1.0);
        QVERIFY(std::abs(r.grad_norm - fx["grad_norm"].get<double>()) <= 1e-5 * fx["grad_norm"].get<double>());
        for (const auto& t : fx["tensors"]) {
            const auto ref = test::decode_array<double>(t["after_step_f64"]);
            const TensorView p = layout.view(model.params(), layout.index_of(t["name"]));
            const std::vector<float> got(p.f32(), p.f32() + p.numel());
            const double err = test::normwise_error(got, ref);
            QVERIFY2(err < 1e-5, qPrintable(QString("%1 after the AdamW step: normwise error %2")
                                                .arg(QString::fromStdString(t["name"]))
                                                .arg(err)));
        }
    }
};

QTEST_APPLESS_MAIN(TestGptReference)
#include "test_gpt_reference.moc"
