#include "cudnn_sdpa_plan.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace mwb::cudnn_sdpa {

namespace {

using Dims = std::array<int64_t, 4>;

Dims contiguous(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }
Dims transposed(const Dims& d) { return {d[0], d[1], d[3], d[2]}; }

/// Appends tensors and nodes; virtual tensors and scalars get fresh uids.
class Builder {
public:
    Plan plan;

    int64_t bound(int64_t uid, const char* name, Dims dims, Dims strides, Type type) {
        plan.tensors.push_back({uid, name, dims, strides, type, false, false, 0});
        return uid;
    }
    int64_t temp(const char* name, Dims dims, Type type = Type::F32) {
        plan.tensors.push_back({next_virtual_++, name, dims, contiguous(dims), type, true, false, 0});
        return plan.tensors.back().uid;
    }
    int64_t scalar(const char* name, float value) {
        plan.tensors.push_back({next_scalar_++, name, {1, 1, 1, 1}, {1, 1, 1, 1}, Type::F32, false, true, value});
        return plan.tensors.back().uid;
    }
    const Dims& dims(int64_t uid) const { return plan.find(uid)->dims; }

    /// y = mode(x[, b[, t]]) element-wise, y shaped like x unless given.
    int64_t pointwise(const char* name, Mode mode, int64_t x, int64_t b = 0, int64_t t = 0, int64_t y = 0,
                      Type type = Type::F32) {
        if (!y) y = temp(name, dims(x), type);
        Node n{name, Op::Pointwise, mode, x, b, t, y};
        n.compute = mode == Mode::CmpGe ? Type::Bool : Type::F32;
        plan.nodes.push_back(n);
        return y;
    }
    int64_t gen_index(const char* name, int64_t x, int64_t axis) {
        const int64_t y = temp(name, dims(x), Type::I32);
        Node n{name, Op::Pointwise, Mode::GenIndex, x, 0, 0, y, axis};
        plan.nodes.push_back(n);
        return y;
    }
    int64_t reduce(const char* name, Mode mode, int64_t x, int64_t y) {
        plan.nodes.push_back({name, Op::Reduction, mode, x, 0, 0, y});
        return y;
    }
    int64_t matmul(const char* name, int64_t a, int64_t b, int64_t y) {
        plan.nodes.push_back({name, Op::Matmul, Mode::None, a, b, 0, y});
        return y;
    }
    /// x seen with dims 2 and 3 swapped (a transpose without a copy), as `type`.
    int64_t transpose(const char* name, int64_t x, Type type) {
        const Tensor src = *plan.find(x);
        const Dims d = transposed(src.dims), st = transposed(src.strides);
        plan.tensors.push_back({next_virtual_++, name, d, st, type, true, false, 0});
        const int64_t y = plan.tensors.back().uid;
        plan.nodes.push_back({name, Op::Reshape, Mode::None, x, 0, 0, y});
        return y;
    }
    int64_t rng(const char* name, Dims dims, double keep) {
        const int64_t y = temp(name, dims);
        Node n{name, Op::Rng, Mode::Bernoulli, kSeed, kOffset, 0, y};
        n.probability = keep;
        plan.nodes.push_back(n);
        return y;
    }

private:
    int64_t next_virtual_ = kFirstVirtual, next_scalar_ = kFirstScalar;
};

}  // namespace

Dims qkv_dims(const Shape& s, bool kv) { return {s.B * s.G, kv ? 1 : s.A / s.G, s.S, s.D}; }
Dims qkv_strides(const Shape& s) { return {(s.A / s.G + 2) * s.D, s.D, s.B * (s.A + 2 * s.G) * s.D, 1}; }
Dims out_dims(const Shape& s) { return {s.B * s.G, s.A / s.G, s.S, s.D}; }
Dims out_strides(const Shape& s) { return {s.A / s.G * s.D, s.D, s.B * s.A * s.D, 1}; }
Dims stats_strides(const Shape& s) { return {s.A / s.G * s.S, s.S, 1, 1}; }
int64_t k_offset(const Shape& s) { return s.A / s.G * s.D; }
int64_t v_offset(const Shape& s) { return (s.A / s.G + 1) * s.D; }

namespace {

/// The bound inputs both graphs read: Q, Kᵀ, V (or Vᵀ) in place in the packed qkv, and Seed/Offset.
void bind_inputs(Builder& g, const Shape& s, bool v_transposed) {
    const Dims q = qkv_dims(s, false), kv = qkv_dims(s, true), st = qkv_strides(s);
    g.bound(kQ, "Q", q, st, s.io);
    g.bound(kK, "K^T", transposed(kv), transposed(st), s.io);
    if (v_transposed) g.bound(kV, "V^T", transposed(kv), transposed(st), s.io);
    else g.bound(kV, "V", kv, st, s.io);
    if (s.dropout > 0) {
        g.bound(kSeed, "seed", {1, 1, 1, 1}, {1, 1, 1, 1}, Type::I64);
        g.bound(kOffset, "offset", {1, 1, 1, 1}, {1, 1, 1, 1}, Type::I64);
    }
}

/// Causal mask: scores where key j > query i become −∞ (row index ≥ column index is kept).
int64_t causal(Builder& g, int64_t scores) {
    const int64_t row = g.gen_index("row_index", scores, 2);
    const int64_t col = g.gen_index("col_index", scores, 3);
    const int64_t keep = g.pointwise("row_ge_col", Mode::CmpGe, row, col, 0, 0, Type::Bool);
    return g.pointwise("causal_select", Mode::BinarySelect, scores, g.scalar("minus_inf", -INFINITY), keep);
}

}  // namespace

