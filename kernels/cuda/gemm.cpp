// GEMMs on cuBLAS (row-major views mapped onto column-major calls) and the linear layers, whose bias,
// GELU, GELU derivative and bias gradients run in cuBLASLt epilogues where they apply (plans cached per
// shape: gemm_lt.cpp), else as the unfused GEMM + kernel sequence. fp32 inputs compute in fp32 (TF32
// only when allowed and not deterministic), bf16 inputs accumulate in fp32.
#include "cuda_ops.h"
#include "gemm_lt.h"
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

/// A row-major GEMM D (M, N) = op(A)·op(B) + beta·D through cuBLASLt with an epilogue (its plan cached
/// per key, gemm_lt.cpp). `bias` (N floats, or M for BGradB) is read or written by the epilogue, `aux`
/// (M, N) is the GELU epilogues' matrix. False, with nothing queued, when the epilogue cannot apply:
/// the caller then runs the unfused sequence.
bool try_gemm_lt(cudaStream_t stream, const TensorView& d, const TensorView& a, const TensorView& b, bool trans_a,
                 bool trans_b, float beta, LtEpilogue epilogue, void* bias, const TensorView& aux) {
    const int64_t M = trans_a ? a.cols() : a.rows(), K = trans_a ? a.rows() : a.cols();
    const int64_t N = trans_b ? b.rows() : b.cols();
    if (M == 0 || N == 0 || K == 0 || a.dtype != b.dtype) return false;
    // The epilogues read the bias with vector loads, and the aux matrix's leading dimension (N) must be
    // a multiple of 8 (cuBLASLt's rule); aux has D's dtype (the default cuBLASLt assumes).
    if (lt_reads_bias(epilogue) && lt_alignment(reinterpret_cast<uintptr_t>(bias)) < 16) return false;
    if (lt_uses_aux(epilogue) &&
        (aux.dtype != d.dtype || N % 8 != 0 || lt_alignment(reinterpret_cast<uintptr_t>(aux.data)) < 16))
        return false;
    // Column-major: Dᵀ (N, M) = op(B)ᵀ · op(A)ᵀ, so cuBLASLt's A is our b and its B our a.
    LtKey key;
    key.m = N;
    key.n = M;
    key.k = K;
    key.trans_a = trans_b;
    key.trans_b = trans_a;
    key.type_a = blas_type("cuBLASLt GEMM", b);
    key.type_b = blas_type("cuBLASLt GEMM", a);
    key.type_d = blas_type("cuBLASLt GEMM", d);
    key.type_bias = CUDA_R_32F;
    key.compute = compute_type(a, b);
    key.epilogue = epilogue;
    key.align_a = lt_alignment(reinterpret_cast<uintptr_t>(b.data));
    key.align_b = lt_alignment(reinterpret_cast<uintptr_t>(a.data));
    key.align_d = lt_alignment(reinterpret_cast<uintptr_t>(d.data));
    key.align_bias = lt_alignment(reinterpret_cast<uintptr_t>(bias));
    return lt_matmul(stream, key, LtOperands{b.data, a.data, d.data, bias, aux.data}, 1.0f, beta);
}

bool gemm_lt_rowmajor(cudaStream_t stream, const TensorView& d, const TensorView& a, const TensorView& b, bool trans_a,
                      bool trans_b, float beta, LtEpilogue epilogue, void* bias = nullptr,
                      const TensorView& aux = {}) {
    const bool fused = try_gemm_lt(stream, d, a, b, trans_a, trans_b, beta, epilogue, bias, aux);
    lt_count(fused);
    return fused;
}

/// The GEMM operand the context asks for: with gemm_inputs = BF16, an f32 tensor's bf16 copy in
/// scratch `slot` (same shape), else the tensor itself.
TensorView gemm_input(const OpContext& ctx, const TensorView& t, int slot) {
    if (ctx.gemm_inputs != DType::BF16 || t.dtype != DType::F32 || t.empty()) return t;
    TensorView v = t;
    v.dtype = DType::BF16;
    v.data = scratch(slot, t.numel() * 2, stream_of(ctx));
    convert_to_bf16(stream_of(ctx), v.data, static_cast<const float*>(t.data), t.numel());
    return v;
}

/// y = x·wᵀ + bias on GEMM operands already converted: cuBLASLt's BIAS epilogue, else GEMM + bias kernel.
void linear_forward_operands(cudaStream_t s, const TensorView& y, const TensorView& x, const TensorView& w,
                             const TensorView& bias) {
    if (!bias.empty() && bias.dtype == DType::F32 &&
        gemm_lt_rowmajor(s, y, x, w, false, true, 0.0f, LtEpilogue::Bias, bias.data))
        return;
    gemm_rowmajor(s, "linear_forward", y, x, w, false, true, 1.0f, 0.0f);
    if (!bias.empty()) {
        require("linear_forward", "y (with a bias, when cuBLASLt cannot fuse it)", y, DType::F32);
        add_bias_rows(s, static_cast<float*>(y.data), static_cast<const float*>(bias.data), y.rows(), y.cols());
    }
}

