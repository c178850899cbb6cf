#include "backend/model/norm.h"

namespace mwb {

void norm_forward(ModelRuntime& rt, const GptDims& d, NormActivations& n, const TensorView& x, const TensorView& w,
                  const TensorView& b) {
    const int64_t rows = x.rows();
    n.out = rt.stored_activation(x.numel());
    n.rstd = rt.activation(rows);
    const TensorView out = n.out.view({rows, d.hidden});
    if (d.rmsnorm) {
        ops::rmsnorm_forward(rt.ctx, out, n.rstd.view(), x, w, d.norm_eps);
    } else {
        n.mean = rt.activation(rows);
        ops::layernorm_forward(rt.ctx, out, n.mean.view(), n.rstd.view(), x, w, b, d.norm_eps);
    }
    rt.store(out);
}

void residual_norm_forward(ModelRuntime& rt, const GptDims& d, NormActivations& n, const TensorView& out,
                           const TensorView& residual, const TensorView& branch, const TensorView& bias, float p,
                           RngStream rng, int64_t element_offset, const TensorView& w, const TensorView& b) {
    const int64_t rows = out.rows();
    // Allocated in norm_forward's order (the tracked peak is unchanged).
    n.out = rt.stored_activation(out.numel());
    n.rstd = rt.activation(rows);
    if (!d.rmsnorm) n.mean = rt.activation(rows);
    const TensorView norm_out = n.out.view({rows, d.hidden});
    ops::bias_dropout_add_norm_forward(rt.ctx, out, norm_out, d.rmsnorm ? TensorView{} : n.mean.view(), n.rstd.view(),
                                       residual, branch, bias, w, d.rmsnorm ? TensorView{} : b, p, rng, element_offset,
                                       d.norm_eps);
    rt.store(out);
    rt.store(norm_out);
}

void norm_backward(ModelRuntime& rt, const GptDims& d, const TensorView& dx, const TensorView& dw,
                   const TensorView& db, const TensorView& dout, const TensorView& x, const NormActivations& n,
                   const TensorView& w, bool accumulate_dx) {
    if (d.rmsnorm)
        ops::rmsnorm_backward(rt.ctx, dx, dw, dout, x, n.rstd.view(), w, accumulate_dx);
    else
        ops::layernorm_backward(rt.ctx, dx, dw, db, dout, x, n.mean.view(), n.rstd.view(), w, accumulate_dx);
    rt.store(dx);
}

}  // namespace mwb
