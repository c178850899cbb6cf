#pragma once
// The CPU's GEMM: how one product is cut into single-threaded BLAS calls (split_sgemm), and the BLAS
// call itself (blas_sgemm). matmul and the linear ops use split_sgemm with blas_sgemm;
// benchmarks/bench_blas.cpp passes other libraries' sgemm to the same split to compare them.
#include <cstdint>

namespace mwb::cpu {

/// C = alpha·op(A)·op(B) + beta·C, row-major, with cblas's arguments; op(A) is m×k, op(B) k×n.
using SgemmFn = void (*)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                         int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// The build's BLAS (OpenBLAS; with MWB_ONEDNN_GEMM oneDNN's sgemm for the shapes where it was faster), one call;
/// single-threaded when called inside a parallel region or with omp_get_max_threads() == 1.
void blas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// The same product cut into chunks by its shape and the machine's core count (never the thread count), each chunk one
/// single-threaded `sgemm` call on an OpenMP thread: the result is the same bits for any thread count.
void split_sgemm(SgemmFn sgemm, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace mwb::cpu
