// cuDNN's backend API through dlopen'ed entry points: the declarations come from cudnn_graph.h (types
// and enums only; nothing is linked), the addresses from the library found at run time.
#include "cudnn_sdpa.h"

#include "dynamic_library.h"
#include "mwb/kernels/error.h"
#include "runtime.h"

#include <map>
#include <memory>
#include <mutex>

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>

namespace mwb::cuda::cudnn {

namespace {

using namespace cudnn_sdpa;

/// The entry points this file calls, resolved by name.
struct Api {
    decltype(&cudnnGetVersion) get_version = nullptr;
    decltype(&cudnnGetErrorString) error_string = nullptr;
    decltype(&cudnnCreate) create = nullptr;
    decltype(&cudnnSetStream) set_stream = nullptr;
    decltype(&cudnnBackendCreateDescriptor) create_descriptor = nullptr;
    decltype(&cudnnBackendDestroyDescriptor) destroy_descriptor = nullptr;
    decltype(&cudnnBackendSetAttribute) set_attribute = nullptr;
    decltype(&cudnnBackendGetAttribute) get_attribute = nullptr;
    decltype(&cudnnBackendFinalize) finalize = nullptr;
    decltype(&cudnnBackendExecute) execute = nullptr;
    std::string error;  // empty once every symbol resolved
};

const Api& api() {
    static const Api a = [] {
        Api r;
        DynamicLibrary lib = open_cuda_library("libcudnn.so.9", "MWB_CUDNN_LIBRARY");
        lib.resolve(r.get_version, "cudnnGetVersion");
        lib.resolve(r.error_string, "cudnnGetErrorString");
        lib.resolve(r.create, "cudnnCreate");
        lib.resolve(r.set_stream, "cudnnSetStream");
        lib.resolve(r.create_descriptor, "cudnnBackendCreateDescriptor");
        lib.resolve(r.destroy_descriptor, "cudnnBackendDestroyDescriptor");
        lib.resolve(r.set_attribute, "cudnnBackendSetAttribute");
        lib.resolve(r.get_attribute, "cudnnBackendGetAttribute");
        lib.resolve(r.finalize, "cudnnBackendFinalize");
        lib.resolve(r.execute, "cudnnBackendExecute");
        r.error = lib.error;
        if (r.error.empty() && r.get_version() < 90000)
            r.error = fmt::format("cuDNN {} is older than 9.0 (fused attention needs 9)", r.get_version());
        return r;  // the library stays loaded for the process
    }();
    return a;
}

/// A cuDNN call's failure as text ("" on success).
std::string status_text(cudnnStatus_t st, const char* what) {
    if (st == CUDNN_STATUS_SUCCESS) return {};
    return fmt::format("{}: {} ({})", what, api().error_string(st), static_cast<int>(st));
}

/// One backend descriptor, destroyed with its owner.
class Desc {
public:
    explicit Desc(cudnnBackendDescriptorType_t type) {
        if (const std::string e = status_text(api().create_descriptor(type, &d_), "cudnnBackendCreateDescriptor");
            !e.empty())
            throw Error(e);
    }
    Desc(const Desc&) = delete;
    Desc& operator=(const Desc&) = delete;
    ~Desc() {
        if (d_) api().destroy_descriptor(d_);
    }
    cudnnBackendDescriptor_t get() const { return d_; }

