#pragma once
// What one cuBLASLt GEMM's descriptors and chosen algorithm depend on: the key of the per-thread plan
// cache in gemm_lt.cpp. Plain C++ (no CUDA headers), so the key logic is tested on CPU
// (tests/kernels/test_gemm_lt_key.cpp). Column-major terms, as cuBLASLt sees the call:
// D (m, n) = op(A) (m, k) · op(B) (k, n), every matrix contiguous (leading dimension = stored rows).
#include <cstddef>
#include <cstdint>

namespace mwb::cuda {

/// The cuBLASLt epilogues the linear layers use (cuBLASLt's names).
enum class LtEpilogue : uint8_t {
    Default,      ///< D = op(A)·op(B) (+ beta·D)
    Bias,         ///< D += bias broadcast over the columns (bias: m)
    GeluAux,      ///< aux = D; D = gelu(D) (the tanh approximation)
    GeluAuxBias,  ///< aux = D + bias; D = gelu(aux)
    DGelu,        ///< D = D · gelu'(aux)
    DGeluBGrad,   ///< D = D · gelu'(aux); bias = Σ over the columns of D (m)
    BGradB,       ///< bias = Σ over k of op(B) (n): the bias gradient of a weight-gradient GEMM
};

/// True for the epilogues that read or write the aux matrix (m, n), and for those that write a bias gradient.
constexpr bool lt_uses_aux(LtEpilogue e) {
    return e == LtEpilogue::GeluAux || e == LtEpilogue::GeluAuxBias || e == LtEpilogue::DGelu ||
           e == LtEpilogue::DGeluBGrad;
}
constexpr bool lt_writes_bias_gradient(LtEpilogue e) {
    return e == LtEpilogue::DGeluBGrad || e == LtEpilogue::BGradB;
}
constexpr bool lt_reads_bias(LtEpilogue e) {
    return e == LtEpilogue::Bias || e == LtEpilogue::GeluAuxBias;
}

/// cudaDataType_t's CUDA_R_32F (this header has no CUDA headers; gemm.cpp asserts the value).
constexpr int kLtTypeF32 = 0;

/// The bias vector's cudaDataType_t for epilogue `e` beside a D of `type_d`: D's for a bias the epilogue
/// reads (cublasLt.h: "the same type as the elements of the output matrix"); fp32 for a bias gradient
/// it writes, also beside a 16-bit D (an f16 gradient arena's dw): it goes to fp32 scratch and is added
/// to the f32 or f16 dbias with one rounding (gemm.cpp).
constexpr int lt_bias_type(LtEpilogue e, int type_d) {
    return lt_writes_bias_gradient(e) ? kLtTypeF32 : type_d;
}

/// The largest power of two up to 256 that divides `address` (256 for 0): what cuBLASLt's heuristic is
/// told about each operand (its MIN_ALIGNMENT preferences), and what a plan is keyed on.
constexpr uint32_t lt_alignment(uintptr_t address) {
    uint32_t a = 256;
    while (a > 1 && address % a != 0) a >>= 1;
    return a;
}

struct LtKey {
    int64_t m = 0, n = 0, k = 0;
    bool trans_a = false, trans_b = false;
    /// cudaDataType_t of A, B, D (= C) and the bias vector; cublasComputeType_t (stored as ints so
    /// this header needs no CUDA headers).
    int type_a = 0, type_b = 0, type_d = 0, type_bias = 0, compute = 0;
    LtEpilogue epilogue = LtEpilogue::Default;
    /// lt_alignment of A, B, D (= C) and the bias (or bias gradient) pointer.
    uint32_t align_a = 0, align_b = 0, align_d = 0, align_bias = 0;

    bool operator==(const LtKey&) const = default;
};

struct LtKeyHash {
    std::size_t operator()(const LtKey& k) const {
        // FNV-1a over the fields (not the struct's bytes: its padding is unspecified).
        uint64_t h = 1469598103934665603ull;
        const auto mix = [&h](uint64_t v) {
            for (int i = 0; i < 8; ++i) {
                h ^= (v >> (8 * i)) & 0xffu;
                h *= 1099511628211ull;
            }
        };
        mix(static_cast<uint64_t>(k.m));
        mix(static_cast<uint64_t>(k.n));
        mix(static_cast<uint64_t>(k.k));
        mix((uint64_t{k.trans_a} << 1) | uint64_t{k.trans_b} | (static_cast<uint64_t>(k.epilogue) << 2));
        mix((static_cast<uint64_t>(static_cast<uint32_t>(k.type_a)) << 32) | static_cast<uint32_t>(k.type_b));
        mix((static_cast<uint64_t>(static_cast<uint32_t>(k.type_d)) << 32) | static_cast<uint32_t>(k.type_bias));
        mix(static_cast<uint32_t>(k.compute));
        mix((uint64_t{k.align_a} << 48) | (uint64_t{k.align_b} << 32) | (uint64_t{k.align_d} << 16) | k.align_bias);
        return static_cast<std::size_t>(h);
    }
};

}  // namespace mwb::cuda
