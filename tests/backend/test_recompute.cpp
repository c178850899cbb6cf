// Activation recomputation (Megatron-LM's --recompute-granularity/--recompute-method/--recompute-num-layers):
// gradients must be bit-identical to the run that stores everything, and the activation memory kept
// for backward must be exactly what docs/memory.md's formula says for each mode — for GPT and for a
// Llama-family layer (RoPE, SwiGLU, grouped-query attention with a head dim != hidden/heads, RMSNorm,
// no biases).
#include "support/reference.h"
#include "support/suite.h"

#include "backend/model/gpt_model.h"

#include <QtTest>

#include <cstring>
#include <random>

namespace test_backend_recompute {

using namespace mwb;

namespace {

GptDims dims(bool llama) {
    GptDims d;
    d.layers = 3;
    d.hidden = 32;
    d.heads = 4;
    d.ffn = 128;
    d.seq = 16;
    d.micro_batch = 2;
    d.vocab = 1024;
    d.max_positions = 16;
    d.hidden_dropout = 0.1f;
    d.attention_dropout = 0.1f;
    if (llama) {
        d.groups = 2;
        d.kv_channels = 12;  // a·D = 48 != h
        d.ffn = 40;
        d.swiglu = true;
        d.linear_bias = false;
        d.positions = GptDims::Positions::Rope;
        d.rotary_dim = 6;
        d.rope_scaling = true;
        d.rmsnorm = true;
        d.tied_output = false;
    }
    return d;
}

std::vector<int32_t> tokens(const GptDims& d) {
    std::mt19937 gen(7);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(d.vocab - 1));
    std::vector<int32_t> t(static_cast<std::size_t>(d.micro_batch * (d.seq + 1)));
    for (auto& x : t) x = id(gen);
    return t;
}

RecomputePolicy policy(RecomputeGranularity g, bool uniform = true, int layers = 0) {
    RecomputePolicy p;
    p.granularity = g;
    p.uniform = uniform;
    p.num_layers = layers;
    return p;
}

struct Outcome {
    std::vector<float> grads;
    double loss = 0;
    int64_t stored = 0;  // activation bytes kept for backward
    int64_t peak = 0;    // peak activation bytes of the micro-batch
};

Outcome run(const GptDims& d, const RecomputePolicy& p) {
    OpContext ctx;
    Allocator alloc;
    GptModel model(d, p, DType::F32, ctx, alloc);
    model.init_weights(42);
    const auto t = tokens(d);
    alloc.reset_peaks();
    Outcome o;
    o.loss = model.forward_backward(t.data(), 1.0f, 42, micro_batch_stream(1, 0));
    o.stored = model.stored_activation_bytes();
    o.peak = alloc.stats().peak_of(MemCategory::Activations);
    o.grads.assign(model.grads().f32(), model.grads().f32() + model.grads().numel());
    return o;
}

// docs/memory.md, in fp32 elements (N = S·B rows): a layer that keeps everything stores 4·N·H (input,
// both norm outputs, residual) + the norm statistics (2·N each for LayerNorm, N for RMSNorm) + qkv
// N·(A+2G)·D + context N·A·D + fc1 N·F (2F with SwiGLU) + activation output N·F + B·A·S² (the
// probabilities) — GPT's 16·N·H + 4·N + B·A·S²; selective recompute drops the probabilities; a fully
// recomputed layer keeps its input N·H at the start of each chunk. The last layer's output (N·H) is
// kept for the final norm.
int64_t norm_stats(const GptDims& d) {
    return (d.rmsnorm ? 1 : 2) * d.rows();
}
int64_t layer_selective(const GptDims& d) {
    const int64_t N = d.rows();
    return 4 * N * d.hidden + 2 * norm_stats(d) + N * (d.heads + 2 * d.kv_groups()) * d.head_dim() +
           N * d.heads * d.head_dim() + N * (d.fc1_rows() + d.ffn);
}
int64_t layer_all(const GptDims& d) {
    return layer_selective(d) + d.micro_batch * d.heads * d.seq * d.seq;
}
int64_t final_output(const GptDims& d) {
    return d.rows() * d.hidden;
}
// The head adds the final norm (N·H + statistics) and the logits (N·V); with this vocabulary it is the peak.
int64_t head(const GptDims& d) {
    return d.rows() * d.hidden + norm_stats(d) + d.rows() * d.vocab;
}

}  // namespace

class TestRecompute : public QObject {
    Q_OBJECT
private slots:
    void gradients_are_bit_identical_and_memory_matches_the_formula_data() {
        QTest::addColumn<bool>("llama");
        QTest::newRow("GPT") << false;
        QTest::newRow("Llama") << true;
    }
    void gradients_are_bit_identical_and_memory_matches_the_formula() {
        QFETCH(bool, llama);
        const GptDims d = dims(llama);
        const int64_t L = d.layers, NH = d.rows() * d.hidden, F = 4;
        if (!llama) QCOMPARE(layer_all(d), 16 * NH + 4 * d.rows() + d.micro_batch * d.heads * d.seq * d.seq);
        const Outcome none = run(d, policy(RecomputeGranularity::None));
        QCOMPARE(none.stored, F * (L * layer_all(d) + final_output(d)));
        QCOMPARE(none.peak, none.stored + F * head(d));

        struct Mode {
            const char* name;
            RecomputePolicy p;
            int64_t stored_elements;
        };
        const Mode modes[] = {
            {"selective", policy(RecomputeGranularity::Selective), L * layer_selective(d) + final_output(d)},
            {"full uniform 1", policy(RecomputeGranularity::Full, true, 1), L * NH + final_output(d)},
            {"full uniform 2", policy(RecomputeGranularity::Full, true, 2),
             2 * NH + final_output(d)},  // chunks {0,1},{2}
            {"full block 2", policy(RecomputeGranularity::Full, false, 2), 2 * NH + layer_all(d) + final_output(d)},
        };
        for (const Mode& m : modes) {
            const Outcome o = run(d, m.p);
            QVERIFY2(o.loss == none.loss, m.name);
            QVERIFY2(std::memcmp(o.grads.data(), none.grads.data(), o.grads.size() * sizeof(float)) == 0,
                     qPrintable(QString("%1: gradients differ from the run without recompute").arg(m.name)));
            QVERIFY2(
                o.stored == F * m.stored_elements,
                qPrintable(
                    QString("%1: stored %2 bytes, formula %3").arg(m.name).arg(o.stored).arg(F * m.stored_elements)));
            QVERIFY2(o.peak < none.peak, m.name);
            if (std::string(m.name) != "full block 2" && std::string(m.name) != "full uniform 2")
                QVERIFY2(o.peak == o.stored + F * head(d), m.name);
        }
    }
};

MWB_TEST_SUITE_APPLESS(test_backend_recompute, TestRecompute)
}  // namespace test_backend_recompute
#include "test_recompute.moc"
