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
