#include "generate/decoder.h"

#include "model/rope.h"
#include "mwb/kernels/error.h"
#include "parallel/communicator.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mwb::generate {

namespace {

/// y (n, out) = x (n, in)·wᵀ + b: the output rows of w split over the threads, each chunk one
/// single-threaded BLAS call (OpenBLAS runs single-threaded inside a parallel region) on its
/// contiguous rows of w. n = 1 is a matrix-vector product: sgemv.
void linear(float* y, const float* x, int64_t n, const TensorView& w, const TensorView& b) {
    const int64_t out = w.dim(0), in = w.dim(1);
    const float* W = w.f32();
    const float* bias = b.empty() ? nullptr : b.f32();
    constexpr int64_t kMinRows = 64;  // a multiple of any kernel's unroll
    // Below ~256K multiply-adds a thread costs more to wake than it saves (and spins on a busy machine).
    const int64_t threads = n * out * in >= (int64_t{1} << 18) ? std::max(1, omp_get_max_threads()) : 1;
    const int64_t chunks = std::clamp<int64_t>(out / kMinRows, 1, threads);
    const int64_t per = (out / chunks + 15) / 16 * 16;
#pragma omp parallel for schedule(static) num_threads(static_cast <int>(chunks)) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t r0 = c * per, r1 = c + 1 == chunks ? out : std::min(out, r0 + per);
        if (r0 >= r1) continue;
        const auto rows = static_cast<blasint>(r1 - r0);
        if (n == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, static_cast<blasint>(in), 1.0f, W + r0 * in,
                        static_cast<blasint>(in), x, 1, 0.0f, y + r0, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(n), rows,
                        static_cast<blasint>(in), 1.0f, x, static_cast<blasint>(in), W + r0 * in,
                        static_cast<blasint>(in), 0.0f, y + r0, static_cast<blasint>(out));
        if (bias)
            for (int64_t i = 0; i < n; ++i) {
                float* yi = y + i * out;
#pragma omp simd
                for (int64_t r = r0; r < r1; ++r) yi[r] += bias[r];
            }
    }
}

TensorView host(float* p, std::initializer_list<int64_t> shape) {
    return make_view(p, DType::F32, shape, Device::CPU);
}

/// Runs a small step on one thread: waking threads for the many tiny ops of a small model costs more
/// than the ops (and threads spin on a busy machine). Restores the thread count when it goes.
class SingleThreadBelow {
public:
    SingleThreadBelow(int64_t work, int64_t threshold) : saved_(omp_get_max_threads()) {
        if (work < threshold) omp_set_num_threads(1);
    }
    ~SingleThreadBelow() { omp_set_num_threads(saved_); }

private:
    int saved_;
};

}  // namespace

Decoder::Decoder(const GptDims& d, const ParamLayout& layout, const TensorView& params, int64_t max_batch,
                 int64_t max_len)
    : Decoder(d, ModelPartition::whole(d), layout, params, {}, max_batch, max_len) {}

