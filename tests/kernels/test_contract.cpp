// The op contract, driven by the op list itself (mwb/kernels/ops.inc): every op has a valid call
// here, and each of its tensor arguments is then, one at a time, given the wrong dtype, put on the
// other device, left out (unless the op takes it as optional) and given a wrong shape. Each such
// call must fail with an mwb::Error that names the op and the argument — before the backend runs:
// the CUDA context's sweep runs with no GPU, so a call that got past the checks would fail inside
// CUDA instead, with a message that names no argument. An op added to ops.inc without a case here
// fails `every_op_has_a_case`.
#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"

#include "support/suite.h"

#include <QtTest>

#include <deque>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace test_kernels_contract {

using namespace mwb;

namespace {

/// Each op's name and its parameter list as written in ops.inc.
struct OpEntry {
    const char* name;
    const char* params;
};
constexpr OpEntry kOps[] = {
#define MWB_DEFAULT(value)
#define MWB_OP(ret, name, params, args) {#name, #params},
#include "mwb/kernels/ops.inc"
#undef MWB_OP
#undef MWB_DEFAULT
};

struct Param {
    std::string type, name;
};

/// "(OpContext & ctx, TensorView x, float alpha MWB_DEFAULT(1.0f))" -> {OpContext ctx}, {TensorView x}, ...
std::vector<Param> parse_params(std::string s) {
    std::vector<Param> out;
    s = s.substr(1, s.size() - 2);
    int depth = 0;
    std::string cur;
    const auto flush = [&] {
        std::string decl = cur.substr(0, cur.find(" MWB_DEFAULT"));
        while (!decl.empty() && decl.front() == ' ') decl.erase(0, 1);
        const auto space = decl.find_last_of(' ');
        out.push_back({decl.substr(0, space), decl.substr(space + 1)});
        cur.clear();
    };
    for (char c : s) {
        if (c == '(') ++depth;
        if (c == ')') --depth;
        if (c == ',' && depth == 0)
            flush();
        else
            cur += c;
    }
    flush();
    return out;
}

const OpEntry* find_op(const std::string& name) {
    for (const OpEntry& e : kOps)
        if (name == e.name) return &e;
    return nullptr;
}

/// How a tensor argument may vary and still be valid.
enum Flags : unsigned {
    kFixed = 0,
    kAnyShape = 1,   ///< every shape is valid (fill, scale, ...)
    kFreeFirst = 2,  ///< dim 0 may shrink (an embedding table's vocabulary, S below the table's P rows)
    kFreeLast = 4,   ///< the last dim may shrink (the logits' vocabulary shard)
    kOptional = 8,   ///< may be left out
    kHostOk = 16,    ///< may be host memory on a CUDA context (copy)
    kAnyDtype = 32,  ///< any dtype (scratch: the attention workspace)
};

struct Arg {
    TensorView view;
    unsigned flags = kFixed;
};

/// One op's valid call: its tensor arguments in parameter order and a call that passes them on.
struct Case {
    std::string op;
    std::vector<Arg> args;
    std::function<void(OpContext&, const std::vector<TensorView>&)> call;
};

/// Zeroed host storage for the cases' tensors, tagged with the device under test (the checks never
/// read the data; only the CPU's valid calls do).
class Store {
public:
    explicit Store(Device device) : device_(device) {}
    Arg f(std::initializer_list<int64_t> shape, unsigned flags = kFixed) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        floats_.emplace_back(static_cast<std::size_t>(n), 0.0f);
        return {make_view(floats_.back().data(), DType::F32, shape, device_), flags};
    }
    Arg i(int64_t n) {
        ints_.emplace_back(static_cast<std::size_t>(n), 0);
        return {make_view(ints_.back().data(), DType::I32, {n}, device_), kFixed};
    }
    Arg d(int64_t n, unsigned flags = kFixed) {
        doubles_.emplace_back(static_cast<std::size_t>(n), 0.0);
        return {make_view(doubles_.back().data(), DType::F64, {n}, device_), flags};
    }
    Device device() const { return device_; }

private:
    Device device_;
    std::deque<std::vector<float>> floats_;
    std::deque<std::vector<int32_t>> ints_;
    std::deque<std::vector<double>> doubles_;
};

