// The cuBLASLt plan cache: descriptors, layouts, preference and the heuristic's algorithm per key.
#include "gemm_lt.h"

#include "mwb/kernels/device_runtime.h"

#include <algorithm>
#include <unordered_map>

namespace mwb::cuda {

namespace {

/// Plans beyond which the cache starts over (shapes are static in training; decoding with a growing
/// KV cache or changing batch sizes would otherwise grow it without bound).
constexpr std::size_t kMaxPlans = 1024;

cublasLtEpilogue_t lt_epilogue(LtEpilogue e) {
    switch (e) {
        case LtEpilogue::Default:
            return CUBLASLT_EPILOGUE_DEFAULT;
        case LtEpilogue::Bias:
            return CUBLASLT_EPILOGUE_BIAS;
        case LtEpilogue::GeluAux:
            return CUBLASLT_EPILOGUE_GELU_AUX;
        case LtEpilogue::GeluAuxBias:
            return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        case LtEpilogue::DGelu:
            return CUBLASLT_EPILOGUE_DGELU;
        case LtEpilogue::DGeluBGrad:
            return CUBLASLT_EPILOGUE_DGELU_BGRAD;
        case LtEpilogue::BGradB:
            return CUBLASLT_EPILOGUE_BGRADB;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
}

struct LtPlan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool usable = false;  ///< the heuristic offered an algorithm

    void destroy() {
        if (d) cublas().cublasLtMatrixLayoutDestroy(d);
        if (b) cublas().cublasLtMatrixLayoutDestroy(b);
        if (a) cublas().cublasLtMatrixLayoutDestroy(a);
        if (desc) cublas().cublasLtMatmulDescDestroy(desc);
        *this = LtPlan{};
    }
};

template <typename T>
bool set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
    return cublas().cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
}

template <typename T>
bool set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
    return cublas().cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
}

/// A contiguous column-major layout of a (rows, cols) matrix.
bool make_layout(cublasLtMatrixLayout_t* l, int type, int64_t rows, int64_t cols) {
    return cublas().cublasLtMatrixLayoutCreate(l, static_cast<cudaDataType_t>(type), static_cast<uint64_t>(rows),
                                      static_cast<uint64_t>(cols), std::max<int64_t>(rows, 1)) == CUBLAS_STATUS_SUCCESS;
}

/// Builds the descriptors of `k` and asks the heuristic for its best algorithm (usable = false when
/// any step fails or none fits).
LtPlan make_plan(const LtKey& k) {
    LtPlan p;
    const auto fail = [&p] {
        p.destroy();
        return p;
    };
    if (cublas().cublasLtMatmulDescCreate(&p.desc, static_cast<cublasComputeType_t>(k.compute), CUDA_R_32F) !=
        CUBLAS_STATUS_SUCCESS)
        return fail();
    const cublasOperation_t ta = k.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, ta) || !set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, tb) ||
        !set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(k.epilogue)))
        return fail();
    if ((lt_reads_bias(k.epilogue) || lt_writes_bias_gradient(k.epilogue)) &&
        !set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<cudaDataType_t>(k.type_bias)))
        return fail();
    if (lt_uses_aux(k.epilogue) && !set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, k.m)) return fail();
    // Stored shapes: op(A) is (m, k), op(B) (k, n).
    if (!make_layout(&p.a, k.type_a, k.trans_a ? k.k : k.m, k.trans_a ? k.m : k.k) ||
        !make_layout(&p.b, k.type_b, k.trans_b ? k.n : k.k, k.trans_b ? k.k : k.n) ||
        !make_layout(&p.d, k.type_d, k.m, k.n))
        return fail();
    cublasLtMatmulPreference_t pref = nullptr;
    if (cublas().cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return fail();
    const uint64_t ws = kLtWorkspace;
    // Parameters are slices of one arena and activations of scratch areas: the heuristic is told how
    // aligned each operand really is.
    bool ok = set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws) &&
              set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k.align_a) &&
              set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k.align_b) &&
              set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k.align_d) &&
              set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k.align_d);
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    ok = ok &&
         cublas().cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), p.desc, p.a, p.b, p.d, p.d, pref, 1, &heur, &found) ==
             CUBLAS_STATUS_SUCCESS &&
         found > 0 && heur.state == CUBLAS_STATUS_SUCCESS;
    cublas().cublasLtMatmulPreferenceDestroy(pref);
    if (!ok) return fail();
    p.algo = heur.algo;
    p.usable = true;
    return p;
}

/// This thread's plans (the ops run on one thread per device, as the handles).
std::unordered_map<LtKey, LtPlan, LtKeyHash>& plans() {
    // No destructor runs the descriptors' teardown: like the handles, they live until the process ends.
    thread_local auto* cache = new std::unordered_map<LtKey, LtPlan, LtKeyHash>();
    return *cache;
}

}  // namespace

bool lt_matmul(cudaStream_t stream, const LtKey& key, const LtOperands& p, float alpha, float beta) {
    auto& cache = plans();
    auto it = cache.find(key);
    if (it == cache.end()) {
        if (cache.size() >= kMaxPlans) {
            for (auto& [k, plan] : cache) plan.destroy();
            cache.clear();
        }
        it = cache.emplace(key, make_plan(key)).first;
    }
    LtPlan& plan = it->second;
    if (!plan.usable) return false;
    // Per call: only the pointers the epilogue reads or writes.
    if (lt_reads_bias(key.epilogue) || lt_writes_bias_gradient(key.epilogue))
        MWB_CUBLAS_CHECK(
            cublas().cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
    if (lt_uses_aux(key.epilogue))
        MWB_CUBLAS_CHECK(cublas().cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux,
                                                        sizeof(p.aux)));
    void* workspace = scratch(1, kLtWorkspace, stream);
    // A refusal at launch (an argument the heuristic did not see) queues nothing: the plan is marked
    // unusable and the caller's unfused path runs, now and for every later call with this key.
    if (cublas().cublasLtMatmul(cublaslt_handle(), plan.desc, &alpha, p.a, plan.a, p.b, plan.b, &beta, p.d, plan.d, p.d, plan.d,
                       &plan.algo, workspace, kLtWorkspace, stream) != CUBLAS_STATUS_SUCCESS) {
        plan.destroy();
        return false;
    }
    return true;
}

float* lt_bias_gradient_scratch(cudaStream_t stream, int64_t n) {
    const int64_t bytes = (n * 4 + 255) / 256 * 256;
    return reinterpret_cast<float*>(static_cast<char*>(scratch(1, kLtWorkspace + bytes, stream)) + kLtWorkspace);
}

namespace {
thread_local device::FusedGemmCounts g_counts;
}

void lt_count(bool fused) {
    ++(fused ? g_counts.fused : g_counts.unfused);
}

}  // namespace mwb::cuda

namespace mwb::device {
FusedGemmCounts fused_gemm_counts() {
    return cuda::g_counts;
}
}  // namespace mwb::device
