// The caching allocator's capture pool (the CUDA graph of a training step, backend/train/step_graph.h),
// on the CPU allocator, whose bookkeeping is the GPU's: blocks handed out or freed during a capture
// belong to the pool and are never handed to anyone outside a capture until the pool is released;
// freed ones are reused inside the capture; a later capture joins the pool and reuses its free
// blocks; the byte counts stay exact. GraphPlan, the host-only choice of eager, capture or replay per
// micro-batch count (warm-up per count, at most kMaxGraphs, least recently used evicted). And StepGraph
// on the CPU: every step eager.
#include "backend/core/memory.h"
#include "backend/train/step_graph.h"
#include "mwb/kernels/error.h"

#include "support/suite.h"

#include <QtTest>

#include <set>

namespace test_backend_memory {

using namespace mwb;

class TestMemory : public QObject {
    Q_OBJECT
private slots:
    void capture_pool_owns_its_blocks() {
        Allocator a;
        constexpr auto W = MemCategory::Workspace;
        void* cached = a.allocate(1000, W);  // 1024 bytes reserved
        void* kept = a.allocate(3000, W);    // allocated before, freed during the capture
        a.release(cached, 1000, W);
        const int64_t reserved_before = a.stats().reserved;

        a.begin_capture();
        QVERIFY(a.capturing());
        void* x = a.allocate(1000, W);
        QCOMPARE(x, cached);  // a cached block: the capture takes it (and the pool owns it now)
        void* y = a.allocate(2000, W);
        a.release(y, 2000, W);
        void* y2 = a.allocate(2000, W);
        QCOMPARE(y2, y);  // freed during the capture: reused inside it
        void* live = a.allocate(5000, W);  // still in use when the capture ends
        a.release(kept, 3000, W);
        a.release(x, 1000, W);
        a.release(y2, 2000, W);
        a.end_capture();
        QVERIFY(!a.capturing());
        QCOMPARE(a.pool_bytes(), int64_t{1024 + 2048 + 3008 + 5056});
        QCOMPARE(a.pool_free_bytes(), int64_t{1024 + 2048 + 3008});
        QCOMPARE(a.stats().of(W), int64_t{5000});
        QCOMPARE(a.stats().reserved, reserved_before + 2048 + 5056);

        // Outside a capture none of the pool's blocks is handed out, free or freed later.
        const std::set<void*> pool{cached, y, kept, live};
        std::vector<std::pair<void*, int64_t>> outside;
        for (int64_t bytes : {1000, 2000, 3000, 5000}) {
            outside.emplace_back(a.allocate(bytes, W), bytes);
            QVERIFY(!pool.contains(outside.back().first));
        }
        a.release(live, 5000, W);  // the graph's buffer, freed by its owner: back to the pool
        QCOMPARE(a.pool_free_bytes(), int64_t{1024 + 2048 + 3008 + 5056});
        void* again = a.allocate(5000, W);
        QVERIFY(again != live);
        a.release(again, 5000, W);
        for (auto& [p, bytes] : outside) a.release(p, bytes, W);
        QCOMPARE(a.stats().of(W), int64_t{0});

        // A second capture (another micro-batch count's graph) joins the pool: its free blocks first.
        a.begin_capture();
        QVERIFY_THROWS_EXCEPTION(mwb::Error, a.begin_capture());  // one capture at a time
        void* shared = a.allocate(2000, W);
        QCOMPARE(shared, y);
        void* fresh = a.allocate(7000, W);  // new to the pool: it joins it
        QVERIFY(!pool.contains(fresh));
        a.release(shared, 2000, W);
        a.release(fresh, 7000, W);
        a.end_capture();
        QCOMPARE(a.pool_bytes(), int64_t{1024 + 2048 + 3008 + 5056 + 7040});
        QCOMPARE(a.pool_free_bytes(), a.pool_bytes());
        // Released (the graph is gone): its blocks are the cache's again.
        a.release_pool();
        QCOMPARE(a.pool_bytes(), int64_t{0});
        std::set<void*> handed;
        std::vector<std::pair<void*, int64_t>> back;
        for (int64_t bytes : {1000, 1000, 2000, 2000, 3000, 3000, 5000, 5000, 5000}) {  // every cached block
            back.emplace_back(a.allocate(bytes, W), bytes);
            handed.insert(back.back().first);
        }
        for (void* p : pool) QVERIFY(handed.contains(p));
        for (auto& [p, bytes] : back) a.release(p, bytes, W);
    }