Decoder::Decoder(const GptDims& d, const ModelPartition& partition, const ParamLayout& layout, const TensorView& params,
                 DecoderGroups groups, int64_t max_batch, int64_t max_len)
    : d_(d),
      partition_(partition),
      groups_(groups),
      max_batch_(max_batch),
      max_len_(max_len),
      lengths_(static_cast<std::size_t>(max_batch), 0) {
    if (groups_.tp && groups_.tp->size() == 1) groups_.tp = nullptr;
    if (groups_.pp && groups_.pp->size() == 1) groups_.pp = nullptr;
    tp_size_ = groups_.tp ? groups_.tp->size() : 1;
    pp_size_ = groups_.pp ? groups_.pp->size() : 1;
    pp_rank_ = groups_.pp ? groups_.pp->rank() : 0;
    const int64_t t = tp_size_;
    MWB_CHECK(params.device == Device::CPU && params.dtype == DType::F32,
              "generation runs on the CPU with fp32 weights (got {})", params.describe());
    MWB_CHECK(max_batch >= 1 && max_len >= 1 && (!d.learned_positions() || max_len <= d.max_positions),
              "generation: {} rows of {} tokens (the model has {} learned positions)", max_batch, max_len,
              d.max_positions);
    MWB_CHECK(d.heads % t == 0 && d.kv_groups() % t == 0 && d.ffn % t == 0 && d.vocab % t == 0 &&
                  !partition.chunks.empty() && partition.embedding == (pp_rank_ == 0) &&
                  partition.head == (pp_rank_ == pp_size_ - 1),
              "generation: a model part that does not fit {} tensor-parallel and {} pipeline ranks "
              "(A={} G={} F={} V={}, stage {})",
              t, pp_size_, d.heads, d.kv_groups(), d.ffn, d.vocab, pp_rank_);
    heads_ = d.heads / t;
    kv_groups_ = d.kv_groups() / t;
    qkv_rows_ = d.qkv_rows() / t;
    ffn_ = d.ffn / t;
    fc1_rows_ = d.fc1_rows() / t;
    vocab_rows_ = d.vocab / t;
    vocab_begin_ = (groups_.tp ? groups_.tp->rank() : 0) * vocab_rows_;
    const auto view = [&](const char* name) { return layout.view(params, layout.index_of(name)); };
    const auto check_vocab = [&](const TensorView& v) {
        MWB_CHECK(v.dim(0) == vocab_rows_,
                  "generation: the word embedding has {} rows, expected {} of {} for tensor-parallel size {}", v.dim(0),
                  vocab_rows_, d.vocab, t);
    };
    if (partition.embedding) {
        wte_ = view("embedding.word_embeddings.weight");
        check_vocab(wte_);
        if (d.learned_positions()) wpe_ = view("embedding.position_embeddings.weight");
    }
    if (partition.head) {
        lnf_w_ = view("decoder.final_layernorm.weight");
        if (!d.rmsnorm) lnf_b_ = view("decoder.final_layernorm.bias");
        // Tied: the word embedding, or the last stage's copy of it (the same name).
        out_w_ = d.tied_output ? view("embedding.word_embeddings.weight") : view("output_layer.weight");
        check_vocab(out_w_);
    }
    for (const auto& chunk : partition.chunks) {
        for (int64_t l = chunk.first_layer; l < chunk.end_layer; ++l)
            w_.push_back(TransformerLayer::params(layout, params, l, d));
        chunk_end_.push_back(w_.size());
    }
    if (d.positions == GptDims::Positions::Rope) {
        const int64_t half = d.rotary_dim / 2;
        rope_cos_.resize(static_cast<std::size_t>(max_len * half));
        rope_sin_.resize(rope_cos_.size());
        rotary_tables(d, max_len, rope_cos_.data(), rope_sin_.data());
    }
    const int64_t per_layer = max_batch * kv_groups_ * max_len * d.head_dim();
    k_cache_.assign(static_cast<std::size_t>(per_layer * static_cast<int64_t>(w_.size())), 0.0f);
    v_cache_.assign(k_cache_.size(), 0.0f);
}

float* Decoder::cache_k(int64_t layer, int64_t row, int64_t group) const {
    const int64_t G = kv_groups_, D = d_.head_dim();
    return const_cast<float*>(k_cache_.data()) + (((layer * max_batch_ + row) * G + group) * max_len_) * D;
}

float* Decoder::cache_v(int64_t layer, int64_t row, int64_t group) const {
    const int64_t G = kv_groups_, D = d_.head_dim();
    return const_cast<float*>(v_cache_.data()) + (((layer * max_batch_ + row) * G + group) * max_len_) * D;
}

int64_t Decoder::weight_bytes_per_step() const {
    int64_t elements = out_w_.numel() + lnf_w_.numel() + lnf_b_.numel();
    for (const LayerParams& w : w_)
        for (const TensorView* v : {&w.ln1_w, &w.ln1_b, &w.qkv_w, &w.qkv_b, &w.proj_w, &w.proj_b, &w.ln2_w, &w.ln2_b,
                                    &w.fc1_w, &w.fc1_b, &w.fc2_w, &w.fc2_b})
            elements += v->numel();
    return elements * 4;
}

