#pragma once
// The model's normalisation (LayerNorm or RMSNorm) with what it keeps for backward.
#include "backend/core/memory.h"
#include "backend/model/gpt_dims.h"
#include "backend/model/runtime.h"

namespace mwb {

struct NormActivations {
    Buffer out;   // (N, H)
    Buffer mean;  // (N), LayerNorm only
    Buffer rstd;  // (N)

    void reset() {
        out.reset();
        mean.reset();
        rstd.reset();
    }
    int64_t bytes() const { return out.bytes() + mean.bytes() + rstd.bytes(); }
};

/// The norm that reads a residual-stream tensor next, on the same rank: given to the code that writes
/// that tensor (a layer's output residual), which then runs the residual add and this norm in one pass
/// (residual_norm_forward) and fills `n`. Empty (n null) when the tensor goes elsewhere (a pipeline send).
struct NextNorm {
    NormActivations* n = nullptr;
    TensorView w, b;  // b: empty under RMSNorm

    explicit operator bool() const { return n != nullptr; }
};

/// n.out = norm(x) (stored rounded to the storage precision). b is ignored by RMSNorm.
void norm_forward(ModelRuntime& rt, const GptDims& d, NormActivations& n, const TensorView& x, const TensorView& w,
                  const TensorView& b);
/// out = residual + dropout(branch [+ bias]) (the residual connection, as ops::bias_dropout_add_forward)
/// and n = norm(out) as norm_forward computes it, in one pass per row (ops::bias_dropout_add_norm_forward):
/// the same bits as the two in sequence. b is ignored by RMSNorm.
void residual_norm_forward(ModelRuntime& rt, const GptDims& d, NormActivations& n, const TensorView& out,
                           const TensorView& residual, const TensorView& branch, const TensorView& bias, float p,
                           RngStream rng, int64_t element_offset, const TensorView& w, const TensorView& b);
/// dx += norm'(dout); dw, db += parameter gradients.
void norm_backward(ModelRuntime& rt, const GptDims& d, const TensorView& dx, const TensorView& dw,
                   const TensorView& db, const TensorView& dout, const TensorView& x, const NormActivations& n,
                   const TensorView& w, bool accumulate_dx);

}  // namespace mwb
