// Weight initialisation against Megatron-LM's rule itself (not a stored run): by declared parameter
// role, N(0, std) weights, N(0, std/sqrt(2L)) for the attention and MLP output projections, ones for
// norm weights, zeros for biases; the sample statistics of every tensor must fit the rule. And a
// tensor-parallel shard draws exactly its part of the global tensor, also for SwiGLU's fc1, whose
// shard holds its own gate and up rows.
#include "backend/model/gpt_model.h"
#include "backend/model/init.h"
#include "backend/model/transformer_layer.h"

#include "support/suite.h"

#include <QtTest>

#include <cmath>

namespace test_backend_model_init {

using namespace mwb;

namespace {

GptDims llama_dims() {
    GptDims d;
    d.layers = 4;
    d.hidden = 64;
    d.heads = 4;
    d.groups = 2;
    d.ffn = 96;
    d.swiglu = true;
    d.linear_bias = false;
    d.qkv_bias = true;  // biases present only here
    d.positions = GptDims::Positions::Rope;
    d.rotary_dim = 16;
    d.rmsnorm = true;
    d.tied_output = false;
    d.seq = 8;
    d.micro_batch = 1;
    d.vocab = 256;
    d.max_positions = 8;
    d.init_std = 0.05f;
    return d;
}

GptDims gpt_dims() {
    GptDims d;
    d.layers = 3;
    d.hidden = 64;
    d.heads = 4;
    d.ffn = 256;
    d.seq = 8;
    d.micro_batch = 1;
    d.vocab = 256;
    d.max_positions = 64;
    d.init_std = 0.02f;
    return d;
}

}  // namespace

class TestModelInit : public QObject {
    Q_OBJECT
private slots:
    void every_tensor_follows_megatrons_rule_data() {
        QTest::addColumn<bool>("llama");
        QTest::addColumn<bool>("positions");
        QTest::newRow("GPT") << false << true;
        QTest::newRow("GPT without positions") << false << false;
        QTest::newRow("Llama") << true << false;
    }
    void every_tensor_follows_megatrons_rule() {
        QFETCH(bool, llama);
        QFETCH(bool, positions);
        GptDims d = llama ? llama_dims() : gpt_dims();
        if (!llama && !positions) d.positions = GptDims::Positions::None;
        OpContext ctx;
        Allocator alloc;
        GptModel model(d, RecomputePolicy{}, DType::F32, ctx, alloc);
        model.init_weights(7);
        int weights = 0, projections = 0, norms = 0, biases = 0;
        for (std::size_t i = 0; i < model.layout().size(); ++i) {
            const ParamInfo& p = model.layout()[i];
            const TensorView v = model.layout().view(model.params(), i);
            const float* x = v.f32();
            const int64_t n = v.numel();
            const QString what = QString::fromStdString(p.name);
            QCOMPARE(p.weight_decay, !role_is_bias(p.role) && p.role != ParamRole::NormWeight);
            if (role_is_bias(p.role) || p.role == ParamRole::NormWeight) {
                const float want = p.role == ParamRole::NormWeight ? 1.0f : 0.0f;
                for (int64_t j = 0; j < n; ++j) QVERIFY2(x[j] == want, qPrintable(what));
                ++(p.role == ParamRole::NormWeight ? norms : biases);
                continue;
            }
            const bool projection = p.role == ParamRole::ProjWeight || p.role == ParamRole::Fc2Weight;
            const double rule = projection ? d.init_std / std::sqrt(2.0 * double(d.layers)) : d.init_std;
            double sum = 0, sq = 0;
            for (int64_t j = 0; j < n; ++j) {
                sum += x[j];
                sq += double(x[j]) * x[j];
            }
            const double mean = sum / double(n), sd = std::sqrt(sq / double(n) - mean * mean);
            // Sampling error of a normal sample: the mean's sd is rule/sqrt(n), the std's ~rule/sqrt(2n);
            // 5 of them (a false failure is a 1-in-a-million event per tensor).
            QVERIFY2(std::abs(mean) < 5 * rule / std::sqrt(double(n)),
                     qPrintable(QString("%1: mean %2 for std %3").arg(what).arg(mean).arg(rule)));
            QVERIFY2(std::abs(sd / rule - 1) < 5 / std::sqrt(2.0 * double(n)),
                     qPrintable(QString("%1: sample std %2, the rule says %3").arg(what).arg(sd).arg(rule)));
            ++(projection ? projections : weights);
        }
        QCOMPARE(projections, 2 * int(d.layers));
        QCOMPARE(norms, 2 * int(d.layers) + 1);
        if (llama) {
            QCOMPARE(biases, int(d.layers));           // the QKV bias only
            QCOMPARE(weights, 2 * int(d.layers) + 2);  // qkv, fc1; embedding, output layer
            QVERIFY(!model.layout().contains("embedding.position_embeddings.weight"));
        } else {
            QCOMPARE(biases, 6 * int(d.layers) + 1);  // 2 norm biases + 4 linear biases per layer, final norm
            QCOMPARE(weights, 2 * int(d.layers) + (positions ? 2 : 1));  // qkv, fc1; word (and position) embeddings
            QCOMPARE(model.layout().contains("embedding.position_embeddings.weight"), positions);
        }
        // And the model trains: a finite loss near ln(V) at init.
        std::vector<int32_t> tokens(static_cast<std::size_t>(d.micro_batch * (d.seq + 1)));
        for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 37 % d.vocab);
        const double loss = model.forward_backward(tokens.data(), 1.0f, 7, 1);
        QVERIFY2(std::abs(loss - std::log(double(d.vocab))) < 0.5, qPrintable(QString::number(loss)));
    }

