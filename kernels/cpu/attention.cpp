// Causal self-attention core on the CPU (multi-head, grouped-query and multi-query): per (batch, query
// head), scaled q·kᵀ, causal softmax, dropout, ×v, and the exact backward. Query heads of one group read
// their group's K and V in place (never expanded). Work is tiled in row blocks of kTile so that only the
// lower triangle (plus the diagonal tiles) is ever multiplied. Forward runs (b, head) pairs in parallel,
// backward (b, group) pairs, so each group's dk and dv sum over its query heads in a fixed order without
// sharing writes; with fewer (b, group) pairs than threads (multi-query attention at micro-batch 1) the
// row and column tiles of each head run in parallel instead. OpenBLAS runs single-threaded inside the
// parallel region, so every GEMM is sequential and results are the same for any thread count.
#include "cpu_ops.h"
#include "dropout_mask.h"
#include "storage.h"
#include "vec_math.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

namespace mwb::cpu {

namespace {

constexpr int64_t kTile = 64;

struct HeadGeometry {
    int64_t S, B, A, G, D;  // G key/value groups of A/G query heads
    int64_t per_group() const { return A / G; }
    int64_t group_width() const { return (A / G + 2) * D; }  // [q_0 … q_(A/G-1) | k | v]
    int64_t ld_qkv() const { return B * G * group_width(); }
    int64_t ld_out() const { return B * A * D; }
    // Offsets of q, k, v (S×D matrices with leading dimension ld_qkv) of query head h of sequence b;
    // k and v are those of h's group.
    int64_t group(int64_t b, int64_t h) const { return b * G * group_width() + h / per_group() * group_width(); }
    int64_t q(int64_t b, int64_t h) const { return group(b, h) + h % per_group() * D; }
    int64_t k(int64_t b, int64_t h) const { return group(b, h) + per_group() * D; }
    int64_t v(int64_t b, int64_t h) const { return k(b, h) + D; }
    int64_t o(int64_t b, int64_t h) const { return b * A * D + h * D; }
};

/// The head layout of qkv (S, B, G·(A/G + 2)·D); the dispatcher has checked it against p.
HeadGeometry geometry(const TensorView& qkv, const AttentionParams& p) {
    return {qkv.dim(0), qkv.dim(1), p.num_heads, p.groups(), qkv.dim(2) / p.qkv_heads()};
}

float* thread_scratch(const TensorView& workspace, int64_t seq_len) {
    return static_cast<float*>(workspace.data) + static_cast<int64_t>(omp_get_thread_num()) * 2 * seq_len * seq_len;
}

/// Global index of element (i, 0) of the probability matrix of (b, local head h): masks depend on it only.
uint64_t mask_row_index(const HeadGeometry& g, const AttentionParams& p, int64_t b, int64_t h, int64_t i) {
    const int64_t head = p.head_offset + h;
    return static_cast<uint64_t>(((b * p.total_heads + head) * g.S + i) * g.S);
}

/// Row i of `dst` (columns [0, i]) = row i of `src` times its dropout multipliers; columns (i, width) = 0.
void dropped_row(float* dst, const float* src, int64_t i, int64_t width, const DropoutDraw* draw, uint64_t first) {
    if (draw) {
        draw->multipliers(first, i + 1, dst);
#pragma omp simd
        for (int64_t j = 0; j <= i; ++j) dst[j] *= src[j];
    } else {
        std::copy(src, src + i + 1, dst);
    }
    std::fill(dst + i + 1, dst + width, 0.0f);
}

}  // namespace

int64_t attention_workspace_bytes(const AttentionParams&, int64_t seq_len, int threads) {
    return static_cast<int64_t>(threads) * 2 * seq_len * seq_len * static_cast<int64_t>(sizeof(float));
}

void attention_forward(OpContext&, TensorView out, TensorView probs, TensorView qkv, TensorView workspace,
                       const AttentionParams& p) {
    const HeadGeometry g = geometry(qkv, p);
    // 16-bit qkv and out (bf16/fp16 runs): the GEMMs read an fp32 copy, out is rounded once at the end.
    const float* base = widened(qkv, Scratch::A).f32();
    const TensorView out32 = f32_target(out, Scratch::Out, false);
    float* po = out32.f32();
    float* pp = probs.f32();
    const bool dropout = p.dropout_p > 0.0f;
    const DropoutDraw draw(p.rng, p.dropout_p);
    const int64_t pairs = g.B * g.A;
    const int ld = static_cast<int>(g.ld_qkv()), ldo = static_cast<int>(g.ld_out()), S = static_cast<int>(g.S),
              D = static_cast<int>(g.D);

    // The dispatcher checked the workspace holds scratch for this many threads (an exception
    // escaping an OpenMP region would be std::terminate).
    const int threads = omp_get_max_threads();
#pragma omp parallel num_threads(threads)
    {
        float* dropped = thread_scratch(workspace, g.S);
#pragma omp for schedule(static)
        for (int64_t pair = 0; pair < pairs; ++pair) {
            const int64_t b = pair / g.A, h = pair % g.A;
            const float *q = base + g.q(b, h), *k = base + g.k(b, h), *v = base + g.v(b, h);
            float* P = pp + pair * g.S * g.S;
            for (int64_t r0 = 0; r0 < g.S; r0 += kTile) {
                const int64_t r1 = std::min(g.S, r0 + kTile);
                const int rows = static_cast<int>(r1 - r0), width = static_cast<int>(r1);
                // scores[r0:r1, 0:r1] = scale · q[r0:r1] · k[0:r1]ᵀ
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, width, D, p.softmax_scale, q + r0 * ld, ld,
                            k, ld, 0.0f, P + r0 * g.S, S);
                for (int64_t i = r0; i < r1; ++i) {
                    float* row = P + i * g.S;
                    const float mx = max_of(row, i + 1);
                    float sum = 0;
#pragma omp simd reduction(+ : sum) simdlen(16)
                    for (int64_t j = 0; j <= i; ++j) {
                        row[j] = exp_approx(row[j] - mx);
                        sum += row[j];
                    }
                    const float inv = 1.0f / sum;
#pragma omp simd
                    for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
                    std::fill(row + i + 1, row + g.S, 0.0f);
                }
                // out[r0:r1] = dropout(P)[r0:r1, 0:r1] · v[0:r1]
                const float* a = P + r0 * g.S;
                if (dropout) {
                    for (int64_t i = r0; i < r1; ++i)
                        dropped_row(dropped + (i - r0) * g.S, P + i * g.S, i, r1, &draw, mask_row_index(g, p, b, h, i));
                    a = dropped;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, width, 1.0f, a, S, v, ld, 0.0f,
                            po + g.o(b, h) + r0 * ldo, ldo);
            }
        }
    }
    narrow(out, out32);
}

