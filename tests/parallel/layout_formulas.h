#pragma once
// What one rank of a parallel run should hold and send, from first principles, for the
// equivalence tests: parameter arena, memory by category, and the bytes each process group carries
// per iteration (ring volumes: all-reduce 2(n-1)/n of the buffer, all-gather / reduce-scatter (n-1)
// shards, point-to-point the message). Written from the parallel algorithms (Megatron-LM's
// conjugate TP/SP operators, 1F1B p2p, DDP / distributed optimizer), independently of the engine's
// code; the planner owns the general versions.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

namespace mwb::test {

struct LayoutSpec {
    int tp = 1, pp = 1, dp = 1, chunks = 1;  // chunks: model chunks per pipeline rank (interleaving)
    bool sp = false, distributed_optimizer = false;
    std::string recompute = {};              // "", "selective", "full"
    int recompute_layers = 0;                // with full, uniform
};

struct ModelSpec {
    int64_t layers, hidden, heads, ffn, seq, micro_batch, vocab /* padded */, max_positions;
    int64_t micro_batches;  // per data-parallel rank per iteration
    // Llama-family choices; the defaults are GPT's.
    int64_t groups = 0;       // key/value heads (grouped-query attention); 0: heads
    int64_t kv_channels = 0;  // head dim; 0: hidden / heads
    bool swiglu = false;      // fc1 holds [gate | up], 2·ffn rows
    bool rmsnorm = false;     // norms without a bias and without a saved mean
    bool linear_bias = true, qkv_bias = false;  // qkv has a bias if either
    bool learned_positions = true;              // false: RoPE (no position table)
    bool tied_output = true;

