// Causal self-attention on CUDA, flash-attention style: scores are computed tile by tile in shared
// memory with an online softmax, so the S×S matrix never exists in device memory. Forward saves one
// log-sum-exp per query row (in `probs`, B·A·S floats); backward recomputes the probabilities from it.
// Dropout on the probabilities uses the CPU's Philox counters (global element index
// ((b·total_heads + head)·S + i)·S + j), so masks match the CPU op bit for bit.
//
// One thread owns one query row (forward, dq) or one key row (dk, dv) and keeps its D-vectors in
// registers; K/V (or Q/dO) tiles are shared by the block. No atomics: every sum has a fixed order,
// so results are bit-identical run to run. Head dims 16, 32, 64 and 128 are instantiated.
#include "cuda_ops.h"
#include "runtime.h"

#include "mwb/kernels/philox.h"

namespace mwb::cuda {

namespace {

constexpr int kRows = 64;  // query (or key) rows per block, one per thread
constexpr int kTile = 32;  // keys (or queries) per shared-memory tile

struct Geometry {
    int64_t S, B, A, D;
    int64_t ld_qkv, ld_out;
    int total_heads, head_offset;
    float scale;
    RngStream rng;
    uint32_t threshold;
    float keep_scale;
    int dropout;
};

__device__ __forceinline__ int tile_len(int64_t remaining) {
    return static_cast<int>(remaining < kTile ? remaining : kTile);
}
__device__ __forceinline__ int64_t qkv_offset(const Geometry& g, int64_t s, int64_t b, int64_t h) {
    return s * g.ld_qkv + b * g.A * 3 * g.D + h * 3 * g.D;
}
__device__ __forceinline__ int64_t out_offset(const Geometry& g, int64_t s, int64_t b, int64_t h) {
    return s * g.ld_out + b * g.A * g.D + h * g.D;
}
__device__ __forceinline__ float mask_mult(const Geometry& g, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!g.dropout) return 1.0f;
    const uint64_t idx = static_cast<uint64_t>(((b * g.total_heads + g.head_offset + h) * g.S + i) * g.S + j);
    return dropout_keep(g.rng, idx, g.threshold) ? g.keep_scale : 0.0f;
}

template <int D>
__global__ void __launch_bounds__(kRows) k_attn_fwd(float* out, float* lse, const float* qkv, Geometry g) {
    __shared__ float ks[kTile][D];
    __shared__ float vs[kTile][D];
    const int64_t pair = blockIdx.y, b = pair / g.A, h = pair % g.A;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
    const int64_t i = row0 + threadIdx.x;
    const bool active = i < g.S;
    float q[D], acc[D];
    const float* qi = qkv + qkv_offset(g, active ? i : 0, b, h);
#pragma unroll
    for (int d = 0; d < D; ++d) {
        q[d] = active ? qi[d] : 0.0f;
        acc[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int64_t last = min(g.S, row0 + kRows);  // keys this block needs: [0, last)
    for (int64_t k0 = 0; k0 < last; k0 += kTile) {
        __syncthreads();
        for (int e = threadIdx.x; e < kTile * D; e += kRows) {
            const int jj = e / D, d = e % D;
            const int64_t j = k0 + jj;
            const float* kj = qkv + qkv_offset(g, j < g.S ? j : 0, b, h);
            ks[jj][d] = j < g.S ? kj[D + d] : 0.0f;
            vs[jj][d] = j < g.S ? kj[2 * D + d] : 0.0f;
        }
        __syncthreads();
        if (!active) continue;
        const int jmax = tile_len(i - k0 + 1);
        for (int jj = 0; jj < jmax; ++jj) {
            float dot = 0.0f;
#pragma unroll
            for (int d = 0; d < D; ++d) dot += q[d] * ks[jj][d];
            const float s = g.scale * dot;
            const float m_new = fmaxf(m, s);
            const float corr = expf(m - m_new), e = expf(s - m_new);
            l = l * corr + e;
            const float w = e * mask_mult(g, b, h, i, k0 + jj);
#pragma unroll
            for (int d = 0; d < D; ++d) acc[d] = acc[d] * corr + w * vs[jj][d];
            m = m_new;
        }
    }
    if (!active) return;
    const float inv = 1.0f / l;
    float* oi = out + out_offset(g, i, b, h);
#pragma unroll
    for (int d = 0; d < D; ++d) oi[d] = acc[d] * inv;
    lse[pair * g.S + i] = m + logf(l);
}

/// Per query row: delta = dO·O (O recomputed), then dq = Σ_j dS_ij·k_j.
template <int D>
__global__ void __launch_bounds__(kRows) k_attn_bwd_dq(float* dqkv, float* delta, const float* dout, const float* qkv,
                                                       const float* lse, Geometry g) {
    __shared__ float ks[kTile][D];
    __shared__ float vs[kTile][D];
    const int64_t pair = blockIdx.y, b = pair / g.A, h = pair % g.A;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
    const int64_t i = row0 + threadIdx.x;
    const bool active = i < g.S;
    float q[D], dO[D], acc[D];
    const float* qi = qkv + qkv_offset(g, active ? i : 0, b, h);
    const float* doi = dout + out_offset(g, active ? i : 0, b, h);
#pragma unroll
    for (int d = 0; d < D; ++d) {
        q[d] = active ? qi[d] : 0.0f;
        dO[d] = active ? doi[d] : 0.0f;
        acc[d] = 0.0f;
    }
    const float L = active ? lse[pair * g.S + i] : 0.0f;
    const int64_t last = min(g.S, row0 + kRows);
    float dlt = 0.0f;
    for (int pass = 0; pass < 2; ++pass) {
        for (int64_t k0 = 0; k0 < last; k0 += kTile) {
            __syncthreads();
            for (int e = threadIdx.x; e < kTile * D; e += kRows) {
                const int jj = e / D, d = e % D;
                const int64_t j = k0 + jj;
                const float* kj = qkv + qkv_offset(g, j < g.S ? j : 0, b, h);
                ks[jj][d] = j < g.S ? kj[D + d] : 0.0f;
                vs[jj][d] = j < g.S ? kj[2 * D + d] : 0.0f;
            }
            __syncthreads();
            if (!active) continue;
            const int jmax = tile_len(i - k0 + 1);
            for (int jj = 0; jj < jmax; ++jj) {
                float dot = 0.0f;
#pragma unroll
                for (int d = 0; d < D; ++d) dot += q[d] * ks[jj][d];
                const float p = expf(g.scale * dot - L);
                const float mult = mask_mult(g, b, h, i, k0 + jj);
                if (pass == 0) {
                    // O_i = Σ_j p·mult·v_j
#pragma unroll
                    for (int d = 0; d < D; ++d) acc[d] += p * mult * vs[jj][d];
                } else {
                    float dpd = 0.0f;
#pragma unroll
                    for (int d = 0; d < D; ++d) dpd += dO[d] * vs[jj][d];
                    const float ds = g.scale * p * (dpd * mult - dlt);
#pragma unroll
                    for (int d = 0; d < D; ++d) acc[d] += ds * ks[jj][d];
                }
            }
        }
        if (pass == 0) {
#pragma unroll
            for (int d = 0; d < D; ++d) {
                dlt += dO[d] * acc[d];
                acc[d] = 0.0f;
            }
        }
    }
    if (!active) return;
    delta[pair * g.S + i] = dlt;
    float* dqi = dqkv + qkv_offset(g, i, b, h);
#pragma unroll
    for (int d = 0; d < D; ++d) dqi[d] = acc[d];
}

/// Per key row j: dv = Σ_{i≥j} p·mult·dO_i, dk = Σ_{i≥j} dS_ij·q_i.
template <int D>
__global__ void __launch_bounds__(kRows) k_attn_bwd_dkv(float* dqkv, const float* delta, const float* dout,
                                                        const float* qkv, const float* lse, Geometry g) {
    __shared__ float qs[kTile][D];
    __shared__ float dos[kTile][D];
    __shared__ float ls[kTile], dls[kTile];
    const int64_t pair = blockIdx.y, b = pair / g.A, h = pair % g.A;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
    const int64_t j = row0 + threadIdx.x;
    const bool active = j < g.S;
    float k[D], v[D], dk[D], dv[D];
    const float* base = qkv + qkv_offset(g, active ? j : 0, b, h);
#pragma unroll
    for (int d = 0; d < D; ++d) {
        k[d] = active ? base[D + d] : 0.0f;
        v[d] = active ? base[2 * D + d] : 0.0f;
        dk[d] = 0.0f;
        dv[d] = 0.0f;
    }
    for (int64_t q0 = row0; q0 < g.S; q0 += kTile) {
        __syncthreads();
        for (int e = threadIdx.x; e < kTile * D; e += kRows) {
            const int ii = e / D, d = e % D;
            const int64_t i = q0 + ii;
            qs[ii][d] = i < g.S ? qkv[qkv_offset(g, i, b, h) + d] : 0.0f;
            dos[ii][d] = i < g.S ? dout[out_offset(g, i, b, h) + d] : 0.0f;
        }
        for (int ii = threadIdx.x; ii < kTile; ii += kRows) {
            const int64_t i = q0 + ii;
            ls[ii] = i < g.S ? lse[pair * g.S + i] : 0.0f;
            dls[ii] = i < g.S ? delta[pair * g.S + i] : 0.0f;
        }
        __syncthreads();
        if (!active) continue;
        const int iend = tile_len(g.S - q0);
        for (int ii = 0; ii < iend; ++ii) {
            const int64_t i = q0 + ii;
            if (i < j) continue;
            float dot = 0.0f, dpd = 0.0f;
#pragma unroll
            for (int d = 0; d < D; ++d) {
                dot += qs[ii][d] * k[d];
                dpd += dos[ii][d] * v[d];
            }
            const float p = expf(g.scale * dot - ls[ii]);
            const float mult = mask_mult(g, b, h, i, j);
            const float ds = g.scale * p * (dpd * mult - dls[ii]);
            const float pd = p * mult;
#pragma unroll
            for (int d = 0; d < D; ++d) {
                dv[d] += pd * dos[ii][d];
                dk[d] += ds * qs[ii][d];
            }
        }
    }
    if (!active) return;
    float* dbase = dqkv + qkv_offset(g, j, b, h);
#pragma unroll
    for (int d = 0; d < D; ++d) {
        dbase[D + d] = dk[d];
        dbase[2 * D + d] = dv[d];
    }
}

Geometry geometry(const char* op, const TensorView& qkv, const TensorView& out, const TensorView& lse,
                  const AttentionParams& p) {
    require(op, "qkv", qkv, DType::F32);
    require(op, "out/dout", out, DType::F32);
    require(op, "probs (log-sum-exp)", lse, DType::F32);
    MWB_CHECK(qkv.ndim == 3 && p.num_heads > 0 && p.batch > 0 && qkv.dim(1) == p.batch &&
                  qkv.dim(2) % (3 * p.num_heads) == 0,
              "{}: qkv {} must be (S, B={}, A·3·D) with A={}", op, qkv.describe(), p.batch, p.num_heads);
    Geometry g{};
    g.S = qkv.dim(0);
    g.B = qkv.dim(1);
    g.A = p.num_heads;
    g.D = qkv.dim(2) / (3 * p.num_heads);
    g.ld_qkv = g.B * g.A * 3 * g.D;
    g.ld_out = g.B * g.A * g.D;
    MWB_CHECK(out.numel() == g.S * g.B * g.A * g.D, "{}: out {} must be (S={}, B={}, A·D={})", op, out.describe(), g.S,
              g.B, g.A * g.D);
    MWB_CHECK(lse.numel() == g.B * g.A * g.S,
              "{}: on CUDA `probs` {} holds the row log-sum-exps (B={}, A={}, S={}); size it with "
              "ops::attention_saved_elements", op, lse.describe(), g.B, g.A, g.S);
    MWB_CHECK(p.head_offset >= 0 && p.head_offset + p.num_heads <= p.total_heads,
              "{}: heads [{}, {}) outside the layer's {} heads", op, p.head_offset, p.head_offset + p.num_heads,
              p.total_heads);
    MWB_CHECK(p.dropout_p >= 0.0f && p.dropout_p < 1.0f, "{}: attention dropout {} must be in [0, 1)", op,
              p.dropout_p);
    MWB_CHECK(g.D == 16 || g.D == 32 || g.D == 64 || g.D == 128,
              "{}: head dim {} has no CUDA kernel (16, 32, 64 or 128)", op, g.D);
    g.total_heads = p.total_heads;
    g.head_offset = p.head_offset;
    g.scale = p.softmax_scale;
    g.rng = p.rng;
    g.threshold = dropout_keep_threshold(p.dropout_p);
    g.keep_scale = p.dropout_p < 1.0f ? 1.0f / (1.0f - p.dropout_p) : 0.0f;
    g.dropout = p.dropout_p > 0.0f;
    return g;
}

dim3 grid_of(const Geometry& g) {
    return dim3(static_cast<unsigned>((g.S + kRows - 1) / kRows), static_cast<unsigned>(g.B * g.A));
}

template <int D>
void forward_d(cudaStream_t s, float* out, float* lse, const float* qkv, const Geometry& g) {
    k_attn_fwd<D><<<grid_of(g), kRows, 0, s>>>(out, lse, qkv, g);
}

template <int D>
void backward_d(cudaStream_t s, float* dqkv, float* delta, const float* dout, const float* qkv, const float* lse,
                const Geometry& g) {
    k_attn_bwd_dq<D><<<grid_of(g), kRows, 0, s>>>(dqkv, delta, dout, qkv, lse, g);
    k_attn_bwd_dkv<D><<<grid_of(g), kRows, 0, s>>>(dqkv, delta, dout, qkv, lse, g);
}

}  // namespace

int64_t attention_workspace_bytes(const AttentionParams& p, int64_t seq_len) {
    return static_cast<int64_t>(p.batch) * p.num_heads * seq_len * static_cast<int64_t>(sizeof(float));
}

int64_t attention_saved_elements(const AttentionParams& p, int64_t seq_len) {
    return static_cast<int64_t>(p.batch) * p.num_heads * seq_len;
}

void attention_forward(OpContext& ctx, TensorView out, TensorView probs, TensorView qkv, TensorView,
                       const AttentionParams& p) {
    const Geometry g = geometry("attention_forward", qkv, out, probs, p);
    if (g.S == 0) return;
    float* o = static_cast<float*>(out.data);
    float* l = static_cast<float*>(probs.data);
    const float* x = static_cast<const float*>(qkv.data);
    const cudaStream_t s = stream_of(ctx);
    switch (g.D) {
    case 16: forward_d<16>(s, o, l, x, g); break;
    case 32: forward_d<32>(s, o, l, x, g); break;
    case 64: forward_d<64>(s, o, l, x, g); break;
    default: forward_d<128>(s, o, l, x, g); break;
    }
    check_launch("attention_forward");
}

void attention_backward(OpContext& ctx, TensorView dqkv, TensorView dout, TensorView qkv, TensorView probs,
                        TensorView workspace, const AttentionParams& p) {
    const Geometry g = geometry("attention_backward", qkv, dout, probs, p);
    require("attention_backward", "dqkv", dqkv, DType::F32);
    MWB_CHECK(dqkv.numel() == qkv.numel(), "attention_backward: dqkv {} for qkv {}", dqkv.describe(), qkv.describe());
    MWB_CHECK(workspace.device == Device::CUDA &&
                  workspace.numel() * static_cast<int64_t>(dtype_size(workspace.dtype)) >=
                      attention_workspace_bytes(p, g.S),
              "attention_backward: workspace {} smaller than the {} bytes needed", workspace.describe(),
              attention_workspace_bytes(p, g.S));
    if (g.S == 0) return;
    float* dx = static_cast<float*>(dqkv.data);
    float* delta = static_cast<float*>(workspace.data);
    const float* d = static_cast<const float*>(dout.data);
    const float* x = static_cast<const float*>(qkv.data);
    const float* l = static_cast<const float*>(probs.data);
    const cudaStream_t s = stream_of(ctx);
    switch (g.D) {
    case 16: backward_d<16>(s, dx, delta, d, x, l, g); break;
    case 32: backward_d<32>(s, dx, delta, d, x, l, g); break;
    case 64: backward_d<64>(s, dx, delta, d, x, l, g); break;
    default: backward_d<128>(s, dx, delta, d, x, l, g); break;
    }
    check_launch("attention_backward");
}

}  // namespace mwb::cuda
