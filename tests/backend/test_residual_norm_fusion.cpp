// Which residual adds the model runs fused with the norm that reads them next (docs/gpu.md, the fused
// residual + norm): counted per op through OpContext::calls. Each layer's attention residual runs fused
// with its MLP norm (ln2); its output residual with the next layer's input norm (ln1) in the same
// model chunk, or with the final norm after the head chunk's last layer; a chunk's output that goes to
// a pipeline send stays unfused (bias_dropout_add_forward, or dropout_add_forward without biases), and
// the next stage's first layer runs its own input norm. A full recompute fuses as the forward did.
// The bits of the fused path are the unfused path's: scripts/compare-bits.sh, test_backend_gpt_reference.
#include "support/suite.h"

#include "backend/parallel/self_communicator.h"

#include "backend/model/gpt_model.h"

#include <QtTest>

#include <random>

namespace test_backend_residual_norm_fusion {

using namespace mwb;

namespace {

GptDims dims(bool llama, int64_t layers) {
    GptDims d;
    d.layers = layers;
    d.hidden = 32;
    d.heads = 4;
    d.ffn = 64;
    d.seq = 8;
    d.micro_batch = 2;
    d.vocab = 128;
    d.max_positions = 8;
    d.hidden_dropout = 0.1f;
    d.attention_dropout = 0.1f;
    if (llama) {  // RMSNorm, no biases: the residual add without bias is dropout_add_forward
        d.groups = 2;
        d.swiglu = true;
        d.linear_bias = false;
        d.positions = GptDims::Positions::Rope;
        d.rotary_dim = 8;
        d.rmsnorm = true;
        d.tied_output = false;
    }
    return d;
}

std::vector<int32_t> tokens(const GptDims& d) {
    std::mt19937 gen(3);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(d.vocab - 1));
    std::vector<int32_t> t(static_cast<std::size_t>(d.micro_batch * (d.seq + 1)));
    for (auto& x : t) x = id(gen);
    return t;
}

/// Op calls of one pass: the fused residual + norm, the unfused residual adds, the stand-alone norms.
struct Calls {
    int64_t fused = 0, unfused = 0, norms = 0;
};

Calls since(const OpContext& ctx, const OpContext::Counts& before) {
    const auto delta = [&](OpId op) { return ctx.calls_of(op) - before[static_cast<std::size_t>(op)]; };
    return {delta(OpId::bias_dropout_add_norm_forward),
            delta(OpId::bias_dropout_add_forward) + delta(OpId::dropout_add_forward),
            delta(OpId::layernorm_forward) + delta(OpId::rmsnorm_forward)};
}

void expect(const Calls& c, const Calls& want, const char* what) {
    QVERIFY2(c.fused == want.fused && c.unfused == want.unfused && c.norms == want.norms,
             qPrintable(QString("%1: fused %2 (want %3), unfused residual adds %4 (want %5), norms %6 (want %7)")
                            .arg(what)
                            .arg(c.fused)
                            .arg(want.fused)
                            .arg(c.unfused)
                            .arg(want.unfused)
                            .arg(c.norms)
                            .arg(want.norms)));
}

RecomputePolicy full_uniform(int layers) {
    RecomputePolicy p;
    p.granularity = RecomputeGranularity::Full;
    p.uniform = true;
    p.num_layers = layers;
    return p;
}

}  // namespace