namespace {

/// The backward of one (sequence b, query head h), in tiles that depend only on the shapes: row tiles
/// (dP, the score gradient and dq of kTile query rows) and then column tiles (dk and dv of kTile key
/// rows, which read every row tile's score gradient). Tiles of one phase are independent, so they can
/// run on any threads in any order and give the same bits.
struct HeadBackward {
    const HeadGeometry& g;
    const AttentionParams& p;
    const DropoutDraw& draw;
    const float *base, *pd, *pp;
    float* dbase;

    int64_t tiles() const { return (g.S + kTile - 1) / kTile; }

    /// Row tile t: Pd (dropout(P)) and dS rows [r0, r1); dq rows [r0, r1).
    void row_tile(int64_t b, int64_t h, int64_t t, float* Pd, float* dS) const {
        const bool dropout = p.dropout_p > 0.0f;
        const int ld = static_cast<int>(g.ld_qkv()), ldo = static_cast<int>(g.ld_out()), S = static_cast<int>(g.S),
                  D = static_cast<int>(g.D);
        const float *k = base + g.k(b, h), *v = base + g.v(b, h);
        float* dq = dbase + g.q(b, h);
        const float* dO = pd + g.o(b, h);
        const float* P = pp + (b * g.A + h) * g.S * g.S;
        const int64_t r0 = t * kTile, r1 = std::min(g.S, r0 + kTile);
        const int rows = static_cast<int>(r1 - r0), width = static_cast<int>(r1);
        if (dropout)
            for (int64_t i = r0; i < r1; ++i)
                dropped_row(Pd + i * g.S, P + i * g.S, i, r1, &draw, mask_row_index(g, p, b, h, i));
        // dPd[r0:r1, 0:r1] = dO[r0:r1] · v[0:r1]ᵀ
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, width, D, 1.0f, dO + r0 * ldo, ldo, v, ld, 0.0f,
                    dS + r0 * g.S, S);
        for (int64_t i = r0; i < r1; ++i) {
            float* row = dS + i * g.S;
            const float* prow = P + i * g.S;
            if (dropout) {
                float mult[kTile * 64];  // multipliers of one row, in pieces
                for (int64_t j0 = 0; j0 <= i; j0 += kTile * 64) {
                    const int64_t len = std::min<int64_t>(kTile * 64, i + 1 - j0);
                    draw.multipliers(mask_row_index(g, p, b, h, i) + static_cast<uint64_t>(j0), len, mult);
#pragma omp simd
                    for (int64_t j = 0; j < len; ++j) row[j0 + j] *= mult[j];
                }
            }
            float dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int64_t j = 0; j <= i; ++j) dot += prow[j] * row[j];
#pragma omp simd
            for (int64_t j = 0; j <= i; ++j) row[j] = p.softmax_scale * prow[j] * (row[j] - dot);
            std::fill(row + i + 1, row + r1, 0.0f);
        }
        // dq[r0:r1] = dS[r0:r1, 0:r1] · k[0:r1]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, width, 1.0f, dS + r0 * g.S, S, k, ld, 0.0f,
                    dq + r0 * ld, ld);
    }

    /// Column tile t: dv and dk rows [c0, c1), written by the group's first query head (beta 0) and
    /// added to by the others.
    void col_tile(int64_t b, int64_t h, int64_t t, const float* Pd, const float* dS, float beta_kv) const {
        const int ld = static_cast<int>(g.ld_qkv()), ldo = static_cast<int>(g.ld_out()), S = static_cast<int>(g.S),
                  D = static_cast<int>(g.D);
        const float* q = base + g.q(b, h);
        float *dk = dbase + g.k(b, h), *dv = dbase + g.v(b, h);
        const float* dO = pd + g.o(b, h);
        const float* A = p.dropout_p > 0.0f ? Pd : pp + (b * g.A + h) * g.S * g.S;
        const int64_t c0 = t * kTile, c1 = std::min(g.S, c0 + kTile);
        const int cols = static_cast<int>(c1 - c0), depth = static_cast<int>(g.S - c0);
        // dv[c0:c1] (+)= Pd[c0:S, c0:c1]ᵀ · dO[c0:S];  dk[c0:c1] (+)= dS[c0:S, c0:c1]ᵀ · q[c0:S]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, D, depth, 1.0f, A + c0 * g.S + c0, S,
                    dO + c0 * ldo, ldo, beta_kv, dv + c0 * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, D, depth, 1.0f, dS + c0 * g.S + c0, S,
                    q + c0 * ld, ld, beta_kv, dk + c0 * ld, ld);
    }
};

}  // namespace