/// A = 2 query heads in G = 2 groups of head dim D = 4, S = 2, B = 1.
AttentionParams heads() {
    AttentionParams p;
    p.num_heads = 2;
    p.total_heads = 2;
    p.batch = 1;
    p.softmax_scale = 0.5f;
    return p;
}
constexpr int64_t kS = 2, kB = 1, kQkv = 6 * 4, kCtx = 2 * 4;

std::vector<Case> cases(Store& s) {
    using V = const std::vector<TensorView>&;
    const AttentionParams ap = heads();
    const int threads = ops::num_threads();
    const int64_t saved = ops::attention_saved_elements(s.device(), ap, kS);
    const int64_t ws = ops::attention_workspace_bytes(s.device(), ap, kS, threads) / 4;
    std::vector<Case> c;
    const auto add = [&](const char* op, std::vector<Arg> args, std::function<void(OpContext&, V)> call) {
        c.push_back({op, std::move(args), std::move(call)});
    };
    add("fill", {s.f({3, 4}, kAnyShape)}, [](OpContext& x, V a) { ops::fill(x, a[0], 1.0f); });
    add("fill_from", {s.f({3, 4}, kAnyShape), s.d(1)}, [](OpContext& x, V a) { ops::fill_from(x, a[0], a[1], 4.0f); });
    add("copy", {s.f({3, 4}, kHostOk), s.f({3, 4}, kHostOk)}, [](OpContext& x, V a) { ops::copy(x, a[0], a[1]); });
    add("scale", {s.f({3, 4}, kAnyShape)}, [](OpContext& x, V a) { ops::scale(x, a[0], 2.0f); });
    add("sum_squares_ranges", {s.d(1), s.f({12})}, [](OpContext& x, V a) {
        ops::sum_squares_ranges(x, a[0], a[1], {{0, 5}, {7, 5}});
    });
    add("gradient_scale", {s.f({2}), s.d(1), s.d(step_params::Count, kOptional)},
        [](OpContext& x, V a) { ops::gradient_scale(x, a[0], a[1], 8.0, 1.0, a[2]); });
    add("read_f64", {s.d(1)}, [](OpContext& x, V a) { (void)ops::read_f64(x, a[0]); });
    add("add", {s.f({3, 4}), s.f({3, 4}), s.f({3, 4})}, [](OpContext& x, V a) { ops::add(x, a[0], a[1], a[2]); });
    add("round_to", {s.f({3, 4}, kAnyShape)}, [](OpContext& x, V a) { ops::round_to(x, a[0], DType::BF16); });
    add("sum_squares", {s.f({3, 4}, kAnyShape)}, [](OpContext& x, V a) { (void)ops::sum_squares(x, a[0]); });
    add("matmul", {s.f({2, 3}), s.f({2, 4}), s.f({4, 3})},
        [](OpContext& x, V a) { ops::matmul(x, a[0], a[1], a[2], false, false); });
    add("linear_forward", {s.f({3, 5}), s.f({3, 4}), s.f({5, 4}), s.f({5}, kOptional)},
        [](OpContext& x, V a) { ops::linear_forward(x, a[0], a[1], a[2], a[3]); });
    add("linear_backward",
        {s.f({3, 4}, kOptional), s.f({5, 4}), s.f({5}, kOptional), s.f({3, 5}), s.f({3, 4}), s.f({5, 4})},
        [](OpContext& x, V a) { ops::linear_backward(x, a[0], a[1], a[2], a[3], a[4], a[5]); });
    add("linear_gelu_forward", {s.f({3, 5}), s.f({3, 5}), s.f({3, 4}), s.f({5, 4}), s.f({5}, kOptional)},
        [](OpContext& x, V a) { ops::linear_gelu_forward(x, a[0], a[1], a[2], a[3], a[4], DType::BF16); });
    add("linear_backward_gelu",
        {s.f({3, 4}), s.f({4}, kOptional), s.f({5, 4}), s.f({5}, kOptional), s.f({3, 5}), s.f({3, 4}), s.f({5, 4}),
         s.f({3, 4})},
        [](OpContext& x, V a) {
            ops::linear_backward_gelu(x, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], DType::BF16);
        });
    add("embedding_forward", {s.f({3, 4}), s.i(3), s.f({6, 4}, kFreeFirst)},
        [](OpContext& x, V a) { ops::embedding_forward(x, a[0], a[1], a[2], 0); });
    add("embedding_backward", {s.f({6, 4}, kFreeFirst), s.f({3, 4}), s.i(3)},
        [](OpContext& x, V a) { ops::embedding_backward(x, a[0], a[1], a[2], 0); });
    add("position_embedding_forward", {s.f({2, 3, 4}, kFreeFirst), s.f({2, 4})},
        [](OpContext& x, V a) { ops::position_embedding_forward(x, a[0], a[1], 0); });
    add("position_embedding_backward", {s.f({2, 4}), s.f({2, 3, 4}, kFreeFirst)},
        [](OpContext& x, V a) { ops::position_embedding_backward(x, a[0], a[1], 0); });
    add("layernorm_forward", {s.f({3, 4}), s.f({3}), s.f({3}), s.f({3, 4}), s.f({4}), s.f({4})},
        [](OpContext& x, V a) { ops::layernorm_forward(x, a[0], a[1], a[2], a[3], a[4], a[5], 1e-5f); });
    add("layernorm_backward", {s.f({3, 4}), s.f({4}), s.f({4}), s.f({3, 4}), s.f({3, 4}), s.f({3}), s.f({3}), s.f({4})},
        [](OpContext& x, V a) { ops::layernorm_backward(x, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], false); });
    add("rmsnorm_forward", {s.f({3, 4}), s.f({3}), s.f({3, 4}), s.f({4})},
        [](OpContext& x, V a) { ops::rmsnorm_forward(x, a[0], a[1], a[2], a[3], 1e-5f); });
    add("rmsnorm_backward", {s.f({3, 4}), s.f({4}), s.f({3, 4}), s.f({3, 4}), s.f({3}), s.f({4})},
        [](OpContext& x, V a) { ops::rmsnorm_backward(x, a[0], a[1], a[2], a[3], a[4], a[5], false); });
    add("gelu_forward", {s.f({3, 4}), s.f({3, 4})}, [](OpContext& x, V a) { ops::gelu_forward(x, a[0], a[1]); });
    add("gelu_backward", {s.f({3, 4}), s.f({3, 4}), s.f({3, 4})},
        [](OpContext& x, V a) { ops::gelu_backward(x, a[0], a[1], a[2]); });
    add("swiglu_forward", {s.f({3, 4}), s.f({3, 8})}, [](OpContext& x, V a) { ops::swiglu_forward(x, a[0], a[1]); });
    add("swiglu_backward", {s.f({3, 8}), s.f({3, 4}), s.f({3, 8})},
        [](OpContext& x, V a) { ops::swiglu_backward(x, a[0], a[1], a[2]); });
    add("rope_forward", {s.f({kS, kB, kQkv}, kFreeFirst), s.f({kS, 2}), s.f({kS, 2})},
        [ap](OpContext& x, V a) { ops::rope_forward(x, a[0], a[1], a[2], ap, 4, false, 0); });
    add("rope_backward", {s.f({kS, kB, kQkv}, kFreeFirst), s.f({kS, 2}), s.f({kS, 2})},
        [ap](OpContext& x, V a) { ops::rope_backward(x, a[0], a[1], a[2], ap, 4, true, 0); });
    add("dropout_forward", {s.f({3, 4}), s.f({3, 4})}, [](OpContext& x, V a) {
        ops::dropout_forward(x, a[0], a[1], 0.1f, RngStream{1, 2}, 0);
    });
    add("dropout_backward", {s.f({3, 4}), s.f({3, 4})}, [](OpContext& x, V a) {
        ops::dropout_backward(x, a[0], a[1], 0.1f, RngStream{1, 2}, 0);
    });
    add("dropout_add_forward", {s.f({3, 4}), s.f({3, 4}), s.f({3, 4})}, [](OpContext& x, V a) {
        ops::dropout_add_forward(x, a[0], a[1], a[2], 0.1f, RngStream{1, 2}, 0);
    });
    add("bias_dropout_add_forward", {s.f({3, 4}), s.f({3, 4}), s.f({3, 4}), s.f({4})}, [](OpContext& x, V a) {
        ops::bias_dropout_add_forward(x, a[0], a[1], a[2], a[3], 0.1f, RngStream{1, 2}, 0);
    });
    add("bias_dropout_add_norm_forward",
        {s.f({3, 4}), s.f({3, 4}), s.f({3}), s.f({3}), s.f({3, 4}), s.f({3, 4}), s.f({4}, kOptional), s.f({4}),
         s.f({4})},
        [](OpContext& x, V a) {
            ops::bias_dropout_add_norm_forward(x, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], 0.1f,
                                               RngStream{1, 2}, 0, 1e-5f);
        });
    add("attention_forward", {s.f({kS, kB, kCtx}), s.f({saved}), s.f({kS, kB, kQkv}), s.f({ws}, kAnyDtype)},
        [ap](OpContext& x, V a) { ops::attention_forward(x, a[0], a[1], a[2], a[3], ap); });
    add("attention_backward",
        {s.f({kS, kB, kQkv}), s.f({kS, kB, kCtx}), s.f({kS, kB, kQkv}), s.f({kS, kB, kCtx}), s.f({saved}),
         s.f({ws}, kAnyDtype)},
        [ap](OpContext& x, V a) { ops::attention_backward(x, a[0], a[1], a[2], a[3], a[4], a[5], ap); });
    // one new token (row 0, position 0) against a cache of R = 1 row, L = 2 positions
    add("cached_attention_forward",
        {s.f({1, kCtx}), s.f({1, 2, 2, 4}), s.f({1, 2, 2, 4}), s.f({1, kQkv}), s.i(1), s.i(1)},
        [ap](OpContext& x, V a) { ops::cached_attention_forward(x, a[0], a[1], a[2], a[3], a[4], a[5], ap); });
    add("cross_entropy_partials", {s.f({3}), s.f({3}), s.f({3}), s.f({3, 5}, kFreeLast), s.i(3)},
        [](OpContext& x, V a) { ops::cross_entropy_partials(x, a[0], a[1], a[2], a[3], a[4], 0); });
    add("cross_entropy_backward", {s.f({3, 5}, kFreeLast), s.i(3), s.f({3}), s.f({3})},
        [](OpContext& x, V a) { ops::cross_entropy_backward(x, a[0], a[1], a[2], a[3], 0); });
    add("cross_entropy_fused", {s.f({3}), s.f({3}), s.f({3, 5}, kFreeLast), s.i(3), s.f({3})},
        [](OpContext& x, V a) { ops::cross_entropy_fused(x, a[0], a[1], a[2], a[3], a[4]); });
    add("cross_entropy_rescale", {s.f({3}), s.f({3}), s.f({3})},
        [](OpContext& x, V a) { ops::cross_entropy_rescale(x, a[0], a[1], a[2]); });
    add("cross_entropy_lse", {s.f({3}), s.f({3}), s.f({3})},
        [](OpContext& x, V a) { ops::cross_entropy_lse(x, a[0], a[1], a[2]); });
    add("cross_entropy_loss_sum", {s.d(1), s.f({3}), s.f({3})},
        [](OpContext& x, V a) { ops::cross_entropy_loss_sum(x, a[0], a[1], a[2], 3.0, true); });
    add("adamw_update",
        {s.f({3, 4}), s.f({3, 4}), s.f({3, 4}), s.f({3, 4}), s.f({3, 4}, kOptional), s.f({2}, kOptional),
         s.d(step_params::Count, kOptional)},
        [](OpContext& x, V a) {
            AdamWParams p;
            p.lr = 1e-3f;
            ops::adamw_update(x, a[0], a[1], a[2], a[3], p, a[4], DType::BF16, a[5], a[6]);
        });
    return c;
}