class TestResidualNormFusion : public QObject {
    Q_OBJECT
private slots:
    void one_rank_fuses_every_residual_into_the_next_norm_data() {
        QTest::addColumn<bool>("llama");
        QTest::newRow("GPT") << false;
        QTest::newRow("Llama") << true;
    }
    void one_rank_fuses_every_residual_into_the_next_norm() {
        QFETCH(bool, llama);
        const GptDims d = dims(llama, 3);
        const auto t = tokens(d);
        for (const bool recompute : {false, true}) {
            OpContext ctx;
            Allocator alloc;
            GptModel model(d, recompute ? full_uniform(3) : RecomputePolicy{}, DType::F32, ctx, alloc);
            model.init_weights(42);
            MicroBatch mb;
            mb.tokens = t.data();
            mb.seed = 42;
            mb.stream_base = micro_batch_stream(1, 0);
            // Forward: 3 attention -> MLP norm, 2 layer -> next layer's input norm, 1 last layer ->
            // final norm; only layer 0's input norm runs alone.
            OpContext::Counts before = ctx.calls;
            model.forward(0, mb, {});
            expect(since(ctx, before), {6, 0, 1}, recompute ? "forward (full recompute)" : "forward");
            // Backward: nothing, or the recompute of the 3-layer chunk from its input: 3 + 2 fused,
            // layer 0's input norm alone, and the last layer's output residual unfused (no norm
            // reads it: the head's backward has run already).
            before = ctx.calls;
            model.backward(0, 0, {});
            expect(since(ctx, before), recompute ? Calls{5, 1, 1} : Calls{}, recompute ? "recompute" : "backward");
        }
        // Evaluation (no dropout, nothing kept) and forward_logits fuse the same way.
        OpContext ctx;
        Allocator alloc;
        GptModel model(d, RecomputePolicy{}, DType::F32, ctx, alloc);
        model.init_weights(42);
        OpContext::Counts before = ctx.calls;
        model.evaluate(t.data());
        expect(since(ctx, before), {6, 0, 1}, "evaluate");
        before = ctx.calls;
        model.forward_logits(t.data());
        expect(since(ctx, before), {6, 0, 1}, "forward_logits");
    }

    void a_pipeline_send_stays_unfused_data() {
        QTest::addColumn<bool>("llama");
        QTest::addColumn<int>("per_virtual_stage");
        QTest::newRow("GPT PP2") << false << 0;
        QTest::newRow("Llama PP2") << true << 0;
        QTest::newRow("GPT PP2 interleaved") << false << 1;
    }
    void a_pipeline_send_stays_unfused() {
        // Both stages of a 4-layer model on this process (no tensor parallelism): each chunk's output
        // is handed on by hand, as the pipeline's send and receive would.
        QFETCH(bool, llama);
        QFETCH(int, per_virtual_stage);
        const GptDims d = dims(llama, 4);
        const auto t = tokens(d);
        SelfCommunicator tp_comm("tp"), sp_comm("sp");
        OpContext ctx;
        TensorParallel tp(tp_comm, sp_comm, false, ctx);
        Allocator alloc;
        GptModel stage0(d, ModelPartition::for_stage(d, 2, 0, per_virtual_stage), tp, RecomputePolicy{}, DType::F32,
                        ctx, alloc);
        GptModel stage1(d, ModelPartition::for_stage(d, 2, 1, per_virtual_stage), tp, RecomputePolicy{}, DType::F32,
                        ctx, alloc);
        stage0.init_weights(42);
        stage1.init_weights(42);
        MicroBatch mb;
        mb.tokens = t.data();
        mb.seed = 42;
        mb.stream_base = micro_batch_stream(1, 0);
        // Chunks in pipeline order: (stage, chunk); 2 layers each without interleaving, 1 with.
        std::vector<std::pair<GptModel*, int>> order = {{&stage0, 0}, {&stage1, 0}};
        if (per_virtual_stage > 0) order = {{&stage0, 0}, {&stage1, 0}, {&stage0, 1}, {&stage1, 1}};
        const int64_t per_chunk = per_virtual_stage > 0 ? 1 : 2;
        Buffer x;
        for (std::size_t i = 0; i < order.size(); ++i) {
            const bool head = i + 1 == order.size();
            const OpContext::Counts before = ctx.calls;
            ForwardResult r = order[i].first->forward(order[i].second, mb, std::move(x));
            // Per layer its attention residual; per layer but the chunk's last its output residual;
            // the last layer's output fused into the final norm on the head chunk, else sent unfused.
            // Each chunk's first layer normalises its input alone.
            const Calls want{per_chunk + (per_chunk - 1) + (head ? 1 : 0), head ? 0 : 1, 1};
            expect(since(ctx, before), want, qPrintable(QString("chunk %1 in pipeline order").arg(i)));
            x = std::move(r.output);
        }
        QVERIFY(x.empty());
    }
};

MWB_TEST_SUITE_APPLESS(test_backend_residual_norm_fusion, TestResidualNormFusion)
}  // namespace test_backend_residual_norm_fusion
#include "test_residual_norm_fusion.moc"