void attention_backward(OpContext&, TensorView dqkv, TensorView dout, TensorView qkv, TensorView /*out*/,
                        TensorView probs, TensorView workspace, const AttentionParams& p) {
    const HeadGeometry g = geometry(qkv, p);
    const DropoutDraw draw(p.rng, p.dropout_p);
    // 16-bit qkv, dout and dqkv: the GEMMs read fp32 copies, dqkv is computed in fp32 and rounded once.
    const TensorView dqkv32 = f32_target(dqkv, Scratch::Out, false);
    const HeadBackward hb{
        g, p, draw, widened(qkv, Scratch::A).f32(), widened(dout, Scratch::B).f32(), probs.f32(), dqkv32.f32()};
    const int threads = omp_get_max_threads();  // the workspace is checked for this many
    const int64_t group_pairs = g.B * g.G, tiles = hb.tiles();
    if (group_pairs >= threads) {
        // (b, group) pairs in parallel: each group's dk and dv sum over its query heads in order.
#pragma omp parallel num_threads(threads)
        {
            float* scratch = thread_scratch(workspace, g.S);
            float *Pd = scratch, *dS = scratch + g.S * g.S;  // dropout(P) and dP / the score gradient, S×S
#pragma omp for schedule(static)
            for (int64_t pair = 0; pair < group_pairs; ++pair) {
                const int64_t b = pair / g.G, first_head = pair % g.G * g.per_group();
                for (int64_t h = first_head; h < first_head + g.per_group(); ++h) {
                    for (int64_t t = 0; t < tiles; ++t) hb.row_tile(b, h, t, Pd, dS);
                    for (int64_t t = 0; t < tiles; ++t) hb.col_tile(b, h, t, Pd, dS, h == first_head ? 0.0f : 1.0f);
                }
            }
        }
        narrow(dqkv, dqkv32);
        return;
    }
    // Fewer (b, group) pairs than threads (multi-query attention at micro-batch 1): the tiles of each
    // head in parallel instead, sharing one Pd/dS; the same calls as above, so the same bits. Largest
    // row tiles (the causal triangle's widest) first.
    float* Pd = static_cast<float*>(workspace.data);
    float* dS = Pd + g.S * g.S;
#pragma omp parallel num_threads(threads)
    for (int64_t pair = 0; pair < group_pairs; ++pair) {
        const int64_t b = pair / g.G, first_head = pair % g.G * g.per_group();
        for (int64_t h = first_head; h < first_head + g.per_group(); ++h) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = tiles - 1; t >= 0; --t) hb.row_tile(b, h, t, Pd, dS);
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < tiles; ++t) hb.col_tile(b, h, t, Pd, dS, h == first_head ? 0.0f : 1.0f);
        }
    }
    narrow(dqkv, dqkv32);
}

}  // namespace mwb::cpu