/// The view with dimension `dim` one smaller.
TensorView shrunk(TensorView v, int dim) {
    v.shape[dim] -= 1;
    return v;
}

/// Runs `call` with argument `i` replaced by `bad`; returns what is wrong with the outcome (empty when
/// it failed with "op: <name> must be ..." for a name in `names`).
QString rejected(const Case& k, OpContext& ctx, std::size_t i, const TensorView& bad,
                 const std::set<std::string>& names) {
    std::vector<TensorView> a;
    for (const Arg& x : k.args) a.push_back(x.view);
    a[i] = bad;
    try {
        k.call(ctx, a);
    } catch (const Error& e) {
        if (qEnvironmentVariableIsSet("MWB_PRINT_ERRORS")) qInfo("%s", e.what());  // to read every message
        const std::string m = e.what(), head = k.op + ": ";
        if (m.rfind(head, 0) != 0)
            return QStringLiteral("error does not start with '%1': %2").arg(head.c_str(), e.what());
        const std::string rest = m.substr(head.size());
        const std::string named = rest.substr(0, rest.find(" must be"));
        if (rest.find(" must be") == std::string::npos || !names.count(named))
            return QStringLiteral("error names no expected argument: %1").arg(e.what());
        return {};
    }
    return QStringLiteral("accepted %1").arg(bad.describe().c_str());
}