const Tensor* Plan::find(int64_t uid) const {
    for (const Tensor& t : tensors)
        if (t.uid == uid) return &t;
    return nullptr;
}

Plan forward_plan(const Shape& s) {
    Builder g;
    bind_inputs(g, s, false);
    const Dims o = out_dims(s), rows{o[0], o[1], s.S, 1}, scores{o[0], o[1], s.S, s.S};
    g.bound(kO, "O", o, out_strides(s), s.io);
    g.bound(kStats, "Stats", rows, stats_strides(s), Type::F32);
    int64_t x = g.matmul("q_kt", kQ, kK, g.temp("scores", scores));
    x = g.pointwise("scale", Mode::Mul, x, g.scalar("softmax_scale", s.scale));
    x = causal(g, x);
    // Softmax with the row statistics: Stats = max + log Σ exp(x − max), the log-sum-exp backward reads.
    const int64_t max = g.reduce("row_max", Mode::Max, x, g.temp("max", rows));
    const int64_t e = g.pointwise("exp", Mode::Exp, g.pointwise("sub_max", Mode::Sub, x, max));
    const int64_t sum = g.reduce("row_sum", Mode::Sum, e, g.temp("sum", rows));
    g.pointwise("add_log_sum", Mode::Add, max, g.pointwise("log_sum", Mode::Log, sum), 0, kStats);
    x = g.pointwise("normalise", Mode::Div, e, sum);
    if (s.dropout > 0) {
        x = g.pointwise("dropout_mask", Mode::Mul, x, g.rng("dropout_keep", scores, 1.0 - s.dropout));
        x = g.pointwise("dropout_scale", Mode::Mul, x, g.scalar("dropout_scale", 1.0f / (1.0f - s.dropout)));
    }
    g.matmul("p_v", x, kV, kO);
    return g.plan;
}

Plan backward_plan(const Shape& s) {
    Builder g;
    bind_inputs(g, s, true);
    const Dims full = out_dims(s), rows{full[0], full[1], s.S, 1}, scores{full[0], full[1], s.S, s.S};
    g.bound(kO, "O", full, out_strides(s), s.io);
    g.bound(kDO, "dO", full, out_strides(s), s.io);
    g.bound(kStats, "Stats", rows, stats_strides(s), Type::F32);
    g.bound(kDQ, "dQ", qkv_dims(s, false), qkv_strides(s), s.io);
    g.bound(kDK, "dK", qkv_dims(s, true), qkv_strides(s), s.io);
    g.bound(kDV, "dV", qkv_dims(s, true), qkv_strides(s), s.io);
    g.bound(kSoftmaxSum, "softmax_sum", rows, stats_strides(s), Type::F32);
    g.bound(kDQAccum, "dQ_accum", full, contiguous(full), Type::F32);
    const bool grouped = s.A / s.G > 1;  // a group's query heads share K and V: dK and dV sum over them
    const float keep = 1.0f - s.dropout;

    // delta_i = Σ_d dO·O (per query row), divided by the dropout scale (dP is masked but unscaled below).
    int64_t x = g.pointwise("do_times_o", Mode::Mul, kDO, kO);
    x = g.reduce("row_sum_do_o", Mode::Sum, x, g.temp("delta", rows));
    g.pointwise("delta_times_keep", Mode::Mul, x, g.scalar("keep", keep), 0, kSoftmaxSum);

    // P recomputed from the saved log-sum-exp.
    x = g.matmul("q_kt", kQ, kK, g.temp("scores", scores));
    x = g.pointwise("scale", Mode::Mul, x, g.scalar("softmax_scale", s.scale));
    x = g.pointwise("sub_stats", Mode::Sub, x, kStats);
    const int64_t p = g.pointwise("exp", Mode::Exp, causal(g, x));
    int64_t mask = 0;
    x = p;
    if (s.dropout > 0) {
        mask = g.rng("dropout_keep", scores, keep);
        x = g.pointwise("dropout_mask", Mode::Mul, x, mask);
        x = g.pointwise("dropout_scale", Mode::Mul, x, g.scalar("dropout_scale", 1.0f / keep));
    }
    // dV = Pᵀ·dO (per query head; a group sums its heads).
    const int64_t pt = g.transpose("p_transposed", x, s.io);
    if (grouped) g.reduce("dv_group_sum", Mode::Sum, g.matmul("pt_do", pt, kDO, g.temp("dv_heads", full)), kDV);
    else g.matmul("pt_do", pt, kDO, kDV);

    // dS = scale · P ∘ (dP ∘ mask − delta) · dropout scale, dP = dO·Vᵀ.
    x = g.matmul("do_vt", kDO, kV, g.temp("dp", scores));
    if (mask) x = g.pointwise("dp_dropout_mask", Mode::Mul, x, mask);
    x = g.pointwise("sub_delta", Mode::Sub, x, kSoftmaxSum);
    x = g.pointwise("times_p", Mode::Mul, x, p);
    if (s.dropout > 0) x = g.pointwise("ds_dropout_scale", Mode::Mul, x, g.scalar("dropout_scale", 1.0f / keep));
    const int64_t ds = g.pointwise("ds_scale", Mode::Mul, x, g.scalar("softmax_scale", s.scale));

    // dK = dSᵀ·Q, dQ = dS·K (accumulated in f32, then rounded to the 16-bit type).
    const int64_t dst = g.transpose("ds_transposed", ds, s.io);
    if (grouped) g.reduce("dk_group_sum", Mode::Sum, g.matmul("dst_q", dst, kQ, g.temp("dk_heads", full)), kDK);
    else g.matmul("dst_q", dst, kQ, kDK);
    g.matmul("ds_k", ds, g.transpose("k", kK, s.io), kDQAccum);
    g.pointwise("dq_round", Mode::Identity, kDQAccum, 0, 0, kDQ);
    return g.plan;
}

