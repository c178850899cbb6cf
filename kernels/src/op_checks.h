#pragma once
// The argument checks of every op (one function per op of ops.inc, same parameters), run by the
// dispatcher before the CPU or CUDA implementation, which trust them. A failure is an mwb::Error
// that names the op, the argument and what was expected: "linear_forward: bias must be (out=8)
// elements, got f32[7]@cpu".
#include "mwb/kernels/ops.h"

#include <fmt/format.h>

#include <string>
#include <utility>

namespace mwb::ops::check {

#define MWB_DEFAULT(value)
#define MWB_OP(ret, name, params, args) void name params;
#include "mwb/kernels/ops.inc"
#undef MWB_OP
#undef MWB_DEFAULT

/// The checks of one call of `op` on `ctx`'s device. Messages are formatted only on failure, so a
/// passing check costs a few comparisons.
class Args {
public:
    Args(const char* op, const OpContext& ctx) : op_(op), device_(ctx.device) {}

    const char* op() const { return op_; }
    Device device() const { return device_; }

    /// `t` is given (a default view is missing; a zero-size one is fine), on the context's device,
    /// and holds `dtype`.
    const Args& tensor(const char* arg, const TensorView& t, DType dtype) const;
    /// The same, or empty (no data): the op then skips what it would compute with it.
    const Args& optional(const char* arg, const TensorView& t, DType dtype) const;
    /// A GEMM operand: given, on the context's device, f32, bf16 or f16 (each device says which it runs).
    const Args& gemm_operand(const char* arg, const TensorView& t) const;
    /// A stored activation of a 16-bit run (or its gradient): given, on the context's device, f32, or
    /// bf16/f16 where this op's kernels on this device load-convert and store-round them (the table
    /// kSixteenBitOps in op_checks.cpp).
    const Args& stored(const char* arg, const TensorView& t) const;
    /// A parameter's gradient (a view of the gradient arena, "main grads"): given, on the context's
    /// device, f32, or f16 where this op's kernels on this device accumulate into an f16 arena (fp16
    /// runs without accumulate_allreduce_grads_in_fp32; the table kF16GradientOps in op_checks.cpp).
    const Args& gradient(const char* arg, const TensorView& t) const;
    /// The same, or empty (no data).
    const Args& optional_gradient(const char* arg, const TensorView& t) const {
        return t.empty() ? *this : gradient(arg, t);
    }
    /// Given and on the context's device, of any dtype (scratch).
    const Args& placed(const char* arg, const TensorView& t) const { return placed(arg, t, nullptr); }
    /// Given and `ndim`-dimensional.
    const Args& dims(const char* arg, const TensorView& t, int ndim) const;

    /// Unless `ok`: "op: arg must be <expected>, got <t>".
    template <class... A>
    void shape(bool ok, const char* arg, const TensorView& t, fmt::format_string<A...> expected, A&&... a) const {
        if (!ok) [[unlikely]]
            reject(arg, fmt::format(expected, std::forward<A>(a)...), t.describe());
    }
    /// Unless `ok`: "op: arg must be <expected>, got <value>" (scalar arguments).
    template <class V, class... A>
    void value(bool ok, const char* arg, const V& v, fmt::format_string<A...> expected, A&&... a) const {
        if (!ok) [[unlikely]]
            reject(arg, fmt::format(expected, std::forward<A>(a)...), fmt::format("{}", v));
    }

    [[noreturn]] void reject(const char* arg, const std::string& expected, const std::string& got) const;

private:
    /// Given and on the device; `dtypes` ("f32", nullptr for any) only words the message.
    const Args& placed(const char* arg, const TensorView& t, const char* dtypes) const;
    [[noreturn]] void reject_tensor(const char* arg, const TensorView& t, const char* dtypes, bool device) const;

    const char* op_;
    Device device_;
};

}  // namespace mwb::ops::check