/// Every mutation of every tensor argument of every case on `device`; the CPU also runs the valid calls.
void sweep(Device device) {
    Store store(device);
    OpContext ctx;
    ctx.device = device;
    for (const Case& k : cases(store)) {
        const OpEntry* e = find_op(k.op);
        QVERIFY2(e, qPrintable(QStringLiteral("no op %1 in ops.inc").arg(k.op.c_str())));
        std::vector<std::string> tensors;
        std::set<std::string> all;
        for (const Param& p : parse_params(e->params)) {
            all.insert(p.name);
            if (p.type == "TensorView") tensors.push_back(p.name);
        }
        for (const std::string& t : tensors) all.insert(t);
        all.insert({"p.num_heads", "p.num_query_groups", "p.batch", "p.head_offset", "p.dropout_p", "p.step"});
        QVERIFY2(tensors.size() == k.args.size(), qPrintable(QStringLiteral("%1: %2 tensor parameters, %3 in the case")
                                                                 .arg(k.op.c_str())
                                                                 .arg(tensors.size())
                                                                 .arg(k.args.size())));
        if (device == Device::CPU) {
            std::vector<TensorView> a;
            for (const Arg& x : k.args) a.push_back(x.view);
            try {
                k.call(ctx, a);
            } catch (const Error& err) {
                QFAIL(qPrintable(QStringLiteral("%1: the valid call failed: %2").arg(k.op.c_str(), err.what())));
            }
        }
        for (std::size_t i = 0; i < k.args.size(); ++i) {
            const Arg& arg = k.args[i];
            const std::set<std::string> self = {tensors[i]};
            const auto expect = [&](const TensorView& bad, const std::set<std::string>& names, const char* what) {
                const QString why = rejected(k, ctx, i, bad, names);
                QVERIFY2(why.isEmpty(),
                         qPrintable(QStringLiteral("%1 %2 on %3 (%4): %5")
                                        .arg(k.op.c_str(), tensors[i].c_str(), device_name(device), what, why)));
            };
            TensorView v = arg.view;
            if (!(arg.flags & kAnyDtype)) {
                v.dtype = v.dtype == DType::I32 ? DType::F32 : DType::I32;
                expect(v, self, "wrong dtype");
            }
            if (!(device == Device::CUDA && (arg.flags & kHostOk))) {
                v = arg.view;
                v.device = device == Device::CPU ? Device::CUDA : Device::CPU;
                expect(v, self, "other device");
            }
            if (!(arg.flags & kOptional)) expect(TensorView{}, self, "left out");
            if (arg.flags & kAnyShape) continue;
            // A shape is wrong relative to another argument: the error may name either.
            if (!(arg.flags & kFreeLast)) expect(shrunk(arg.view, arg.view.ndim - 1), all, "last dim - 1");
            if (arg.view.ndim > 1 && !(arg.flags & kFreeFirst)) expect(shrunk(arg.view, 0), all, "first dim - 1");
        }
    }
}