    int64_t kv_heads() const { return groups > 0 ? groups : heads; }
    int64_t head_dim() const { return kv_channels > 0 ? kv_channels : hidden / heads; }
    int64_t qkv_rows() const { return (heads + 2 * kv_heads()) * head_dim(); }  // G groups of [q… | k | v]
    int64_t fc1_rows() const { return swiglu ? 2 * ffn : ffn; }
    int64_t norm_tensors() const { return rmsnorm ? 1 : 2; }  // weight (and bias)
};

inline int64_t align64(int64_t n) { return (n + 63) / 64 * 64; }
inline int64_t all_reduce_bytes(int ranks, int64_t elems, int64_t elem_bytes = 4) {
    return ranks > 1 ? 2 * (ranks - 1) * elems * elem_bytes / ranks : 0;
}
inline int64_t shard_bytes(int ranks, int64_t shard_elems) { return ranks > 1 ? (ranks - 1) * shard_elems * 4 : 0; }

struct RankView {
    int pp_rank;
    bool first_stage() const { return pp_rank == 0; }
};

/// Layers of model chunk c of pipeline rank r, and whether that chunk is the first / last virtual stage.
struct ChunkInfo {
    int64_t layers;
    bool first, last;
};

inline ChunkInfo chunk_info(const ModelSpec& m, const LayoutSpec& l, int r, int c) {
    const int64_t stages = static_cast<int64_t>(l.pp) * l.chunks, per = m.layers / stages, stage = c * l.pp + r;
    return {per, stage == 0, stage == stages - 1};
}

/// Elements of rank r's parameter arena (each tensor aligned to 64 elements; padded to DP shards).
inline int64_t arena_elements(const ModelSpec& m, const LayoutSpec& l, int r) {
    const int64_t t = l.tp, H = m.hidden, F = m.ffn, Q = m.qkv_rows() / t, AD = m.heads * m.head_dim() / t;
    const int64_t F1 = m.fc1_rows() / t, bias = m.linear_bias ? 1 : 0;
    int64_t n = 0;
    const int64_t layer = 2 * m.norm_tensors() * align64(H) + align64(Q * H) +
                          (m.linear_bias || m.qkv_bias ? align64(Q) : 0) + align64(H * AD) + bias * align64(H) +
                          align64(F1 * H) + bias * align64(F1) + align64(H * F / t) + bias * align64(H);
    bool first = false, last = false;
    for (int c = 0; c < l.chunks; ++c) {
        const ChunkInfo ci = chunk_info(m, l, r, c);
        n += ci.layers * layer;
        first |= ci.first;
        last |= ci.last;
    }
    if (first) n += align64(m.vocab / t * H) + (m.learned_positions ? align64(m.max_positions * H) : 0);
    // The output layer; tied, the last stage's copy of the embedding unless it is also the first.
    if (last) n += m.norm_tensors() * align64(H) + (m.tied_output && first ? 0 : align64(m.vocab / t * H));
    if (l.distributed_optimizer && l.dp > 1) n = (n + l.dp * 64 - 1) / (l.dp * 64) * (l.dp * 64);
    return n;
}

/// Bytes rank r sends per training iteration, by group type.
inline std::map<std::string, int64_t> bytes_per_iteration(const ModelSpec& m, const LayoutSpec& l, int r) {
    const int t = l.tp, p = l.pp, d = l.dp;
    const int64_t N = m.seq * m.micro_batch, H = m.hidden, R = l.sp ? N / t : N, Mb = m.micro_batches;
    std::map<std::string, int64_t> b{{"tp", 0}, {"sp", 0}, {"pp", 0}, {"dp", 0}, {"embedding", 0}, {"model", 0}};
    bool first = false, last = false;
    for (int c = 0; c < l.chunks; ++c) {
        const ChunkInfo ci = chunk_info(m, l, r, c);
        first |= ci.first;
        last |= ci.last;
        const int64_t recomputed = l.recompute == "full" ? ci.layers : 0;
        if (l.sp) {
            // per layer: forward 2 all-gathers + 2 reduce-scatters; backward 4 all-gathers (the two
            // output-gradient gathers and the two norm outputs gathered again) + 2 reduce-scatters.
            b["sp"] += Mb * (ci.layers * 10 + recomputed * 4) * shard_bytes(t, R * H);
        } else {
            b["tp"] += Mb * (ci.layers * 4 + recomputed * 2) * all_reduce_bytes(t, N * H);
        }
        b["pp"] += Mb * ((ci.last ? 0 : 1) + (ci.first ? 0 : 1)) * R * H * 4;  // activations forward, gradients back
    }
    if (first) {
        if (l.sp)
            b["sp"] += Mb * 2 * shard_bytes(t, R * H) +
                       (m.learned_positions ? all_reduce_bytes(t, m.max_positions * H) : 0);
        else b["tp"] += Mb * all_reduce_bytes(t, N * H);
    }
    if (last) {
        b["tp"] += Mb * 3 * all_reduce_bytes(t, N);  // vocabulary-parallel cross-entropy: max, Σexp, target
        if (l.sp) b["sp"] += Mb * 2 * shard_bytes(t, R * H) + m.norm_tensors() * all_reduce_bytes(t, H);
        else b["tp"] += Mb * all_reduce_bytes(t, N * H);
    }
    if (l.sp)  // the layers' norm weights and biases, summed over the positions of every rank
        for (int c = 0; c < l.chunks; ++c)
            b["sp"] += chunk_info(m, l, r, c).layers * 2 * m.norm_tensors() * all_reduce_bytes(t, H);
    if (m.tied_output && p > 1 && (first || last)) b["embedding"] += all_reduce_bytes(2, m.vocab / t * H);
    b["pp"] += all_reduce_bytes(p, 1, 8);  // the loss, from the last stage
    b["dp"] += all_reduce_bytes(d, 1, 8);  // the loss, averaged
    const int64_t arena = arena_elements(m, l, r);
    if (l.distributed_optimizer && d > 1)
        b["dp"] += 2 * shard_bytes(d, arena / d) + all_reduce_bytes(d, 1, 8);  // reduce-scatter, all-gather, norm
    else
        b["dp"] += all_reduce_bytes(d, arena);
    b["model"] += all_reduce_bytes(t * p, 1, 8);  // the global gradient norm
    return b;
}

/// Activation elements one layer keeps for backward (no recompute): its input, both norms' outputs and
/// statistics (mean and rstd; RMSNorm only rstd), the residual after attention, qkv, the attention
/// context, fc1's output and the activation, and the (B, A/t, S, S) probabilities.
inline int64_t layer_activations(const ModelSpec& m, const LayoutSpec& l) {
    const int64_t t = l.tp, N = m.seq * m.micro_batch, H = m.hidden, R = l.sp ? N / t : N;
    const int64_t AD = m.heads * m.head_dim();
    return 4 * R * H + 2 * m.norm_tensors() * R + N * (m.qkv_rows() + AD) / t + N * (m.fc1_rows() + m.ffn) / t +
           m.micro_batch * (m.heads / t) * m.seq * m.seq;
}

/// Activation elements of one micro-batch at the peak without pipelining or recompute: every layer's,
/// the last layer's output, the final norm's output and statistics, and the logits (docs/memory.md).
inline int64_t peak_activations(const ModelSpec& m, const LayoutSpec& l) {
    const int64_t N = m.seq * m.micro_batch, R = l.sp ? N / l.tp : N;
    return m.layers * layer_activations(m, l) + 2 * R * m.hidden + m.norm_tensors() * R + N * m.vocab / l.tp;
}

}  // namespace mwb::test