    template <class T>
    void set(cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type, const T& value, int64_t n = 1) {
        check(api().set_attribute(d_, attr, type, n, &value), "cudnnBackendSetAttribute");
    }
    void set_desc(cudnnBackendAttributeName_t attr, const Desc& other) {
        cudnnBackendDescriptor_t o = other.get();
        set(attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, o);
    }
    /// cudnnBackendFinalize's status (callers decide whether a refusal is an error).
    cudnnStatus_t finalize() { return api().finalize(d_); }

private:
    static void check(cudnnStatus_t st, const char* what) {
        if (const std::string e = status_text(st, what); !e.empty()) throw Error(e);
    }
    cudnnBackendDescriptor_t d_ = nullptr;
};

cudnnDataType_t data_type(Type t) {
    switch (t) {
    case Type::BF16: return CUDNN_DATA_BFLOAT16;
    case Type::F16: return CUDNN_DATA_HALF;
    case Type::F32: return CUDNN_DATA_FLOAT;
    case Type::I32: return CUDNN_DATA_INT32;
    case Type::I64: return CUDNN_DATA_INT64;
    default: return CUDNN_DATA_BOOLEAN;
    }
}

cudnnPointwiseMode_t pointwise_mode(Mode m) {
    switch (m) {
    case Mode::Mul: return CUDNN_POINTWISE_MUL;
    case Mode::Add: return CUDNN_POINTWISE_ADD;
    case Mode::Sub: return CUDNN_POINTWISE_SUB;
    case Mode::Div: return CUDNN_POINTWISE_DIV;
    case Mode::Exp: return CUDNN_POINTWISE_EXP;
    case Mode::Log: return CUDNN_POINTWISE_LOG;
    case Mode::Identity: return CUDNN_POINTWISE_IDENTITY;
    case Mode::GenIndex: return CUDNN_POINTWISE_GEN_INDEX;
    case Mode::CmpGe: return CUDNN_POINTWISE_CMP_GE;
    default: return CUDNN_POINTWISE_BINARY_SELECT;
    }
}

/// Every descriptor of a plan, finalized one by one: tensors by uid, operations in order.
struct Nodes {
    std::map<int64_t, std::unique_ptr<Desc>> tensors;
    std::vector<std::unique_ptr<Desc>> ops, parts;  // operations; their mode descriptors (kept alive)
    std::string error;                              // the first refusal

    bool finalize(Desc& d, const std::string& what) {
        if (!error.empty()) return false;
        error = status_text(d.finalize(), what.c_str());
        return error.empty();
    }

    explicit Nodes(const Plan& plan) {
        for (const Tensor& t : plan.tensors) {
            auto d = std::make_unique<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
            d->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, data_type(t.type));
            d->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, t.dims[0], 4);
            d->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, t.strides[0], 4);
            d->set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, t.uid);
            d->set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, int64_t{16});
            d->set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, t.is_virtual);
            if (t.by_value) d->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, true);
            if (!finalize(*d, "tensor " + t.name)) return;
            tensors[t.uid] = std::move(d);
        }
        for (const Node& n : plan.nodes)
            if (!add(n)) return;
    }

    bool add(const Node& n) {
        const auto t = [&](int64_t uid) -> Desc& { return *tensors.at(uid); };
        std::unique_ptr<Desc> op;
        switch (n.op) {
        case Op::Pointwise: {
            auto mode = std::make_unique<Desc>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
            mode->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, pointwise_mode(n.mode));
            mode->set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, data_type(n.compute));
            if (n.mode == Mode::GenIndex) mode->set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, n.axis);
            if (!finalize(*mode, n.name + " (pointwise mode)")) return false;
            op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
            op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *mode);
            op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, t(n.x));
            if (n.b) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, t(n.b));
            if (n.t) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t(n.t));
            op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, t(n.y));
            parts.push_back(std::move(mode));
            break;
        }
        case Op::Matmul: {
            auto mm = std::make_unique<Desc>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
            mm->set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
            if (!finalize(*mm, n.name + " (matmul)")) return false;
            op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
            op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, t(n.x));
            op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, t(n.b));
            op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, t(n.y));
            op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, *mm);
            parts.push_back(std::move(mm));
            break;
        }
        case Op::Reduction: {
            auto red = std::make_unique<Desc>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
            const cudnnReduceTensorOp_t how = n.mode == Mode::Max ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_ADD;
            red->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, how);
            red->set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
            if (!finalize(*red, n.name + " (reduction)")) return false;
            op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
            op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, t(n.x));
            op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, t(n.y));
            op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, *red);
            parts.push_back(std::move(red));
            break;
        }
        case Op::Rng: {
            auto rng = std::make_unique<Desc>(CUDNN_BACKEND_RNG_DESCRIPTOR);
            rng->set(CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_TYPE_RNG_DISTRIBUTION, CUDNN_RNG_DISTRIBUTION_BERNOULLI);
            rng->set(CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, CUDNN_TYPE_DOUBLE, n.probability);
            if (!finalize(*rng, n.name + " (rng)")) return false;
            op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR);
            op->set_desc(CUDNN_ATTR_OPERATION_RNG_YDESC, t(n.y));
            op->set_desc(CUDNN_ATTR_OPERATION_RNG_SEED, t(n.x));
            op->set_desc(CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, t(n.b));
            op->set_desc(CUDNN_ATTR_OPERATION_RNG_DESC, *rng);
            parts.push_back(std::move(rng));
            break;
        }
        case Op::Reshape:
            op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
            op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, t(n.x));
            op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, t(n.y));
            break;
        }
        if (!finalize(*op, n.name)) return false;
        ops.push_back(std::move(op));
        return true;
    }
};