    void a_replay_reports_the_captured_peaks() {
        Allocator a;
        constexpr auto A = MemCategory::Activations;
        void* p = a.allocate(4096, A);
        a.release(p, 4096, A);
        a.reset_peaks();
        QCOMPARE(a.stats().peak_of(A), int64_t{0});
        MemoryStats captured;
        captured.peak[static_cast<int>(A)] = 4096;
        captured.total_peak = 4096;
        a.raise_peaks(captured);
        QCOMPARE(a.stats().peak_of(A), int64_t{4096});
        QCOMPARE(a.stats().total_peak, int64_t{4096});
        QCOMPARE(a.stats().of(A), int64_t{0});
        captured.peak[static_cast<int>(A)] = 1024;  // never lowers a peak
        a.raise_peaks(captured);
        QCOMPARE(a.stats().peak_of(A), int64_t{4096});
    }

    void graph_plan_warms_up_captures_and_replays_per_count() {
        using A = GraphPlan::Action;
        GraphPlan off(false, 2);
        for (int i = 0; i < 5; ++i) QVERIFY(off.next(4).action == A::Eager);
        QVERIFY(off.graphs().empty());
        QVERIFY_THROWS_EXCEPTION(mwb::Error, GraphPlan(true, 0));  // at least one eager step

        // A batch ramp: 2, 2, 2, 4, 4, 4, 4, 2 micro-batches; two warm-up steps per count.
        GraphPlan p(true, 2, /*max_graphs=*/2);
        const auto step = [&](int64_t k) { return p.next(k); };
        QVERIFY(step(2).action == A::Eager);
        QVERIFY(step(2).action == A::Eager);
        GraphPlan::Decision d = step(2);
        QVERIFY(d.action == A::Capture);
        QCOMPARE(d.evict, int64_t{-1});
        QVERIFY(step(4).action == A::Eager);  // a new count warms up again
        QVERIFY(step(4).action == A::Eager);
        QVERIFY(step(4).action == A::Capture);
        QVERIFY(step(4).action == A::Replay);
        QVERIFY(step(2).action == A::Replay);  // the older graph is kept
        QCOMPARE(p.graphs(), (std::vector<int64_t>{4, 2}));  // least recently used first
        // A third count, past the two kept: warms up, then its capture evicts the least recent (4).
        QVERIFY(step(8).action == A::Eager);
        QVERIFY(step(8).action == A::Eager);
        d = step(8);
        QVERIFY(d.action == A::Capture);
        QCOMPARE(d.evict, int64_t{4});
        QCOMPARE(p.graphs(), (std::vector<int64_t>{2, 8}));
        // The evicted count has had its warm-up: it is captured again at once (evicting 2 now).
        d = step(4);
        QVERIFY(d.action == A::Capture);
        QCOMPARE(d.evict, int64_t{2});
        QVERIFY(step(8).action == A::Replay);
        QVERIFY(step(4).action == A::Replay);
    }

    void step_graph_on_the_cpu_runs_every_step() {
        Allocator a;
        OpContext ctx;  // the CPU
        StepGraph g(ctx, a, /*enabled=*/true, /*warmup_steps=*/1, /*micro_batches=*/2, /*input_elements=*/8);
        QVERIFY(!g.enabled());
        int calls = 0;
        for (int i = 0; i < 3; ++i) {
            g.prepare(i % 2 + 1);
            QVERIFY(!g.graphed());
            g.run([&] { ++calls; });
        }
        QCOMPARE(calls, 3);
        QCOMPARE(g.steps(), int64_t{3});
        QCOMPARE(g.replays(), int64_t{0});
        QCOMPARE(a.stats().total_current, int64_t{0});  // no input buffer on the CPU
    }
};

MWB_TEST_SUITE_APPLESS(test_backend_memory, TestMemory)
}  // namespace test_backend_memory
#include "test_memory.moc"
