#include "cublas_loader.h"

#include "dynamic_library.h"
#include "mwb/kernels/error.h"

namespace mwb::cuda {

namespace {

struct Loaded {
    CublasApi api;
    std::string error;  // empty when every entry point resolved
};

const Loaded& loaded() {
    static const Loaded l = [] {
        Loaded r;
        // libcublas needs libcublasLt (its DT_NEEDED): open Lt first, so a folder found beside libcudart
        // serves both.
        DynamicLibrary lt = open_cuda_library(fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR), "MWB_CUBLASLT_LIBRARY");
#define MWB_CUBLAS_RESOLVE(fn) lt.resolve(r.api.fn, #fn);
        MWB_CUBLASLT_ENTRY_POINTS(MWB_CUBLAS_RESOLVE)
#undef MWB_CUBLAS_RESOLVE
        DynamicLibrary blas = open_cuda_library(fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR), "MWB_CUBLAS_LIBRARY");
#define MWB_CUBLAS_RESOLVE(fn) blas.resolve(r.api.fn, #fn);
        MWB_CUBLAS_ENTRY_POINTS(MWB_CUBLAS_RESOLVE)
#undef MWB_CUBLAS_RESOLVE
        blas.resolve(r.api.cublasGemmEx, "cublasGemmEx");
        r.error = !lt.error.empty() ? lt.error : blas.error;
        return r;
    }();
    return l;
}

}  // namespace

const CublasApi& cublas() {
    const Loaded& l = loaded();
    if (!l.error.empty()) [[unlikely]]
        MWB_FAIL("cuBLAS could not be loaded: {}", l.error);
    return l.api;
}

}  // namespace mwb::cuda