void Decoder::ensure_scratch(int64_t n) {
    if (n <= scratch_rows_) return;
    const auto size = [&](std::vector<float>& v, int64_t per_row) {
        v.assign(static_cast<std::size_t>(n * per_row), 0.0f);
    };
    const int64_t H = d_.hidden;
    size(x_, H);
    size(x2_, H);
    size(ln_, H);
    size(mean_, 1);
    size(rstd_, 1);
    size(qkv_, qkv_rows_);
    size(ctx_, heads_ * d_.head_dim());
    size(branch_, H);
    size(fc1_, fc1_rows_);
    size(act_, ffn_);
    scratch_rows_ = n;
}

void Decoder::prefill(int64_t row, std::span<const int32_t> tokens, float* logits) {
    MWB_CHECK(row >= 0 && row < max_batch_ && !tokens.empty(), "prefill: row {} of {}, {} tokens", row, max_batch_,
              tokens.size());
    const int64_t start = length(row);
    std::vector<Entry> entries;
    for (std::size_t i = 0; i < tokens.size(); ++i) entries.push_back({row, start + static_cast<int64_t>(i)});
    const int64_t last = static_cast<int64_t>(tokens.size()) - 1;
    forward(entries, tokens, std::span<const int64_t>(&last, 1), logits);
}

void Decoder::decode(std::span<const int64_t> rows, std::span<const int32_t> tokens, float* logits) {
    MWB_CHECK(rows.size() == tokens.size() && !rows.empty(), "decode: {} rows, {} tokens", rows.size(), tokens.size());
    std::vector<Entry> entries;
    std::vector<int64_t> all;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        MWB_CHECK(rows[i] >= 0 && rows[i] < max_batch_, "decode: row {} of {}", rows[i], max_batch_);
        entries.push_back({rows[i], length(rows[i])});
        all.push_back(static_cast<int64_t>(i));
    }
    forward(entries, tokens, all, logits);
}

void Decoder::forward(std::span<const Entry> entries, std::span<const int32_t> ids, std::span<const int64_t> logit_rows,
                      float* logits) {
    const int64_t n = static_cast<int64_t>(entries.size()), H = d_.hidden;
    for (const Entry& e : entries)
        MWB_CHECK(e.pos < max_len_, "generation: row {} is full ({} tokens)", e.row, max_len_);
    for (int64_t i = 0; i < n; ++i)
        MWB_CHECK(ids[i] >= 0 && ids[i] < d_.vocab, "generation: token id {} is outside the vocabulary [0, {})", ids[i],
                  d_.vocab);
    ensure_scratch(n);
    const SingleThreadBelow small(n * weight_bytes_per_step() / 4, int64_t{1} << 21);

    // Virtual stage k (chunk k / P of stage k % P) runs after stage k - 1 and hands its residual
    // stream to stage k + 1; with one stage that is just chunk after chunk.
    const int64_t P = pp_size_, stages = static_cast<int64_t>(chunk_end_.size()) * P;
    for (int64_t k = 0; k < stages; ++k) {
        if (k % P != pp_rank_) continue;
        const auto peer = [&](int64_t stage) { return static_cast<int>(stage % P); };
        if (k == 0)
            embed(entries, ids, x_.data());
        else if (P > 1) {
            const Message in{x_.data(), n * H, peer(k - 1), static_cast<int>(k)};
            groups_.pp->exchange({}, std::span<const Message>(&in, 1));
        }
        const std::size_t c = static_cast<std::size_t>(k / P);
        for (std::size_t slot = c == 0 ? 0 : chunk_end_[c - 1]; slot < chunk_end_[c]; ++slot)
            layer(entries, static_cast<int64_t>(slot));
        if (k + 1 < stages && P > 1) {
            const Message out{x_.data(), n * H, peer(k + 1), static_cast<int>(k + 1)};
            groups_.pp->exchange(std::span<const Message>(&out, 1), {})->wait();
        }
    }
    for (const Entry& e : entries) lengths_[static_cast<std::size_t>(e.row)] = std::max(length(e.row), e.pos + 1);

    const int64_t m = static_cast<int64_t>(logit_rows.size());
    if (partition_.head) head(logit_rows, logits);
    if (P > 1)
        groups_.pp->broadcast(logits, m * d_.vocab * static_cast<int64_t>(sizeof(float)), static_cast<int>(P - 1));
}