/// dw += dyᵀ·x and dbias += Σ_rows dy: one GEMM with cuBLASLt's BGRADB epilogue (the bias gradient of
/// its B operand, dy, into scratch, then added), else the GEMM and a column-sum kernel.
void weight_gradients(const OpContext& ctx, const TensorView& dw, const TensorView& dbias, const TensorView& dy,
                      const TensorView& x) {
    const cudaStream_t s = stream_of(ctx);
    const TensorView dy_op = gemm_input(ctx, dy, 2), x_op = gemm_input(ctx, x, 3);
    if (!dbias.empty() && dbias.dtype == DType::F32 && dw.dtype == DType::F32) {
        float* partial = lt_bias_gradient_scratch(s, dbias.numel());
        if (gemm_lt_rowmajor(s, dw, dy_op, x_op, true, false, 1.0f, LtEpilogue::BGradB, partial)) {
            column_sums_add(s, static_cast<float*>(dbias.data), partial, 1, dbias.numel());
            return;
        }
    }
    gemm_rowmajor(s, "linear_backward (dw)", dw, dy_op, x_op, true, false, 1.0f, 1.0f);
    if (!dbias.empty()) {
        require("linear_backward", "dy (for dbias)", dy, DType::F32);
        column_sums_add(s, static_cast<float*>(dbias.data), static_cast<const float*>(dy.data), dy.rows(), dy.cols());
    }
}

}  // namespace

void matmul(OpContext& ctx, TensorView c, TensorView a, TensorView b, bool trans_a, bool trans_b, float alpha,
            float beta) {
    gemm_rowmajor(stream_of(ctx), "matmul", c, gemm_input(ctx, a, 2), gemm_input(ctx, b, 3), trans_a, trans_b, alpha,
                  beta);
}

void linear_forward(OpContext& ctx, TensorView y, TensorView x_in, TensorView w_in, TensorView bias) {
    linear_forward_operands(stream_of(ctx), y, gemm_input(ctx, x_in, 2), gemm_input(ctx, w_in, 3), bias);
}

void linear_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dbias, TensorView dy, TensorView x,
                     TensorView w, bool accumulate_dx) {
    // With bf16 GEMM inputs, dy is converted once per GEMM (slot 2), w and x in turn (slot 3): the
    // conversions are queued after the GEMM that read the slot before.
    if (!dx.empty())
        gemm_rowmajor(stream_of(ctx), "linear_backward (dx)", dx, gemm_input(ctx, dy, 2), gemm_input(ctx, w, 3), false,
                      false, 1.0f, accumulate_dx ? 1.0f : 0.0f);
    if (!dw.empty()) {
        weight_gradients(ctx, dw, dbias, dy, x);
    } else if (!dbias.empty()) {
        require("linear_backward", "dy (for dbias)", dy, DType::F32);
        column_sums_add(stream_of(ctx), static_cast<float*>(dbias.data), static_cast<const float*>(dy.data), dy.rows(),
                        dy.cols());
    }
}

void linear_gelu_forward(OpContext& ctx, TensorView act, TensorView pre, TensorView x_in, TensorView w_in,
                         TensorView bias, DType storage) {
    const cudaStream_t s = stream_of(ctx);
    const TensorView x = gemm_input(ctx, x_in, 2), w = gemm_input(ctx, w_in, 3);
    const bool fuse_bias = !bias.empty() && bias.dtype == DType::F32;
    // act = gelu(x·wᵀ + b) with the pre-activation as the aux output: one pass over (N, out).
    if (bias.empty() || fuse_bias) {
        const LtEpilogue e = bias.empty() ? LtEpilogue::GeluAux : LtEpilogue::GeluAuxBias;
        if (gemm_lt_rowmajor(s, act, x, w, false, true, 0.0f, e, bias.data, pre)) {
            round_to(ctx, pre, storage);
            return;
        }
    }
    linear_forward_operands(s, pre, x, w, bias);
    round_to(ctx, pre, storage);
    gelu_forward(ctx, act, pre);
}

void linear_backward_gelu(OpContext& ctx, TensorView dpre, TensorView dpre_bias, TensorView dw, TensorView dbias,
                          TensorView dy, TensorView x, TensorView w, TensorView pre, DType storage) {
    const cudaStream_t s = stream_of(ctx);
    const TensorView dy_op = gemm_input(ctx, dy, 2), w_op = gemm_input(ctx, w, 3);
    // dpre = (dy·w)·gelu'(pre) in the GEMM's epilogue, with fc1's bias gradient (DGELU_BGRAD) into scratch.
    bool fused = false;
    if (dpre_bias.empty()) {
        fused = gemm_lt_rowmajor(s, dpre, dy_op, w_op, false, false, 0.0f, LtEpilogue::DGelu, nullptr, pre);
    } else if (dpre.dtype == DType::F32) {
        float* partial = lt_bias_gradient_scratch(s, dpre_bias.numel());
        fused = gemm_lt_rowmajor(s, dpre, dy_op, w_op, false, false, 0.0f, LtEpilogue::DGeluBGrad, partial, pre);
        if (fused) column_sums_add(s, static_cast<float*>(dpre_bias.data), partial, 1, dpre_bias.numel());
    }
    if (fused) {
        round_to(ctx, dpre, storage);
    } else {
        gemm_rowmajor(s, "linear_backward_gelu (dx)", dpre, dy_op, w_op, false, false, 1.0f, 0.0f);
        round_to(ctx, dpre, storage);
        gelu_backward(ctx, dpre, dpre, pre);
        round_to(ctx, dpre, storage);
        if (!dpre_bias.empty())
            column_sums_add(s, static_cast<float*>(dpre_bias.data), static_cast<const float*>(dpre.data), dpre.rows(),
                            dpre.cols());
    }
    weight_gradients(ctx, dw, dbias, dy, x);
}

}  // namespace mwb::cuda
