// The backend's caching Allocator on a GPU: device memory counted per category exactly as on the
// CPU (current, peak, reserved), freed blocks reused without a new cudaMalloc (reserved stays put),
// the memory is usable by the ops, and cudaMemGetInfo totals are reported. Exits 77 without a GPU.
#include "backend/core/memory.h"

#include "cuda_op_checks.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/ops.h"

#include <QtTest>

#include <cstdio>

using namespace mwb;

class TestCudaAllocator : public QObject {
    Q_OBJECT
private slots:
    void counts_like_the_cpu_allocator() {
        Allocator cpu(Device::CPU), gpu(Device::CUDA);
        for (Allocator* a : {&cpu, &gpu}) {
            {
                Buffer w(*a, MemCategory::Weights, 1000);
                Buffer g(*a, MemCategory::Gradients, 1000);
                Buffer act(*a, MemCategory::Activations, 5000, DType::BF16);
                QCOMPARE(a->stats().of(MemCategory::Weights), 4000);
                QCOMPARE(a->stats().of(MemCategory::Activations), 10000);
                QCOMPARE(a->stats().total_current, 18000);
            }
            const MemoryStats s = a->stats();
            QCOMPARE(s.total_current, 0);
            QCOMPARE(s.total_peak, 18000);
            QCOMPARE(s.peak_of(MemCategory::Gradients), 4000);
        }
        QCOMPARE(gpu.stats().reserved, cpu.stats().reserved);
    }

    void reuses_blocks_without_new_device_memory() {
        Allocator gpu(Device::CUDA);
        { Buffer a(gpu, MemCategory::Activations, 1 << 20); }
        const int64_t reserved = gpu.stats().reserved;
        for (int step = 0; step < 10; ++step) {
            Buffer a(gpu, MemCategory::Activations, 1 << 20);
            QCOMPARE(gpu.stats().reserved, reserved);
        }
        gpu.empty_cache();
        QCOMPARE(gpu.stats().reserved, 0);
    }

    void memory_is_usable_by_ops_and_totals_are_reported() {
        Allocator gpu(Device::CUDA);
        Buffer b(gpu, MemCategory::Workspace, 1000);
        QCOMPARE(b.view().device, Device::CUDA);
        OpContext ctx{Device::CUDA, nullptr};
        ops::fill(ctx, b.view(), 2.0f);
        QCOMPARE(ops::sum_squares(ctx, b.view()), 4000.0);
        const DeviceMemoryTotals t = gpu.device_totals();
        QVERIFY(t.total_bytes > 0);
        QVERIFY(t.free_bytes > 0 && t.free_bytes <= t.total_bytes);
        QCOMPARE(Allocator(Device::CPU).device_totals().total_bytes, 0);
    }
};

int main(int argc, char** argv) {
    const std::string reason = mwb::test::cuda_unavailable_reason();
    if (!reason.empty()) {
        std::printf("no CUDA device: %s\n", reason.c_str());
        return 77;
    }
    QCoreApplication app(argc, argv);
    TestCudaAllocator t;
    return QTest::qExec(&t, argc, argv);
}

#include "test_cuda_allocator.moc"
