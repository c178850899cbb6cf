// GEMMs on cuBLAS (row-major views mapped onto column-major calls) and the linear layer, whose
// forward fuses the bias into the GEMM through a cuBLASLt epilogue. fp32 inputs compute in fp32
// (TF32 only when allowed and not deterministic), bf16 inputs accumulate in fp32.
#include "cuda_ops.h"
#include "runtime.h"

#include <algorithm>
#include <cstdint>

namespace mwb::cuda {

namespace {

cudaDataType_t blas_type(const char* op, const TensorView& t) {
    switch (t.dtype) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    case DType::I32:
    case DType::F64: break;
    }
    MWB_FAIL("{}: GEMMs take f32, bf16 or f16 tensors, got {}", op, t.describe());
}

cublasComputeType_t compute_type(const TensorView& a, const TensorView& b) {
    const bool f32 = a.dtype == DType::F32 && b.dtype == DType::F32;
    return f32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/// C (M, N) = alpha·op(A)·op(B) + beta·C, row-major: the column-major call computes Cᵀ = op(B)ᵀ·op(A)ᵀ.
void gemm_rowmajor(cudaStream_t stream, const char* op, TensorView c, TensorView a, TensorView b, bool trans_a,
                   bool trans_b, float alpha, float beta) {
    const int64_t M = trans_a ? a.cols() : a.rows(), K = trans_a ? a.rows() : a.cols();
    const int64_t N = trans_b ? b.rows() : b.cols();  // shapes: checked by the dispatcher
    // After gemm_input's bf16 conversions both operands must share a dtype (cuBLAS's limit).
    MWB_CHECK(a.dtype == b.dtype, "{}: a={} and b={} must have one dtype", op, a.describe(), b.describe());
    if (M == 0 || N == 0) return;
    // cuBLAS wants leading dimensions >= 1 even when K == 0 (then C = beta·C, as on the CPU).
    const auto ld = [](int64_t cols) { return static_cast<int>(std::max<int64_t>(cols, 1)); };
    MWB_CUBLAS_CHECK(cublasGemmEx(cublas_handle(stream), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
                                  static_cast<int>(K), &alpha, b.data, blas_type(op, b), ld(b.cols()), a.data,
                                  blas_type(op, a), ld(a.cols()), &beta, c.data, blas_type(op, c), ld(N),
                                  compute_type(a, b), CUBLAS_GEMM_DEFAULT));
}

constexpr int64_t kLtWorkspace = 32 << 20;

/// The largest power of two (up to 256) that divides the address.
uint32_t alignment(const void* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    uint32_t al = 256;
    while (al > 1 && a % al != 0) al >>= 1;
    return al;
}

/// y (N, out) = x·wᵀ + bias through cuBLASLt's BIAS epilogue; false when no algorithm fits (the
/// caller then falls back to GEMM + bias kernel).
bool linear_forward_lt(cudaStream_t stream, TensorView y, TensorView x, TensorView w, TensorView bias) {
    const int64_t N = x.rows(), in = x.cols(), out = w.rows();
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t lw = nullptr, lx = nullptr, ly = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    bool ok = false;
    const cudaDataType_t tin = blas_type("linear_forward", x), tout = blas_type("linear_forward", y);
    do {
        // Column-major: Yᵀ (out, N) = op_T(W as col-major (in, out)) · Xᵀ (in, N).
        if (cublasLtMatmulDescCreate(&desc, compute_type(x, w), CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) break;
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        if (cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)) !=
            CUBLAS_STATUS_SUCCESS)
            break;
        const void* bias_ptr = bias.data;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr));
        const cudaDataType_t tbias = blas_type("linear_forward", bias);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &tbias, sizeof(tbias));
        if (cublasLtMatrixLayoutCreate(&lw, tin, static_cast<uint64_t>(in), static_cast<uint64_t>(out), in) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatrixLayoutCreate(&lx, tin, static_cast<uint64_t>(in), static_cast<uint64_t>(N), in) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatrixLayoutCreate(&ly, tout, static_cast<uint64_t>(out), static_cast<uint64_t>(N), out) !=
                CUBLAS_STATUS_SUCCESS)
            break;
        if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) break;
        const uint64_t ws = kLtWorkspace;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
        // Parameters are slices of one arena: tell the heuristic how aligned they really are.
        const uint32_t align_w = alignment(w.data), align_x = alignment(x.data), align_y = alignment(y.data);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_w, sizeof(align_w));
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_x, sizeof(align_x));
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_y, sizeof(align_y));
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_y, sizeof(align_y));
        cublasLtMatmulHeuristicResult_t heur{};
        int found = 0;
        if (cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), desc, lw, lx, ly, ly, pref, 1, &heur, &found) !=
                CUBLAS_STATUS_SUCCESS ||
            found == 0)
            break;
        const float alpha = 1.0f, beta = 0.0f;
        void* workspace = scratch(1, kLtWorkspace);
        ok = cublasLtMatmul(cublaslt_handle(), desc, &alpha, w.data, lw, x.data, lx, &beta, y.data, ly, y.data, ly,
                            &heur.algo, workspace, kLtWorkspace, stream) == CUBLAS_STATUS_SUCCESS;
    } while (false);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ly) cublasLtMatrixLayoutDestroy(ly);
    if (lx) cublasLtMatrixLayoutDestroy(lx);
    if (lw) cublasLtMatrixLayoutDestroy(lw);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return ok;
}

