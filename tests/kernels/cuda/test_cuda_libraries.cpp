// cuBLAS and cuBLASLt are loaded when the first GEMM needs them, never at process start (kernels/cuda/
// dynamic_library.h): a CPU process, every mwb-train rank of the multi-rank tests among them, does not
// pay cuBLASLt's static initialisation. Checked on this process's own memory map: no cuBLAS library is
// mapped after CPU ops ran, both are after cublas() resolved every entry point. Needs no GPU (the
// libraries load without a driver); exit 77 when the toolkit's libraries cannot be loaded here.
#include "cublas_loader.h"
#include "dynamic_library.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/ops.h"

#include "support/skip.h"

#include <QtTest>

#include <cstdlib>
#include <fstream>
#include <string>

namespace {

/// Whether a file whose name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);)
        if (line.find(name) != std::string::npos) return true;
    return false;
}

}  // namespace

class TestCudaLibraries : public QObject {
    Q_OBJECT
private slots:
    void cpu_ops_leave_cublas_unloaded_and_the_first_use_loads_it() {
        // A CPU op through the dispatcher that also holds the CUDA ops.
        float a[4] = {1, 2, 3, 4}, b[4] = {4, 3, 2, 1}, out[4] = {};
        mwb::OpContext ctx;
        mwb::ops::add(ctx, mwb::view_f32(out, {4}), mwb::view_f32(a, {4}), mwb::view_f32(b, {4}));
        QCOMPARE(out[3], 5.0f);
        QVERIFY2(!mapped("libcublasLt.so") && !mapped("libcublas.so"),
                 "a cuBLAS library is mapped before any GEMM ran on a GPU: it was linked, not loaded on first use");

        const mwb::cuda::CublasApi* api = nullptr;
        try {
            api = &mwb::cuda::cublas();
        } catch (const std::exception& e) {
            MWB_SKIP(qPrintable(QString("cuBLAS cannot be loaded here: %1").arg(e.what())));
        }
        QVERIFY(mapped("libcublasLt.so") && mapped("libcublas.so"));
#define MWB_CHECK_RESOLVED(fn) QVERIFY2(api->fn != nullptr, #fn " did not resolve");
        MWB_CUBLAS_ENTRY_POINTS(MWB_CHECK_RESOLVED)
        MWB_CUBLASLT_ENTRY_POINTS(MWB_CHECK_RESOLVED)
#undef MWB_CHECK_RESOLVED
        QVERIFY(api->cublasGemmEx != nullptr);
        // A call that needs no GPU: the status text of the real library.
        QCOMPARE(QString(api->cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED)),
                 QString("the library was not initialized"));
    }

    void a_library_that_cannot_be_found_is_named_with_the_variable_to_set() {
        qputenv("MWB_TEST_MISSING_LIBRARY", "/nonexistent/libcublasLt.so.0");
        const mwb::cuda::DynamicLibrary lib = mwb::cuda::open_cuda_library("libcublasLt.so.0", "MWB_TEST_MISSING_LIBRARY");
        QVERIFY(lib.handle == nullptr);
        QVERIFY2(lib.error.find("libcublasLt.so.0 not found") != std::string::npos &&
                     lib.error.find("/nonexistent/libcublasLt.so.0") != std::string::npos &&
                     lib.error.find("set MWB_TEST_MISSING_LIBRARY to its path") != std::string::npos,
                 lib.error.c_str());
        void (*fn)() = nullptr;
        mwb::cuda::DynamicLibrary copy = lib;
        copy.resolve(fn, "cublasLtCreate");
        QVERIFY(fn == nullptr);
        QCOMPARE(copy.error, lib.error);  // the first failure is kept
    }

    void a_missing_library_names_every_place_tried() {
        // No override: the loader's search (its LD_LIBRARY_PATH said), then the folder of libcudart.
        qunsetenv("MWB_TEST_MISSING_LIBRARY");
        const std::string soname = "libmwb_no_such_library.so.1";
        const mwb::cuda::DynamicLibrary lib = mwb::cuda::open_cuda_library(soname, "MWB_TEST_MISSING_LIBRARY");
        QVERIFY(lib.handle == nullptr);
        const std::string& e = lib.error;
        QVERIFY2(e.rfind(soname + " not found (" + soname + " on the loader's path (LD_LIBRARY_PATH=", 0) == 0, e.c_str());
        QVERIFY2(e.find("/" + soname + " (beside libcudart): ") != std::string::npos, e.c_str());
        QVERIFY2(e.find("set MWB_TEST_MISSING_LIBRARY to its path") != std::string::npos, e.c_str());
    }

    void a_failed_device_allocation_says_why() {
        // "Out of GPU memory" only when CUDA says so: here (no GPU) the driver's error instead; on a
        // GPU, 1 EiB is out of memory.
        const auto message = [](int64_t bytes) -> std::string {
            try {
                mwb::device::cuda_free(mwb::device::cuda_malloc(bytes));
            } catch (const std::exception& e) {
                return e.what();
            }
            return {};
        };
        const std::string small = message(1 << 20);
        if (small.empty()) {
            const std::string huge = message(int64_t{1} << 60);
            QVERIFY2(huge.find("out of GPU memory allocating 1152921504606846976 bytes") != std::string::npos,
                     huge.c_str());
        } else {
            QVERIFY2(small.find("out of GPU memory") == std::string::npos &&
                         small.rfind("cudaMalloc of 1048576 bytes failed: ", 0) == 0,
                     small.c_str());
        }
    }

    void a_symbol_the_library_lacks_is_named() {
        mwb::cuda::DynamicLibrary lib = mwb::cuda::open_cuda_library("libcudart.so.13", nullptr);
        if (!lib.handle) MWB_SKIP(qPrintable(QString::fromStdString(lib.error)));
        void (*fn)() = nullptr;
        lib.resolve(fn, "cudaNoSuchFunction");
        QVERIFY(fn == nullptr);
        QCOMPARE(QString::fromStdString(lib.error), QString("%1 lacks cudaNoSuchFunction").arg(lib.name.c_str()));
    }
};

MWB_TEST_GUILESS_MAIN(TestCudaLibraries)
#include "test_cuda_libraries.moc"