/// Whether `device`'s checks let op `name` take bf16 views for the arguments at `indices` of its valid
/// call (given together: an op's 16-bit arguments share a dtype): false when they reject one of them
/// by name. Calls past the checks on the CPU run (the views are zeros); on CUDA they fail inside the
/// backend (no GPU here), with a message that names no argument.
bool takes_dtype(Device device, const std::string& name, const std::vector<std::size_t>& indices, DType dtype) {
    Store store(device);
    OpContext ctx;
    ctx.device = device;
    for (const Case& k : cases(store)) {
        if (k.op != name) continue;
        std::vector<TensorView> a;
        for (const Arg& x : k.args) a.push_back(x.view);
        for (std::size_t i : indices) a[i].dtype = dtype;
        const std::vector<Param> params = parse_params(find_op(name)->params);
        try {
            k.call(ctx, a);
        } catch (const Error& e) {
            for (const Param& p : params)
                if (std::string(e.what()).rfind(name + ": " + p.name + " must be", 0) == 0) return false;
        }
        return true;
    }
    return false;
}

bool takes_bf16(Device device, const std::string& name, const std::vector<std::size_t>& indices) {
    return takes_dtype(device, name, indices, DType::BF16);
}

}  // namespace

class TestContract : public QObject {
    Q_OBJECT
private slots:
    void every_op_has_a_case() {
        Store store(Device::CPU);
        std::set<std::string> covered;
        for (const Case& k : cases(store)) covered.insert(k.op);
        for (const OpEntry& e : kOps)
            QVERIFY2(covered.count(e.name),
                     qPrintable(QStringLiteral("op %1 has no case in test_contract").arg(e.name)));
        QCOMPARE(covered.size(), std::size(kOps));
    }

