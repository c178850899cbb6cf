#pragma once
// Shared by the parallel equivalence suites: a layout as test-data columns and as mwb-train flags, and
// every rank's measured traffic and memory of a finished run against layout_formulas.h.
#include "layout_formulas.h"
#include "mpi_runs.h"

#include <QtTest>

#include <filesystem>

namespace mwb::test {

/// The data columns fetch_layout() reads.
inline void add_layout_columns() {
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("chunks");
    QTest::addColumn<bool>("sp");
    QTest::addColumn<bool>("distopt");
    QTest::addColumn<QString>("recompute");
}

/// The current data row's layout; full recompute is uniform, one layer per recompute chunk.
inline LayoutSpec fetch_layout() {
    QFETCH(int, tp);
    QFETCH(int, pp);
    QFETCH(int, dp);
    QFETCH(int, chunks);
    QFETCH(bool, sp);
    QFETCH(bool, distopt);
    QFETCH(QString, recompute);
    return LayoutSpec{.tp = tp,
                      .pp = pp,
                      .dp = dp,
                      .chunks = chunks,
                      .sp = sp,
                      .distributed_optimizer = distopt,
                      .recompute = recompute.toStdString(),
                      .recompute_layers = 1};
}

inline QStringList layout_args(const LayoutSpec& l, int64_t layers) {
    QStringList a{"--tensor-model-parallel-size", QString::number(l.tp), "--pipeline-model-parallel-size",
                  QString::number(l.pp)};
    if (l.sp) a << "--sequence-parallel";
    if (l.chunks > 1) a << "--num-layers-per-virtual-pipeline-stage" << QString::number(layers / (l.pp * l.chunks));
    if (l.distributed_optimizer) a << "--use-distributed-optimizer";
    if (!l.recompute.empty()) a << "--recompute-granularity" << QString::fromStdString(l.recompute);
    if (l.recompute == "full")
        a << "--recompute-method"
          << "uniform"
          << "--recompute-num-layers" << QString::number(l.recompute_layers);
    return a;
}

/// Every rank's bytes per group (last step record) and memory by category (last memory record) equal
/// the formulas; the activation peak where one micro-batch is in flight without recompute. m carries
/// the micro-batches per data-parallel rank. On a mismatch the current test fails (check
/// QTest::currentTestFailed() after the call).
inline void verify_ranks_against_formulas(const std::filesystem::path& dir, const ModelSpec& m, const LayoutSpec& l) {
    const auto steps = records(dir, "step");
    const auto memory_records = records(dir, "memory");
    QVERIFY(!steps.empty() && !memory_records.empty());
    const auto& ranks = steps.back()["ranks"];
    const auto& memory = memory_records.back()["ranks"];
    QCOMPARE(static_cast<int>(ranks.size()), l.tp * l.pp * l.dp);
    for (std::size_t i = 0; i < ranks.size(); ++i) {
        const int r = ranks[i]["pp"];
        for (const auto& [group, expected] : bytes_per_iteration(m, l, r)) {
            const int64_t got = ranks[i]["comm"][group]["bytes_per_iteration"];
            QVERIFY2(got == expected, qPrintable(QString("rank %1 (pp %2): %3 group sent %4 bytes per iteration, "
                                                         "formula %5")
                                                     .arg(i)
                                                     .arg(r)
                                                     .arg(QString::fromStdString(group))
                                                     .arg(got)
                                                     .arg(expected)));
        }
        const auto& by = memory[i]["by_category"];
        const int64_t arena = arena_elements(m, l, r);
        const int64_t shard = l.distributed_optimizer && l.dp > 1 ? arena / l.dp : arena;
        QCOMPARE(by["weights"]["current"].get<int64_t>(), arena * 4);
        QCOMPARE(by["gradients"]["current"].get<int64_t>(), arena * 4);
        QCOMPARE(by["optimizer"]["current"].get<int64_t>(), 2 * shard * 4);  // Adam moments (fp32 run)
        if (l.pp == 1 && l.recompute.empty())
            QCOMPARE(by["activations"]["peak"].get<int64_t>(), peak_activations(m, l) * 4);
    }
}

}  // namespace mwb::test