/// A shape's finalized execution plan, its workspace size and the host values of its by-value scalars.
struct Executable {
    Nodes nodes;
    std::unique_ptr<Desc> graph, plan;
    int64_t workspace = 0;
    std::vector<std::pair<int64_t, float>> scalars;
    std::string refused;  // non-empty: cuDNN has no engine for this graph (cached too)
    explicit Executable(const Plan& p) : nodes(p) {}
};

cudnnHandle_t handle() {
    thread_local cudnnHandle_t h = [] {
        cudnnHandle_t made = nullptr;
        if (const std::string e = status_text(api().create(&made), "cudnnCreate"); !e.empty()) throw Error(e);
        return made;  // lives until the process ends, as the cuBLAS handles
    }();
    return h;
}

std::unique_ptr<Executable> build(const Plan& p) {
    auto ex = std::make_unique<Executable>(p);
    if (!ex->nodes.error.empty()) {
        ex->refused = ex->nodes.error;
        return ex;
    }
    for (const Tensor& t : p.tensors)
        if (t.by_value) ex->scalars.emplace_back(t.uid, t.value);
    cudnnHandle_t h = handle();
    ex->graph = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    std::vector<cudnnBackendDescriptor_t> ops;
    for (const auto& op : ex->nodes.ops) ops.push_back(op->get());
    ex->graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops[0], static_cast<int64_t>(ops.size()));
    ex->graph->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, h);
    if (std::string e = status_text(ex->graph->finalize(), "operation graph"); !e.empty()) {
        ex->refused = std::move(e);
        return ex;
    }
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *ex->graph);
    heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, CUDNN_HEUR_MODE_A);
    if (std::string e = status_text(heur.finalize(), "engine heuristics"); !e.empty()) {
        ex->refused = std::move(e);
        return ex;
    }
    int64_t count = 0;
    api().get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
    std::vector<std::unique_ptr<Desc>> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
        configs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
        raw.push_back(configs.back()->get());
    }
    if (count > 0)
        api().get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                            raw.data());
    std::string last = "no engine configuration from the heuristics";
    for (int64_t i = 0; i < count; ++i) {  // the heuristics' order: the first that finalizes
        auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, h);
        plan->set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *configs[static_cast<size_t>(i)]);
        if (std::string e = status_text(plan->finalize(), "execution plan"); !e.empty()) {
            last = std::move(e);
            continue;
        }
        int64_t n = 0;
        api().get_attribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                            &ex->workspace);
        ex->plan = std::move(plan);
        return ex;
    }
    ex->refused = last;
    return ex;
}

/// The cuDNN workspace: its own scratch slot (runtime.h).
constexpr int kWorkspaceSlot = 4;

}  // namespace

const std::string& load_error() { return api().error; }

int64_t version() { return api().error.empty() ? static_cast<int64_t>(api().get_version()) : 0; }

const std::string& unavailable() {
    static const std::string why = []() -> std::string {
        if (!api().error.empty()) return api().error;
        try {
            handle();
        } catch (const std::exception& e) {
            return fmt::format("cuDNN {} loaded but has no handle on this GPU: {}", api().get_version(), e.what());
        }
        return {};
    }();
    return why;
}

std::string finalize_nodes(const Plan& plan) {
    if (!api().error.empty()) return api().error;
    return Nodes(plan).error;
}