/// The GEMM operand the context asks for: with gemm_inputs = BF16, an f32 tensor's bf16 copy in
/// scratch `slot` (same shape), else the tensor itself.
TensorView gemm_input(const OpContext& ctx, const TensorView& t, int slot) {
    if (ctx.gemm_inputs != DType::BF16 || t.dtype != DType::F32 || t.empty()) return t;
    TensorView v = t;
    v.dtype = DType::BF16;
    v.data = scratch(slot, t.numel() * 2);
    convert_to_bf16(stream_of(ctx), v.data, static_cast<const float*>(t.data), t.numel());
    return v;
}

}  // namespace

void matmul(OpContext& ctx, TensorView c, TensorView a, TensorView b, bool trans_a, bool trans_b, float alpha,
            float beta) {
    gemm_rowmajor(stream_of(ctx), "matmul", c, gemm_input(ctx, a, 2), gemm_input(ctx, b, 3), trans_a, trans_b, alpha,
                  beta);
}

void linear_forward(OpContext& ctx, TensorView y, TensorView x_in, TensorView w_in, TensorView bias) {
    const TensorView x = gemm_input(ctx, x_in, 2), w = gemm_input(ctx, w_in, 3);
    if (!bias.empty()) {
        // The epilogue reads the bias with vector loads: only fuse a 16-byte-aligned one.
        if (x.rows() > 0 && alignment(bias.data) >= 16 && linear_forward_lt(stream_of(ctx), y, x, w, bias)) return;
    }
    gemm_rowmajor(stream_of(ctx), "linear_forward", y, x, w, false, true, 1.0f, 0.0f);
    if (!bias.empty()) {
        require("linear_forward", "y (with a bias, when cuBLASLt cannot fuse it)", y, DType::F32);
        add_bias_rows(stream_of(ctx), static_cast<float*>(y.data), static_cast<const float*>(bias.data), y.rows(),
                      y.cols());
    }
}

void linear_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dbias, TensorView dy, TensorView x,
                     TensorView w, bool accumulate_dx) {
    const cudaStream_t s = stream_of(ctx);
    // With bf16 GEMM inputs, dy is converted once per GEMM (slot 2), w and x in turn (slot 3): the
    // conversions are queued after the GEMM that read the slot before.
    if (!dx.empty())
        gemm_rowmajor(s, "linear_backward (dx)", dx, gemm_input(ctx, dy, 2), gemm_input(ctx, w, 3), false, false, 1.0f,
                      accumulate_dx ? 1.0f : 0.0f);
    if (!dw.empty())
        gemm_rowmajor(s, "linear_backward (dw)", dw, gemm_input(ctx, dy, 2), gemm_input(ctx, x, 3), true, false, 1.0f,
                      1.0f);
    if (!dbias.empty()) {
        require("linear_backward", "dy (for dbias)", dy, DType::F32);
        column_sums_add(s, static_cast<float*>(dbias.data), static_cast<const float*>(dy.data), dy.rows(), dy.cols());
    }
}

}  // namespace mwb::cuda
