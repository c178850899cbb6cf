#pragma once
// cuBLAS and cuBLASLt through entry points resolved when the first GEMM runs on a GPU (dynamic_library.h
// says why: a CPU run, every test process and every mwb-train rank among them, no longer pays
// cuBLASLt's ~0.45 s of static initialisation). Call them as cublas().cublasLtMatmul(...): the members
// carry the functions' own names (cublas_v2.h's macros map cublasCreate to cublasCreate_v2, as for a
// direct call).
#include <cublasLt.h>
#include <cublas_v2.h>

namespace mwb::cuda {

// The entry points called, from libcublas (first list, and cublasGemmEx) and libcublasLt (second list).
#define MWB_CUBLAS_ENTRY_POINTS(X) \
    X(cublasCreate_v2)             \
    X(cublasSetStream_v2)          \
    X(cublasSetWorkspace_v2)       \
    X(cublasSetAtomicsMode)        \
    X(cublasGetStatusString)
#define MWB_CUBLASLT_ENTRY_POINTS(X)        \
    X(cublasLtCreate)                       \
    X(cublasLtMatmul)                       \
    X(cublasLtMatmulDescCreate)             \
    X(cublasLtMatmulDescDestroy)            \
    X(cublasLtMatmulDescSetAttribute)       \
    X(cublasLtMatrixLayoutCreate)           \
    X(cublasLtMatrixLayoutDestroy)          \
    X(cublasLtMatmulPreferenceCreate)       \
    X(cublasLtMatmulPreferenceDestroy)      \
    X(cublasLtMatmulPreferenceSetAttribute) \
    X(cublasLtMatmulAlgoGetHeuristic)

struct CublasApi {
#define MWB_CUBLAS_MEMBER(fn) decltype(&::fn) fn = nullptr;
    MWB_CUBLAS_ENTRY_POINTS(MWB_CUBLAS_MEMBER)
    MWB_CUBLASLT_ENTRY_POINTS(MWB_CUBLAS_MEMBER)
#undef MWB_CUBLAS_MEMBER
    // Named apart: C++ sees two cublasGemmEx (an inline overload takes a cudaDataType compute type).
    cublasStatus_t (*cublasGemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                   const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                   cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

/// The loaded entry points (libcublas.so.N and libcublasLt.so.N of the headers' major version, opened on
/// first use, or from MWB_CUBLAS_LIBRARY / MWB_CUBLASLT_LIBRARY); throws Error naming the library and
/// what is missing when they cannot be loaded.
const CublasApi& cublas();

}  // namespace mwb::cuda