void Decoder::norm(float* out, const float* in, const TensorView& w, const TensorView& b, int64_t rows) {
    const int64_t H = d_.hidden;
    if (d_.rmsnorm)
        ops::rmsnorm_forward(op_, host(out, {rows, H}), host(rstd_.data(), {rows}),
                             host(const_cast<float*>(in), {rows, H}), w, d_.norm_eps);
    else
        ops::layernorm_forward(op_, host(out, {rows, H}), host(mean_.data(), {rows}), host(rstd_.data(), {rows}),
                               host(const_cast<float*>(in), {rows, H}), w, b, d_.norm_eps);
}

void Decoder::embed(std::span<const Entry> entries, std::span<const int32_t> ids, float* x) {
    // Word row plus (learned) position row. A vocabulary-parallel embedding: each rank has the rows
    // of its ids, zeros for the others, and the sum over the ranks is every token's row.
    const int64_t n = static_cast<int64_t>(entries.size()), H = d_.hidden;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t local = int64_t{ids[i]} - vocab_begin_;
        if (local >= 0 && local < vocab_rows_)
            std::memcpy(x + i * H, wte_.f32() + local * H, static_cast<std::size_t>(H) * sizeof(float));
        else
            std::fill(x + i * H, x + (i + 1) * H, 0.0f);
    }
    if (groups_.tp) groups_.tp->all_reduce_sum(x, n * H);
    if (!wpe_.empty())
        for (int64_t i = 0; i < n; ++i) {
            const float* p = wpe_.f32() + entries[i].pos * H;
            for (int64_t h = 0; h < H; ++h) x[i * H + h] += p[h];
        }
}

void Decoder::row_parallel(float* y, const float* x, int64_t n, const TensorView& w, const TensorView& b) {
    if (!groups_.tp) return linear(y, x, n, w, b);
    linear(y, x, n, w, {});
    groups_.tp->all_reduce_sum(y, n * d_.hidden);
    if (b.empty()) return;
    const float* bias = b.f32();
    for (int64_t i = 0; i < n; ++i) {
        float* yi = y + i * d_.hidden;
#pragma omp simd
        for (int64_t r = 0; r < d_.hidden; ++r) yi[r] += bias[r];
    }
}

void Decoder::layer(std::span<const Entry> entries, int64_t slot) {
    const int64_t n = static_cast<int64_t>(entries.size()), H = d_.hidden, W = qkv_rows_;
    float *x = x_.data(), *x2 = x2_.data(), *ln = ln_.data(), *qkv = qkv_.data(), *ctx = ctx_.data();
    float *branch = branch_.data(), *fc1 = fc1_.data(), *act = act_.data();
    AttentionParams ap;
    ap.num_heads = static_cast<int>(heads_);
    ap.num_query_groups = static_cast<int>(kv_groups_);
    ap.total_heads = static_cast<int>(d_.heads);
    ap.batch = 1;
    const int64_t half = d_.rotary_dim / 2, G = kv_groups_, D = d_.head_dim(), per_group = W / G;
    const LayerParams& w = w_[static_cast<std::size_t>(slot)];
    norm(ln, x, w.ln1_w, w.ln1_b, n);
    linear(qkv, ln, n, w.qkv_w, w.qkv_b);
    for (int64_t i = 0; i < n; ++i) {
        float* row = qkv + i * W;
        if (!rope_cos_.empty())
            ops::rope_forward(op_, host(row, {1, 1, W}), host(rope_cos_.data(), {max_len_, half}),
                              host(rope_sin_.data(), {max_len_, half}), ap, static_cast<int>(d_.rotary_dim),
                              d_.rotary_interleaved, entries[i].pos);
        for (int64_t g = 0; g < G; ++g) {
            const float* k = row + g * per_group + (per_group / D - 2) * D;
            std::memcpy(cache_k(slot, entries[i].row, g) + entries[i].pos * D, k, static_cast<std::size_t>(D) * 4);
            std::memcpy(cache_v(slot, entries[i].row, g) + entries[i].pos * D, k + D, static_cast<std::size_t>(D) * 4);
        }
    }
    attention(entries, slot, qkv, ctx);
    row_parallel(branch, ctx, n, w.proj_w, w.proj_b);
    ops::add(op_, host(x2, {n, H}), host(x, {n, H}), host(branch, {n, H}));
    norm(ln, x2, w.ln2_w, w.ln2_b, n);
    linear(fc1, ln, n, w.fc1_w, w.fc1_b);
    if (d_.swiglu)
        ops::swiglu_forward(op_, host(act, {n, ffn_}), host(fc1, {n, fc1_rows_}));
    else
        ops::gelu_forward(op_, host(act, {n, ffn_}), host(fc1, {n, ffn_}));
    row_parallel(branch, act, n, w.fc2_w, w.fc2_b);
    ops::add(op_, host(x, {n, H}), host(x2, {n, H}), host(branch, {n, H}));
}