std::string check(const Plan& p) {
    std::map<int64_t, const Tensor*> tensors;
    for (const Tensor& t : p.tensors) {
        if (tensors.count(t.uid)) return "tensor uid " + std::to_string(t.uid) + " (" + t.name + ") defined twice";
        tensors[t.uid] = &t;
    }
    std::map<int64_t, int> produced, read;
    for (const Tensor& t : p.tensors)
        if (!t.is_virtual && !t.by_value) produced[t.uid] = 0;  // bound inputs or outputs
    auto known = [&](int64_t uid) { return uid == 0 || tensors.count(uid); };
    for (const Node& n : p.nodes) {
        for (int64_t uid : {n.x, n.b, n.t, n.y})
            if (!known(uid)) return n.name + ": unknown tensor uid " + std::to_string(uid);
        for (int64_t uid : {n.x, n.b, n.t}) {
            if (!uid) continue;
            const Tensor& t = *tensors[uid];
            if (t.is_virtual && !produced.count(uid)) return n.name + " reads " + t.name + " before it is produced";
            ++read[uid];
        }
        const Tensor& y = *tensors[n.y];
        if (y.is_virtual && produced.count(n.y)) return n.name + " produces " + y.name + " a second time";
        produced[n.y] = 1;
        const Tensor& x = *tensors[n.x];
        if (n.op == Op::Matmul) {
            const Tensor& b = *tensors[n.b];
            const bool batch_ok = x.dims[0] == b.dims[0] && y.dims[0] == x.dims[0] && y.dims[1] == x.dims[1] &&
                                  x.dims[1] % b.dims[1] == 0;  // grouped: b's heads broadcast over x's
            if (!batch_ok || x.dims[3] != b.dims[2] || y.dims[2] != x.dims[2] || y.dims[3] != b.dims[3])
                return n.name + ": matmul dims do not agree";
        } else if (n.op == Op::Reduction) {
            for (int d = 0; d < 4; ++d)
                if (y.dims[d] != x.dims[d] && y.dims[d] != 1 && x.dims[d] % y.dims[d] != 0)
                    return n.name + ": reduction output dims do not divide the input's";
        } else if (n.op == Op::Pointwise) {
            for (int64_t uid : {n.b, n.t}) {
                if (!uid) continue;
                const Tensor& o = *tensors[uid];
                for (int d = 0; d < 4; ++d)
                    if (o.dims[d] != 1 && o.dims[d] != y.dims[d]) return n.name + ": " + o.name + " does not broadcast";
            }
            if (x.dims != y.dims) return n.name + ": output dims differ from the input's";
        } else if (n.op == Op::Reshape) {
            if (x.dims[0] * x.dims[1] * x.dims[2] * x.dims[3] != y.dims[0] * y.dims[1] * y.dims[2] * y.dims[3])
                return n.name + ": reshape changes the element count";
        }
    }
    for (const Tensor& t : p.tensors) {
        if (t.is_virtual && !read.count(t.uid)) return "virtual tensor " + t.name + " is never read";
        if (!t.is_virtual && !t.by_value && !read.count(t.uid) && produced[t.uid] == 0)
            return "bound tensor " + t.name + " is neither read nor written";
    }
    return {};
}

}  // namespace mwb::cudnn_sdpa
