// GEMMs on cuBLAS (row-major views mapped onto column-major calls) and the linear layers, whose bias,
// GELU, GELU derivative and bias gradients run in cuBLASLt epilogues where they apply (plans cached per
// shape: gemm_lt.cpp), else as the unfused GEMM + kernel sequence. fp32 inputs compute in fp32 (TF32
// only when allowed and not deterministic), bf16/f16 inputs accumulate in fp32. 16-bit operands and
// results are read and written directly (cublasGemmEx / cuBLASLt with 16-bit A, B, C/D): a 16-bit
// result is rounded once, where the CPU's narrow() rounds (after the bias, before GELU's input is
// stored). Weight gradients accumulate with beta = 1 into the main gradient: fp32, or the f16 arena
// (fp16 runs without accumulate_allreduce_grads_in_fp32: an f16 C with fp32 compute, each element's
// fp32 sum rounded once per call; bias gradients summed in fp32 and added to the widened f16 value).
#include "cuda_ops.h"
#include "gemm_lt.h"
#include "runtime.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace mwb::cuda {

namespace {

static_assert(kLtTypeF32 == CUDA_R_32F, "gemm_lt_key.h's fp32 type");

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
/// A and B share a dtype (gemm_operands'); C is f32 or their 16-bit dtype (cuBLAS's combinations with
/// fp32 compute). A 16-bit C of a product of another dtype (f32, or bf16 operands into the f16
/// gradient arena) is computed in f32 scratch (beta·C widened into it) and rounded once into C.
void gemm_rowmajor(cudaStream_t stream, const char* op, TensorView c, TensorView a, TensorView b, bool trans_a,
                   bool trans_b, float alpha, float beta) {
    const int64_t M = trans_a ? a.cols() : a.rows(), K = trans_a ? a.rows() : a.cols();
    const int64_t N = trans_b ? b.rows() : b.cols();  // shapes: checked by the dispatcher
    MWB_CHECK(a.dtype == b.dtype, "{}: a={} and b={} must have one dtype", op, a.describe(), b.describe());
    if (M == 0 || N == 0) return;
    if (c.dtype != DType::F32 && c.dtype != a.dtype) {
        TensorView staged = c;
        staged.dtype = DType::F32;
        staged.data = scratch(0, M * N * static_cast<int64_t>(sizeof(float)), stream);
        if (beta != 0.0f) convert(stream, DType::F32, staged.data, c.dtype, c.data, M * N);
        gemm_rowmajor(stream, op, staged, a, b, trans_a, trans_b, alpha, beta);
        convert(stream, c.dtype, c.data, DType::F32, staged.data, M * N);
        return;
    }
    // cuBLAS wants leading dimensions >= 1 even when K == 0 (then C = beta·C, as on the CPU).
    const auto ld = [](int64_t cols) { return static_cast<int>(std::max<int64_t>(cols, 1)); };
    MWB_CUBLAS_CHECK(cublas().cublasGemmEx(cublas_handle(stream), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
                                  static_cast<int>(K), &alpha, b.data, blas_type(op, b), ld(b.cols()), a.data,
                                  blas_type(op, a), ld(a.cols()), &beta, c.data, blas_type(op, c), ld(N),
                                  compute_type(a, b), CUBLAS_GEMM_DEFAULT));
}

/// A row-major GEMM D (M, N) = op(A)·op(B) + beta·D through cuBLASLt with an epilogue (its plan cached
/// per key, gemm_lt.cpp). `bias` (N elements, or M for BGradB) is read or written by the epilogue: of
/// D's dtype when read, f32 scratch when written (a bias gradient), `aux` (M, N) is the GELU
/// epilogues' matrix. False, with nothing queued, when the epilogue cannot apply: the caller then
/// runs the unfused sequence.
bool try_gemm_lt(cudaStream_t stream, const TensorView& d, const TensorView& a, const TensorView& b, bool trans_a,
                 bool trans_b, float beta, LtEpilogue epilogue, void* bias, const TensorView& aux) {
    const int64_t M = trans_a ? a.cols() : a.rows(), K = trans_a ? a.rows() : a.cols();
    const int64_t N = trans_b ? b.rows() : b.cols();
    if (M == 0 || N == 0 || K == 0 || a.dtype != b.dtype) return false;
    // The epilogues read the bias with vector loads, and the aux matrix's leading dimension (N) must be
    // a multiple of 8 (cuBLASLt's rule); aux has D's dtype (the default cuBLASLt assumes), and so has
    // the bias (cublasLt.h: "the same type as the elements of the output matrix"). A bias gradient is
    // asked for in fp32 (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), also beside an f16 D (the f16 gradient
    // arena's dw), so that it is added to the arena with one rounding; where cuBLASLt has no algorithm
    // for that pair, the key is remembered unusable and the unfused path runs.
    if (lt_reads_bias(epilogue) && lt_alignment(reinterpret_cast<uintptr_t>(bias)) < 16) return false;
    if (d.dtype != DType::F32 && a.dtype != d.dtype) return false;
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
    key.type_bias = lt_bias_type(epilogue, blas_type("cuBLASLt GEMM", d));
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

/// dbias += Σ_rows dy, dy f32 or 16-bit (widened); dbias f32 or f16 (the f16 gradient arena: the fp32
/// sum added to the widened value, rounded once).
void bias_gradient(cudaStream_t s, const TensorView& dbias, const TensorView& dy) {
    column_sums_add(s, dbias, dy.dtype, dy.data, dy.rows(), dy.cols());
}

/// The GEMM operands of a and b, of one dtype (scratch slots `slot_a`, `slot_b` for conversions): with
/// gemm_inputs = BF16, each f32 tensor's bf16 copy; else a 16-bit tensor beside an f32 one widened
/// (exactly) to f32, as the CPU does at its BLAS call; else the tensors themselves.
std::pair<TensorView, TensorView> gemm_operands(const OpContext& ctx, const TensorView& a, const TensorView& b,
                                                int slot_a, int slot_b) {
    const auto as = [&](const TensorView& t, DType dtype, int slot) {
        if (t.dtype == dtype || t.empty()) return t;
        TensorView v = t;
        v.dtype = dtype;
        v.data = scratch(slot, t.numel() * static_cast<int64_t>(dtype_size(dtype)), stream_of(ctx));
        convert(stream_of(ctx), dtype, v.data, t.dtype, t.data, t.numel());
        return v;
    };
    if (ctx.gemm_inputs == DType::BF16) {
        const auto bf16 = [](const TensorView& t) { return t.dtype == DType::F32 ? DType::BF16 : t.dtype; };
        return {as(a, bf16(a), slot_a), as(b, bf16(b), slot_b)};
    }
    if (a.dtype == b.dtype) return {a, b};
    return {as(a, DType::F32, slot_a), as(b, DType::F32, slot_b)};
}

/// y = x·wᵀ + bias on GEMM operands already converted: cuBLASLt's BIAS epilogue, else GEMM + bias kernel
/// (a 16-bit y through f32 scratch, so that it is rounded once, after the bias).
void linear_forward_operands(cudaStream_t s, const TensorView& y, const TensorView& x, const TensorView& w,
                             const TensorView& bias) {
    if (!bias.empty() && bias.dtype == y.dtype &&
        gemm_lt_rowmajor(s, y, x, w, false, true, 0.0f, LtEpilogue::Bias, bias.data))
        return;
    if (bias.empty()) {
        gemm_rowmajor(s, "linear_forward", y, x, w, false, true, 1.0f, 0.0f);
        return;
    }
    TensorView acc = y;
    if (y.dtype != DType::F32) {
        acc.dtype = DType::F32;
        acc.data = scratch(0, y.numel() * static_cast<int64_t>(sizeof(float)), s);
    }
    gemm_rowmajor(s, "linear_forward", acc, x, w, false, true, 1.0f, 0.0f);
    add_bias_rows(s, y, static_cast<const float*>(acc.data), bias);
}

/// dw += dyᵀ·x and dbias += Σ_rows dy: one GEMM with cuBLASLt's BGRADB epilogue (the bias gradient of
/// its B operand, dy, into fp32 scratch, then added), else the GEMM and a column-sum kernel. dw and
/// dbias f32, or both f16 (the f16 gradient arena).
void weight_gradients(const OpContext& ctx, const TensorView& dw, const TensorView& dbias, const TensorView& dy,
                      const TensorView& x) {
    const cudaStream_t s = stream_of(ctx);
    const auto [dy_op, x_op] = gemm_operands(ctx, dy, x, 2, 3);
    if (!dbias.empty()) {
        float* partial = lt_bias_gradient_scratch(s, dbias.numel());
        if (gemm_lt_rowmajor(s, dw, dy_op, x_op, true, false, 1.0f, LtEpilogue::BGradB, partial)) {
            column_sums_add(s, dbias, partial, 1, dbias.numel());
            return;
        }
    }
    gemm_rowmajor(s, "linear_backward (dw)", dw, dy_op, x_op, true, false, 1.0f, 1.0f);
    if (!dbias.empty()) bias_gradient(s, dbias, dy);
}

}  // namespace

void matmul(OpContext& ctx, TensorView c, TensorView a, TensorView b, bool trans_a, bool trans_b, float alpha,
            float beta) {
    const auto [a_op, b_op] = gemm_operands(ctx, a, b, 2, 3);
    gemm_rowmajor(stream_of(ctx), "matmul", c, a_op, b_op, trans_a, trans_b, alpha, beta);
}

void linear_forward(OpContext& ctx, TensorView y, TensorView x_in, TensorView w_in, TensorView bias) {
    const auto [x, w] = gemm_operands(ctx, x_in, w_in, 2, 3);
    linear_forward_operands(stream_of(ctx), y, x, w, bias);
}

void linear_backward(OpContext& ctx, TensorView dx, TensorView dw, TensorView dbias, TensorView dy, TensorView x,
                     TensorView w, bool accumulate_dx) {
    // Converted operands use slots 2 and 3, each conversion queued after the GEMM that read the slot before.
    if (!dx.empty()) {
        const auto [dy_op, w_op] = gemm_operands(ctx, dy, w, 2, 3);
        gemm_rowmajor(stream_of(ctx), "linear_backward (dx)", dx, dy_op, w_op, false, false, 1.0f,
                      accumulate_dx ? 1.0f : 0.0f);
    }
    if (!dw.empty()) {
        weight_gradients(ctx, dw, dbias, dy, x);
    } else if (!dbias.empty()) {
        bias_gradient(stream_of(ctx), dbias, dy);
    }
}

void linear_gelu_forward(OpContext& ctx, TensorView act, TensorView pre, TensorView x_in, TensorView w_in,
                         TensorView bias, DType storage) {
    const cudaStream_t s = stream_of(ctx);
    const auto [x, w] = gemm_operands(ctx, x_in, w_in, 2, 3);
    const bool fuse_bias = !bias.empty() && bias.dtype == act.dtype;
    // act = gelu(x·wᵀ + b) with the pre-activation as the aux output: one pass over (N, out); with
    // 16-bit act and pre, both are rounded once from the epilogue's fp32 values.
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
    const auto [dy_op, w_op] = gemm_operands(ctx, dy, w, 2, 3);
    // dpre = (dy·w)·gelu'(pre) in the GEMM's epilogue, with fc1's bias gradient (DGELU_BGRAD) into
    // scratch when dpre is f32; a 16-bit dpre's bias gradient is summed from its rounded values (the
    // epilogue would round the sum itself to 16 bits).
    bool fused = false;
    if (dpre_bias.empty() || dpre.dtype != DType::F32) {
        fused = gemm_lt_rowmajor(s, dpre, dy_op, w_op, false, false, 0.0f, LtEpilogue::DGelu, nullptr, pre);
        if (fused && !dpre_bias.empty()) bias_gradient(s, dpre_bias, dpre);
    } else {
        float* partial = lt_bias_gradient_scratch(s, dpre_bias.numel());
        fused = gemm_lt_rowmajor(s, dpre, dy_op, w_op, false, false, 0.0f, LtEpilogue::DGeluBGrad, partial, pre);
        if (fused) column_sums_add(s, dpre_bias, partial, 1, dpre_bias.numel());
    }
    if (fused) {
        round_to(ctx, dpre, storage);
    } else {
        gemm_rowmajor(s, "linear_backward_gelu (dx)", dpre, dy_op, w_op, false, false, 1.0f, 0.0f);
        round_to(ctx, dpre, storage);
        gelu_backward(ctx, dpre, dpre, pre);
        round_to(ctx, dpre, storage);
        if (!dpre_bias.empty()) bias_gradient(s, dpre_bias, dpre);
    }
    weight_gradients(ctx, dw, dbias, dy, x);
}

}  // namespace mwb::cuda
