// Bytes communicated per rank per iteration and process group, hand-computed for small layouts
// (named after them). The model: L = 4, h = 32, a = 4, s = 16, micro-batch b = 2, global batch 8,
// vocabulary 128 ids, bf16 on A100s, so one (s, b, h) activation is X = 16·2·32·2 = 2048 bytes.
// Scalars count too: the loss (fp64) over PP and DP, the squared gradient norm over TP × PP ("model")
// and, with the distributed optimizer, over DP: an all-reduce of 8 bytes sends 2(g−1)·8/g.
#include "published.h"

#include "mwb/planner/plan.h"

#include "support/suite.h"

#include <QtTest>

namespace test_planner_communication {

using namespace mwb;
using namespace mwb::planner;

namespace {

constexpr int TP = static_cast<int>(Group::TP), SP = static_cast<int>(Group::SP), PP = static_cast<int>(Group::PP),
              DP = static_cast<int>(Group::DP), EMB = static_cast<int>(Group::Embedding);
constexpr int64_t X = 2048;

Config tiny(int tp, int pp) {
    return test::small_gpt(tp, pp);
}

Plan on(const Config& c, int gpus) {
    const auto& d = find_device(device_catalogue(), "A100-80GB");
    Plan p = plan(c, make_cluster(d, gpus, 1));
    for (const auto& i : p.issues) qWarning("%s: %s", i.field.c_str(), i.message.c_str());
    return p;
}

}  // namespace

class TestPlannerCommunication : public QObject {
    Q_OBJECT
private slots:
    void ring_algorithm() {
        QCOMPARE(ring_bytes_sent(CollectiveOp::AllReduce, 8, 800), int64_t{1400});  // 2(g−1)/g·n
        QCOMPARE(ring_bytes_sent(CollectiveOp::AllGather, 8, 800), int64_t{700});   // (g−1)/g·n
        QCOMPARE(ring_bytes_sent(CollectiveOp::ReduceScatter, 4, 800), int64_t{600});
        QCOMPARE(ring_bytes_sent(CollectiveOp::Send, 2, 800), int64_t{800});
        QCOMPARE(ring_bytes_sent(CollectiveOp::AllReduce, 1, 800), int64_t{0});
        QCOMPARE(ring_bytes_sent(CollectiveOp::AllReduce, 3, 8), int64_t{10});  // integer division, per call
        QCOMPARE(ring_steps(CollectiveOp::AllReduce, 8), 14);
    }

    // tp2 (m = 4 micro-batches): per layer and micro-batch 2 all-reduces forward + 2 backward (32 + 32),
    // the embedding output (4) and the output layer's input gradient (4), all of X; the cross-entropy's
    // 3 fp32 all-reduces of s·b (12 of 128 bytes). An all-reduce over 2 ranks sends its payload once.
    void tp2() {
        const Plan p = on(tiny(2, 1), 2);
        const auto& s = p.communication[0];
        QCOMPARE(s.payload[TP], 72 * X + 12 * 128);
        QCOMPARE(s.bytes_sent[TP], 72 * X + 12 * 128);
        QCOMPARE(s.bytes_sent[SP], int64_t{0});
        QCOMPARE(s.bytes_sent[PP] + s.bytes_sent[DP] + s.bytes_sent[EMB], int64_t{0});
        QCOMPARE(s.bytes_sent[static_cast<int>(Group::Model)], int64_t{8});
    }

    // tp2_sp: all-gathers 2·4·4 forward + 32 backward + 32 re-gathers + 4 (embedding gradient) + 4 (final
    // norm) = 104, reduce-scatters 32 + 32 + 4 + 4 = 72; each sends half its payload. Once per
    // iteration the gradients seen by local positions only are all-reduced: 4 norm vectors per layer and
    // the final norm's 2 (h fp32 each: 18·128 bytes), the position embeddings (16·32 fp32 = 2048).
    // Without the re-gathers and those, SP sends exactly what TP's all-reduces send (Korthikanti et al.).
    void tp2_sp() {
        Config c = tiny(2, 1);
        c.parallel.sequence_parallel = true;
        const Plan p = on(c, 2);
        const auto& s = p.communication[0];
        const int64_t norms = 18 * 128 + 2048;
        QCOMPARE(s.payload[SP], 176 * X + norms);
        QCOMPARE(s.bytes_sent[SP], 88 * X + norms);
        QCOMPARE(s.bytes_sent[TP], int64_t{12 * 128});
        const Plan tp = on(tiny(2, 1), 2);
        QCOMPARE(s.bytes_sent[SP] - 32 * X / 2 - norms, tp.communication[0].bytes_sent[TP] - 12 * 128);
    }

    // Full recomputation repeats the forward's collectives: 2 more all-reduces per layer and micro-batch.
    void tp2_full_recompute() {
        Config c = tiny(2, 1);
        test::full_recompute(c);
        const Plan p = on(c, 2);
        QCOMPARE(p.communication[0].payload[TP], (72 + 32) * X + 12 * 128);
        c.training.recompute_granularity = "selective";  // the attention core needs no communication
        c.training.recompute_method.clear();
        c.training.recompute_num_layers = 0;
        QCOMPARE(on(c, 2).communication[0].payload[TP], 72 * X + 12 * 128);
    }