void Decoder::head(std::span<const int64_t> logit_rows, float* logits) {
    // Final norm and output layer, only for the rows whose logits are wanted.
    const int64_t m = static_cast<int64_t>(logit_rows.size()), H = d_.hidden, V = d_.vocab, Vt = vocab_rows_;
    float *x = x_.data(), *x2 = x2_.data(), *ln = ln_.data();
    for (int64_t j = 0; j < m; ++j)
        std::memcpy(x2 + j * H, x + logit_rows[j] * H, static_cast<std::size_t>(H) * sizeof(float));
    norm(ln, x2, lnf_w_, lnf_b_, m);
    if (!groups_.tp) return linear(logits, ln, m, out_w_, {});
    // Each rank's vocabulary rows for the m rows, gathered as (t, m, V/t), laid out as (m, V).
    local_logits_.resize(static_cast<std::size_t>(m * Vt));
    shards_.resize(static_cast<std::size_t>(m * V));
    linear(local_logits_.data(), ln, m, out_w_, {});
    groups_.tp->all_gather(local_logits_.data(), shards_.data(), m * Vt);
    for (int64_t r = 0; r < tp_size_; ++r)
        for (int64_t j = 0; j < m; ++j)
            std::memcpy(logits + j * V + r * Vt, shards_.data() + (r * m + j) * Vt, static_cast<std::size_t>(Vt) * 4);
}

void Decoder::attention(std::span<const Entry> entries, int64_t layer, const float* qkv, float* context) {
    // Causal attention of each token over its row's cache [0, pos]: one (token, head) pair per task.
    const int64_t n = static_cast<int64_t>(entries.size()), A = heads_, G = kv_groups_, D = d_.head_dim();
    const int64_t per_group = (A / G + 2) * D, W = G * per_group;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int threads = std::max(1, omp_get_max_threads());
    scores_.resize(static_cast<std::size_t>(threads * max_len_));
    int64_t work = 0;  // multiply-adds: q·k and p·v over each token's cache
    for (const Entry& e : entries) work += 2 * A * (e.pos + 1) * D;
#pragma omp parallel for schedule(dynamic, 1) collapse(2) if (work >= (int64_t{1} << 17))
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t h = 0; h < A; ++h) {
            float* s = scores_.data() + omp_get_thread_num() * max_len_;
            const int64_t g = h / (A / G), len = entries[i].pos + 1;
            const float* q = qkv + i * W + g * per_group + (h % (A / G)) * D;
            const float* K = cache_k(layer, entries[i].row, g);
            const float* V = cache_v(layer, entries[i].row, g);
            float max = -INFINITY;
            for (int64_t j = 0; j < len; ++j) {
                const float* k = K + j * D;
                float dot = 0;
#pragma omp simd reduction(+ : dot)
                for (int64_t c = 0; c < D; ++c) dot += q[c] * k[c];
                s[j] = dot * scale;
                max = std::max(max, s[j]);
            }
            float sum = 0;
            for (int64_t j = 0; j < len; ++j) sum += (s[j] = std::exp(s[j] - max));
            float* out = context + i * A * D + h * D;
            std::fill(out, out + D, 0.0f);
            const float inv = 1.0f / sum;
            for (int64_t j = 0; j < len; ++j) {
                const float p = s[j] * inv;
                const float* v = V + j * D;
#pragma omp simd
                for (int64_t c = 0; c < D; ++c) out[c] += p * v[c];
            }
        }
    }
}

}  // namespace mwb::generate