    // Every tensor starts at a multiple of 64 elements (256 bytes of fp32: cuBLASLt's widest alignment),
    // the padding between tensors is what the shared rule says and stays below one block, and the
    // distributed optimizer's shards are equal and aligned. Sizes chosen so that most tensors need padding.
    void every_tensor_starts_256_bytes_into_the_arena() {
        ParamLayout layout;
        GptDims d = gpt_dims();
        d.hidden = 40;
        d.heads = 5;
        d.ffn = 104;
        for (int64_t l = 0; l < 2; ++l) TransformerLayer::add_params(layout, l, d, 1, 0, false);
        layout.add("decoder.final_layernorm.weight", ParamRole::NormWeight, {40});
        int64_t expected = 0, padding = 0;
        for (std::size_t i = 0; i < layout.size(); ++i) {
            const ParamInfo& p = layout[i];
            QCOMPARE(p.offset % 64, int64_t{0});
            QCOMPARE(p.offset, expected);  // packed: the next block after the previous tensor
            expected = p.offset + (p.numel + 63) / 64 * 64;
            padding += expected - p.offset - p.numel;
        }
        QCOMPARE(layout.arena_elements(), expected);
        QCOMPARE(layout.arena_elements() - layout.parameter_count(), padding);
        QVERIFY(padding > 0 && padding < 64 * static_cast<int64_t>(layout.size()));
        // A 256-byte aligned base (cudaMalloc's) puts every view at a 256-byte boundary.
        alignas(256) static float arena[32768];
        QVERIFY(layout.arena_elements() <= 32768);
        const TensorView base = make_view(arena, DType::F32, {layout.arena_elements()});
        for (std::size_t i = 0; i < layout.size(); ++i)
            QCOMPARE(reinterpret_cast<uintptr_t>(layout.view(base, i).data) % 256, uintptr_t{0});
        layout.pad_to_shards(3);
        QCOMPARE(layout.arena_elements() % (3 * 64), int64_t{0});
        QVERIFY(layout.arena_elements() - expected < 3 * 64);
    }

    void shards_draw_their_part_of_the_global_tensor() {
        // fc1 of SwiGLU (2F, H) = [gate | up]: rank r of t holds gate rows [rF/t, (r+1)F/t) then up rows
        // [F + rF/t, F + (r+1)F/t). qkv (G·(A/G+2)·D, H) splits into whole groups: contiguous rows.
        const int64_t F = 12, H = 5, t = 3;
        ParamLayout whole;
        whole.add_split("mlp.linear_fc1.weight", ParamRole::Fc1Weight, {2 * F, H}, 0, 1, 0, 2);
        std::vector<float> all(2 * F * H);
        normal_init_slice(make_view(all.data(), DType::F32, {2 * F, H}), whole[0], 5, 1.0f);
        for (int64_t r = 0; r < t; ++r) {
            ParamLayout shard;
            shard.add_split("mlp.linear_fc1.weight", ParamRole::Fc1Weight, {2 * F, H}, 0, int(t), int(r), 2);
            const ParamInfo& p = shard[0];
            QCOMPARE(p.shape[0], 2 * F / t);
            std::vector<float> got(p.numel);
            normal_init_slice(make_view(got.data(), DType::F32, {p.shape[0], H}), p, 5, 1.0f);
            const int64_t rows = F / t;
            std::vector<float> want;
            for (const int64_t first : {r * rows, F + r * rows})
                want.insert(want.end(), all.begin() + first * H, all.begin() + (first + rows) * H);
            QVERIFY(got == want);
            const auto blocks = shard.slice_blocks(0);
            QCOMPARE(blocks.size(), std::size_t{2});
            QCOMPARE(blocks[0], std::make_pair(r * rows, rows));
            QCOMPARE(blocks[1], std::make_pair(F + r * rows, rows));
        }
    }
};

MWB_TEST_SUITE_APPLESS(test_backend_model_init, TestModelInit)
}  // namespace test_backend_model_init
#include "test_model_init.moc"