    void parameters_parse() {
        const std::vector<Param> p = parse_params(find_op("matmul")->params);
        QCOMPARE(p.size(), std::size_t(8));
        QCOMPARE(p[0].name, std::string("ctx"));
        QCOMPARE(p[1].type, std::string("TensorView"));
        QCOMPARE(p[7].name, std::string("beta"));
    }

    void cpu_rejects_each_wrong_argument_by_name() { sweep(Device::CPU); }

    /// The same checks on a CUDA context (no GPU needed: every call here must fail in the dispatcher).
    void cuda_context_rejects_each_wrong_argument_by_name() { sweep(Device::CUDA); }

    /// op_checks.cpp's kSixteenBitOps: which ops take 16-bit stored tensors on which device.
    void sixteen_bit_views_follow_the_table() {
        // Both devices: every op's stored activations and weight arguments (statistics and parameter
        // gradients stay f32), attention with one dtype for qkv and its output on CUDA.
        for (const Device d : {Device::CPU, Device::CUDA}) {
            QVERIFY(takes_bf16(d, "gelu_forward", {0, 1}));
            QVERIFY(takes_bf16(d, "layernorm_forward", {0, 3}));
            QVERIFY(takes_bf16(d, "layernorm_forward", {4}));   // w
            QVERIFY(!takes_bf16(d, "layernorm_forward", {1}));  // mean
            QVERIFY(takes_bf16(d, "dropout_add_forward", {0, 1, 2}));
            QVERIFY(takes_bf16(d, "bias_dropout_add_norm_forward", {0, 1, 4, 5}));  // out, norm_out, residual, x
            QVERIFY(!takes_bf16(d, "bias_dropout_add_norm_forward", {2}));          // mean
            QVERIFY(takes_bf16(d, "rope_forward", {0}));
            QVERIFY(takes_bf16(d, "embedding_forward", {0}));
            QVERIFY(takes_bf16(d, "attention_forward", {0, 2}));
            // AdamW: the working copy it writes (the 16-bit weights' arena) and the gradients it reads
            // (16-bit gradients, fp16 runs), not the fp32 master or moments.
            QVERIFY(takes_bf16(d, "adamw_update", {4}));
            QVERIFY(takes_bf16(d, "adamw_update", {1}));
            QVERIFY(takes_bf16(d, "adamw_update", {1, 4}));
            QVERIFY(!takes_bf16(d, "adamw_update", {0}));
            QVERIFY(!takes_bf16(d, "adamw_update", {2}));
            QVERIFY(!takes_bf16(d, "adamw_update", {3}));
        }
        QVERIFY(!takes_bf16(Device::CUDA, "attention_forward", {2}));  // qkv alone: out must match it
    }
    /// op_checks.cpp's kF16GradientOps: the parameter-gradient arguments that take the f16 gradient
    /// arena (fp16 runs without accumulate_allreduce_grads_in_fp32), on both devices; never bf16.
    void f16_gradients_follow_the_table() {
        struct Grad {
            const char* op;
            std::vector<std::size_t> args;
        };
        const Grad grads[] = {
            {"linear_backward", {2}},           // dbias (dw is a GEMM output: any storage dtype)
            {"linear_backward_gelu", {1}},      // dpre_bias
            {"linear_backward_gelu", {3}},      // dbias
            {"embedding_backward", {0}},        // dtable
            {"position_embedding_backward", {0}},
            {"layernorm_backward", {1, 2}},     // dw, db
            {"rmsnorm_backward", {1}},          // dw
        };
        for (const Device d : {Device::CPU, Device::CUDA}) {
            for (const Grad& g : grads) {
                QVERIFY2(takes_dtype(d, g.op, g.args, DType::F16), g.op);
                QVERIFY2(!takes_dtype(d, g.op, g.args, DType::BF16), g.op);
            }
            // The gradient norm reads an f16 arena too.
            QVERIFY(takes_dtype(d, "sum_squares_ranges", {1}, DType::F16));
            QVERIFY(!takes_dtype(d, "sum_squares_ranges", {1}, DType::BF16));
            QVERIFY(!takes_dtype(d, "layernorm_backward", {5}, DType::F16));  // mean stays f32
        }
    }

    void scalar_arguments_are_named() {
        OpContext ctx;
        std::vector<float> x(12);
        const TensorView v = view_f32(x.data(), {3, 4});
        const auto message = [](const std::function<void()>& f) -> std::string {
            try {
                f();
            } catch (const Error& e) {
                return e.what();
            }
            return "no error";
        };
        QVERIFY(message([&] { ops::dropout_forward(ctx, v, v, 1.0f, {}, 0); }).rfind("dropout_forward: p must be", 0) ==
                0);
        QVERIFY(message([&] {
                    ops::dropout_forward(ctx, v, v, 0.1f, {}, -4);
                }).rfind("dropout_forward: element_offset must be", 0) == 0);
        QVERIFY(message([&] { ops::round_to(ctx, v, DType::I32); }).rfind("round_to: dtype must be", 0) == 0);
        AdamWParams p;
        p.step = 0;
        QVERIFY(message([&] { ops::adamw_update(ctx, v, v, v, v, p); }).rfind("adamw_update: p.step must be", 0) == 0);
    }
};

MWB_TEST_SUITE_APPLESS(test_kernels_contract, TestContract)
}  // namespace test_kernels_contract
#include "test_contract.moc"