namespace {
/// The cached executable of `key`, built from `plan` on first use (nullptr: look up only).
Executable* executable(const std::string& key, const Plan* plan) {
    static std::mutex mutex;
    static std::map<std::string, std::unique_ptr<Executable>> cache;
    std::lock_guard lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second.get();
    if (!plan) return nullptr;
    return (cache[key] = build(*plan)).get();
}
}  // namespace

bool prepare(const std::string& key, const Plan& plan, std::string& why) {
    why = executable(key, &plan)->refused;
    return why.empty();
}

bool execute(const std::string& key, const std::vector<std::pair<int64_t, void*>>& pointers, cudaStream_t stream,
             std::string& why) {
    Executable* ex = executable(key, nullptr);
    if (!ex || !ex->refused.empty()) {
        why = ex ? ex->refused : "no graph was prepared for " + key;
        return false;
    }
    std::vector<int64_t> uids;
    std::vector<void*> data;
    for (const auto& [uid, ptr] : pointers) {
        uids.push_back(uid);
        data.push_back(ptr);
    }
    std::vector<float> values;  // by-value scalars: host pointers, read when the plan executes
    values.reserve(ex->scalars.size());
    for (const auto& [uid, v] : ex->scalars) {
        values.push_back(v);
        uids.push_back(uid);
        data.push_back(&values.back());
    }
    void* workspace = ex->workspace > 0 ? scratch(kWorkspaceSlot, ex->workspace, stream) : nullptr;
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids[0], static_cast<int64_t>(uids.size()));
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, data[0], static_cast<int64_t>(data.size()));
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace);
    if (const std::string e = status_text(pack.finalize(), "variant pack"); !e.empty()) throw Error(e);
    cudnnHandle_t h = handle();
    if (const std::string e = status_text(api().set_stream(h, stream), "cudnnSetStream"); !e.empty()) throw Error(e);
    if (const std::string e = status_text(api().execute(h, ex->plan->get(), pack.get()), "cudnnBackendExecute");
        !e.empty())
        throw Error(e);
    return true;
}

}  // namespace mwb::cuda::cudnn

#else  // built without cuDNN's headers: nothing to load

namespace mwb::cuda::cudnn {
namespace {
const std::string kNoHeaders = "this build has no cuDNN headers (cudnn_graph.h was not found when it was compiled)";
}
const std::string& load_error() { return kNoHeaders; }
const std::string& unavailable() { return kNoHeaders; }
int64_t version() { return 0; }
std::string finalize_nodes(const cudnn_sdpa::Plan&) { return kNoHeaders; }
bool prepare(const std::string&, const cudnn_sdpa::Plan&, std::string& why) {
    why = kNoHeaders;
    return false;
}
bool execute(const std::string&, const std::vector<std::pair<int64_t, void*>>&, cudaStream_t, std::string& why) {
    why = kNoHeaders;
    return false;
}
}  // namespace mwb::cuda::cudnn

#endif

namespace mwb {

AttentionBackendChoice resolve_attention_backend(const std::string& requested, bool deterministic, bool sixteen_bit) {
    if (requested == "own") return {AttentionBackend::Own, "own: the own kernels, as asked"};
    const std::string who = requested == "cudnn" ? "cudnn" : "auto";
    const auto own = [&](const std::string& why) {
        return AttentionBackendChoice{AttentionBackend::Own, fmt::format("{}: the own kernels ({})", who, why)};
    };
    if (deterministic)
        return own("deterministic mode: bit-identical reruns with the CPU's dropout masks, which cuDNN's Philox "
                   "stream does not draw");
    if (!sixteen_bit) return own("an fp32 run: cuDNN's fused attention takes 16-bit inputs");
    int device = 0, major = 0, minor = 0;
    if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
        cudaGetLastError();
        return own(fmt::format("no CUDA device: {}", cudaGetErrorString(e)));
    }
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (major < 8) return own(fmt::format("sm_{}{}: cuDNN's fused attention needs sm_80 or newer", major, minor));
    if (const std::string& why = cuda::cudnn::unavailable(); !why.empty()) return own(why);
    return {AttentionBackend::Cudnn,
            fmt::format("{}: cuDNN {} fused attention (sm_{}{})", who, cuda::cudnn::version(), major, minor)};
}

}  // namespace mwb
