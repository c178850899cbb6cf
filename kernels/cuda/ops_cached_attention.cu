// Generation's attention over the key/value cache on CUDA (contract: ops.h; shapes checked in
// src/ops.cpp): one launch appends the new tokens' k and v to the cache, a second runs one block per
// (token, query head) over its row (cached_attention_kernels.cuh). A decode step is a few tokens against
// up to the whole context, so the work is one pass over each row's cache; its cost next to the weights'
// is small at short contexts. No atomics: the warps' partials merge in a fixed order.
#include "cached_attention_kernels.cuh"
#include "cuda_ops.h"
#include "runtime.h"

namespace mwb::cuda {

namespace {

using namespace cached_attention;

template <int P>
void attend(cudaStream_t s, float* out, const float* qkv, const float* k, const float* v, const int32_t* rows,
            const int32_t* positions, const Geometry& g) {
    const dim3 grid(static_cast<unsigned>(g.n), static_cast<unsigned>(g.A));
    const std::size_t shared = static_cast<std::size_t>(kWarps * (2 + g.D)) * sizeof(float);
    k_cached_attention<P><<<grid, kThreads, shared, s>>>(out, qkv, k, v, rows, positions, g);
}

}  // namespace

void cached_attention_forward(OpContext& ctx, TensorView out, TensorView k_cache, TensorView v_cache, TensorView qkv,
                              TensorView rows, TensorView positions, const AttentionParams& p) {
    const char* op = "cached_attention_forward";
    require(op, "out", out, DType::F32);
    require(op, "k_cache", k_cache, DType::F32);
    require(op, "v_cache", v_cache, DType::F32);
    require(op, "qkv", qkv, DType::F32);
    require(op, "rows", rows, DType::I32);
    require(op, "positions", positions, DType::I32);
    Geometry g{};
    g.n = qkv.dim(0);
    g.A = p.num_heads;
    g.G = p.groups();
    g.R = k_cache.dim(0);
    g.L = k_cache.dim(2);
    g.D = k_cache.dim(3);
    g.per_group = static_cast<int>(g.A / g.G);
    g.scale = p.softmax_scale;
    MWB_CHECK(g.D <= 32 * kMaxPerLane, "{}: head dim {} has no CUDA kernel (at most {})", op, g.D, 32 * kMaxPerLane);
    MWB_CHECK(g.n <= 65535, "{}: {} tokens in one call (at most 65535)", op, g.n);
    if (g.n == 0) return;
    const cudaStream_t s = stream_of(ctx);
    float *K = static_cast<float*>(k_cache.data), *V = static_cast<float*>(v_cache.data);
    const float* x = static_cast<const float*>(qkv.data);
    const auto* r = static_cast<const int32_t*>(rows.data);
    const auto* pos = static_cast<const int32_t*>(positions.data);
    const int64_t elements = g.n * g.G * g.D;
    if (elements < (int64_t{1} << 31))
        k_cache_append<uint32_t><<<blocks_for(elements), kElementwiseThreads, 0, s>>>(K, V, x, r, pos, g);
    else
        k_cache_append<int64_t><<<blocks_for(elements), kElementwiseThreads, 0, s>>>(K, V, x, r, pos, g);
    check_launch(op);
    float* o = static_cast<float*>(out.data);
    switch ((g.D + 31) / 32) {
        case 1:
            attend<1>(s, o, x, K, V, r, pos, g);
            break;
        case 2:
            attend<2>(s, o, x, K, V, r, pos, g);
            break;
        case 3:
            attend<3>(s, o, x, K, V, r, pos, g);
            break;
        case 4:
            attend<4>(s, o, x, K, V, r, pos, g);
            break;
        case 5:
            attend<5>(s, o, x, K, V, r, pos, g);
            break;
        case 6:
            attend<6>(s, o, x, K, V, r, pos, g);
            break;
        case 7:
            attend<7>(s, o, x, K, V, r, pos, g);
            break;
        default:
            attend<8>(s, o, x, K, V, r, pos, g);
            break;
    }
    check_launch(op);
}

}  // namespace mwb::cuda
