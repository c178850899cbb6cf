// Predicted time against published measurements on DGX A100 clusters, with one compute efficiency
// for A100s (resources/gpus.json: 0.64) and no fitting per point:
//  - Korthikanti et al. 2022, Table 5: iteration time with full recomputation vs selective + SP, and
//    the throughput gained (29–32%);
//  - Narayanan et al. 2021, Table 1: achieved teraFLOP/s per GPU (full recomputation), and the days
//    to train GPT-3 175B (34) and the 1T model (84).
// The deviations printed here are the tables of docs/planner.md.
#include "published.h"

#include "mwb/planner/plan.h"

#include "support/suite.h"

#include <QtTest>

#include <cmath>

namespace test_planner_time {

using namespace mwb;
using namespace mwb::planner;

namespace {

Plan korthikanti(const test::KorthikantiRow& r, bool present) {
    Config c = test::paper_gpt(r.layers, r.hidden, r.heads, r.tp, r.pp, r.batch, r.micro_batch);
    if (present)
        test::selective_sp(c);
    else
        test::full_recompute(c);
    Cluster cluster = test::dgx_a100(r.gpus);
    return plan(c, cluster);
}

double deviation(double predicted, double published) {
    return predicted / published - 1;
}

}  // namespace

class TestPlannerTime : public QObject {
    Q_OBJECT
private slots:
    void korthikanti_table5() {
        double log_sum = 0;
        qInfo(
            "| model | full recompute s (paper / planner / dev) | selective + SP s (paper / planner / dev) | "
            "throughput gain (paper / planner) | MFU (paper / planner) |");
        for (const auto& r : test::kKorthikanti) {
            const Plan full = korthikanti(r, false), present = korthikanti(r, true);
            QVERIFY2(full.runnable() && present.runnable(), r.name);
            const double tf = full.time.iteration_s, tp = present.time.iteration_s;
            qInfo("| %s | %.2f / %.2f / %+.1f%% | %.2f / %.2f / %+.1f%% | %.1f%% / %.1f%% | %.1f%% / %.1f%% |", r.name,
                  r.full_recompute_s, tf, 100 * deviation(tf, r.full_recompute_s), r.present_s, tp,
                  100 * deviation(tp, r.present_s), 100 * (r.full_recompute_s / r.present_s - 1), 100 * (tf / tp - 1),
                  100 * r.mfu, 100 * present.time.mfu);
            QVERIFY2(std::fabs(deviation(tf, r.full_recompute_s)) < 0.20, r.name);
            QVERIFY2(std::fabs(deviation(tp, r.present_s)) < 0.20, r.name);
            // The speed-up of selective recompute + SP over full recompute, within 4 percentage points.
            QVERIFY2(std::fabs((tf / tp) - (r.full_recompute_s / r.present_s)) < 0.04, r.name);
            log_sum += std::log(tf / r.full_recompute_s) + std::log(tp / r.present_s);
        }
        const double mean = std::exp(log_sum / 8) - 1;
        qInfo("geometric-mean deviation of the 8 iteration times: %+.1f%%", 100 * mean);
        QVERIFY(std::fabs(mean) < 0.10);
    }

    void narayanan_table1_throughput() {
        double log_sum = 0;
        qInfo("| parameters | GPUs | TP | PP | batch | paper TFLOP/s | planner | deviation |");
        for (const auto& r : test::kNarayananTable1) {
            Config c = test::paper_gpt(r.layers, r.hidden, r.heads, r.tp, r.pp, r.batch, 1);
            test::full_recompute(c);
            const Plan p = plan(c, test::dgx_a100(r.gpus));
            QVERIFY2(p.runnable(), qPrintable(QString::number(r.billions)));
            // Their teraFLOP/s count eq. 3's FLOPs, i.e. our hardware FLOPs with full recomputation.
            const double tflops = p.time.hfu * p.time.peak_flops / 1e12;
            qInfo("| %.1fB | %d | %d | %d | %d | %.0f | %.1f | %+.1f%% |", r.billions, r.gpus, r.tp, r.pp, r.batch,
                  r.tflops, tflops, 100 * deviation(tflops, r.tflops));
            QVERIFY2(std::fabs(deviation(tflops, r.tflops)) < 0.30, qPrintable(QString::number(r.billions)));
            log_sum += std::log(tflops / r.tflops);
        }
        const double mean = std::exp(log_sum / 10) - 1;
        qInfo("geometric-mean deviation of the 10 throughputs: %+.1f%%", 100 * mean);
        QVERIFY(std::fabs(mean) < 0.10);
    }

    // GPT-3 175B, 300B tokens on 1024 A100s (TP 8, PP 8, DP 16, batch 1536, full recompute): 34 days in
    // the paper. The 1T model, 450B tokens on 3072 A100s (Table 1's layout): 84 days.
    void days_to_train() {
        Config gpt3 = test::paper_gpt(96, 12288, 96, 8, 8, 1536, 1);
        test::full_recompute(gpt3);
        PlanOptions o;
        o.train_tokens = 300e9;
        const Plan a = plan(gpt3, test::dgx_a100(1024), o);
        Config one_t = test::paper_gpt(128, 25600, 160, 8, 64, 3072, 1);
        test::full_recompute(one_t);
        o.train_tokens = 450e9;
        const Plan b = plan(one_t, test::dgx_a100(3072), o);
        qInfo("| GPT-3 175B, 1024 GPUs, 300B tokens | 34 | %.1f | %+.1f%% |", a.time.days,
              100 * deviation(a.time.days, 34));
        qInfo("| 1T, 3072 GPUs, 450B tokens | 84 | %.1f | %+.1f%% |", b.time.days, 100 * deviation(b.time.days, 84));
        QVERIFY(std::fabs(deviation(a.time.days, 34)) < 0.15);
        QVERIFY(std::fabs(deviation(b.time.days, 84)) < 0.15);
    }

    // The time model's own identities: bubble (p − 1)/(v·m), MFU = model FLOP/s / (devices × peak).
    void bubble_and_mfu_definitions() {
        Config c = test::paper_gpt(32, 4096, 32, 2, 4, 64, 1);
        const Plan plain = plan(c, test::dgx_a100(16));
        QCOMPARE(plain.time.bubble_fraction, 3.0 / 32);
        QVERIFY(std::fabs(plain.time.bubble_s / (plain.time.slot_s * 3) - 1) < 1e-12);
        c.parallel.num_layers_per_virtual_pipeline_stage = 2;
        const Plan interleaved = plan(c, test::dgx_a100(16));
        QCOMPARE(interleaved.layout.vp, 4);
        QCOMPARE(interleaved.time.bubble_fraction, 3.0 / (4 * 32));
        QVERIFY(interleaved.time.bubble_s < plain.time.bubble_s);
        const Timing& t = plain.time;
        QVERIFY(std::fabs(t.mfu - plain.flops.model / t.iteration_s / 16 / 312e12) < 1e-12);
        QVERIFY(std::fabs(t.tokens_per_s - 64.0 * 2048 / t.iteration_s) < 1e-6);
        const double parts = t.compute_s + t.tp_s + t.pp_s + t.bubble_s + t.dp_s + t.embedding_s + t.optimizer_s;
        QVERIFY(std::fabs(parts / t.iteration_s - 1) < 1e-12);
    }
};

MWB_TEST_SUITE_APPLESS(test_planner_time, TestPlannerTime)
}  // namespace test_planner_time
#include "test_time.moc"