    // pp2 (m = 4): stage 0 sends 4 activations, stage 1 4 gradients, both the loss (8 bytes). Tied
    // embeddings: the two copies' gradients (128·32 fp32 = 16384 bytes) are summed between the first
    // and last stage.
    void pp2() {
        const Plan p = on(tiny(1, 2), 2);
        QCOMPARE(p.communication[0].bytes_sent[PP], 4 * X + 8);
        QCOMPARE(p.communication[1].bytes_sent[PP], 4 * X + 8);
        QCOMPARE(p.communication[0].bytes_sent[EMB], int64_t{16384});
        QCOMPARE(p.communication[1].bytes_sent[EMB], int64_t{16384});
        Config untied = tiny(1, 2);
        untied.model.untie_embeddings_and_output_weights = true;
        QCOMPARE(on(untied, 2).communication[0].bytes_sent[EMB], int64_t{0});
    }

    // pp2_v2 (2 chunks of 1 layer per rank): a micro-batch crosses 3 stage boundaries each way; stage 0
    // sends 2 activations and 1 gradient per micro-batch, stage 1 the other way round.
    void pp2_v2() {
        Config c = tiny(1, 2);
        c.parallel.num_layers_per_virtual_pipeline_stage = 1;
        const Plan p = on(c, 2);
        QCOMPARE(p.layout.vp, 2);
        QCOMPARE(p.communication[0].bytes_sent[PP], 12 * X + 8);
        QCOMPARE(p.communication[1].bytes_sent[PP], 12 * X + 8);
    }

    // tp2_sp_pp2: the pipeline sends the sequence-parallel shard, s/t·b·h.
    void tp2_sp_pp2() {
        Config c = tiny(2, 2);
        c.parallel.sequence_parallel = true;
        const Plan p = on(c, 4);
        QCOMPARE(p.communication[0].bytes_sent[PP], 4 * X / 2 + 8);
    }

    // dp2 / dp4: the arena (56448 elements: embeddings 4096 + 512, 4 layers of 12928 with every tensor
    // padded to 64 elements, final norm 2·64) of fp32 gradients, all-reduced: 2(d−1)/d · 225792 bytes, and
    // the loss. Distributed optimizer (the arena is a multiple of 2·64 already): reduce-scatter of the fp32 gradients and all-gather of the bf16
    // weights, (d−1)/d each, the loss and the squared norm.
    void dp2_dp4_and_distributed_optimizer() {
        const Plan p2 = on(tiny(1, 1), 2);
        QCOMPARE(p2.parameters.stages[0].arena_elements, 56448);
        QCOMPARE(p2.communication[0].payload[DP], 56448 * 4 + 8);
        QCOMPARE(p2.communication[0].bytes_sent[DP], 56448 * 4 + 8);
        const Plan p4 = on(tiny(1, 1), 4);
        QCOMPARE(p4.communication[0].bytes_sent[DP], 2 * 3 * 56448 * 4 / 4 + 2 * 3 * 8 / 4);
        Config d = tiny(1, 1);
        d.parallel.use_distributed_optimizer = true;
        const Plan dist = on(d, 2);
        QCOMPARE(dist.communication[0].payload[DP], 56448 * 4 + 56448 * 2 + 16);
        QCOMPARE(dist.communication[0].bytes_sent[DP], 56448 * 4 / 2 + 56448 * 2 / 2 + 16);
        // ddp_bucket_size splits the all-reduce into buckets; the bytes are the same for 2 ranks.
        Config bucketed = tiny(1, 1);
        bucketed.parallel.ddp_bucket_size = 10000;
        const Plan b = on(bucketed, 2);
        QCOMPARE(b.communication[0].bytes_sent[DP], 56448 * 4 + 8);
        int64_t calls = 0;
        for (const auto& col : b.communication[0].collectives) calls += col.group == Group::DP ? col.calls : 0;
        QCOMPARE(calls, int64_t{6 + 1});  // 5 full buckets + 1 partial, and the loss
    }

    // tp2_pp2_dp2 together: each group as in its own case; the per-rank JSON reports every group.
    void tp2_pp2_dp2() {
        const Plan p = on(tiny(2, 2), 8);
        QCOMPARE(p.layout.dp, 2);
        QCOMPARE(p.layout.micro_batches, 2);
        // Stage 0: 2 layers: (2 + 2)·2·2 all-reduces + 2 embedding outputs; stage 1: + 2 output-layer
        // gradients + 3·2 cross-entropy all-reduces.
        QCOMPARE(p.communication[0].payload[TP], 18 * X);
        QCOMPARE(p.communication[1].payload[TP], 18 * X + 6 * 128);
        QCOMPARE(p.communication[0].payload[PP], 2 * X + 8);
        QCOMPARE(p.communication[0].payload[DP], 17920 * 4 + 8);
        QCOMPARE(p.communication[1].payload[DP], 17536 * 4 + 8);
        const auto max = p.max_bytes_sent();
        QCOMPARE(max[DP], int64_t{17920 * 4 + 8});
        QCOMPARE(max[static_cast<int>(Group::Model)], int64_t{2 * 3 * 8 / 4});  // TP × PP = 4 ranks
    }
};

MWB_TEST_SUITE_APPLESS(test_planner_communication, TestPlannerCommunication)
}  // namespace test_planner_communication
#include "test_communication.moc"
