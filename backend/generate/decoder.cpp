#include "generate/decoder.h"

#include "model/rope.h"
#include "mwb/kernels/error.h"

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
    : d_(d), max_batch_(max_batch), max_len_(max_len), lengths_(static_cast<std::size_t>(max_batch), 0) {
    MWB_CHECK(params.device == Device::CPU && params.dtype == DType::F32,
              "generation runs on the CPU with fp32 weights (got {})", params.describe());
    MWB_CHECK(max_batch >= 1 && max_len >= 1 && (!d.learned_positions() || max_len <= d.max_positions),
              "generation: {} rows of {} tokens (the model has {} learned positions)", max_batch, max_len,
              d.max_positions);
    const auto view = [&](const char* name) { return layout.view(params, layout.index_of(name)); };
    wte_ = view("embedding.word_embeddings.weight");
    MWB_CHECK(wte_.dim(0) == d.vocab,
              "generation needs the whole model (tensor-parallel size 1): the word embedding "
              "has {} of {} rows",
              wte_.dim(0), d.vocab);
    if (d.learned_positions()) wpe_ = view("embedding.position_embeddings.weight");
    lnf_w_ = view("decoder.final_layernorm.weight");
    if (!d.rmsnorm) lnf_b_ = view("decoder.final_layernorm.bias");
    out_w_ = d.tied_output ? wte_ : view("output_layer.weight");
    for (int64_t l = 0; l < d.layers; ++l) w_.push_back(TransformerLayer::params(layout, params, l, d));
    if (d.positions == GptDims::Positions::Rope) {
        const int64_t half = d.rotary_dim / 2;
        rope_cos_.resize(static_cast<std::size_t>(max_len * half));
        rope_sin_.resize(rope_cos_.size());
        rotary_tables(d, max_len, rope_cos_.data(), rope_sin_.data());
    }
    const int64_t per_layer = max_batch * d.kv_groups() * max_len * d.head_dim();
    k_cache_.assign(static_cast<std::size_t>(per_layer * d.layers), 0.0f);
    v_cache_.assign(k_cache_.size(), 0.0f);
}

float* Decoder::cache_k(int64_t layer, int64_t row, int64_t group) const {
    const int64_t G = d_.kv_groups(), D = d_.head_dim();
    return const_cast<float*>(k_cache_.data()) + (((layer * max_batch_ + row) * G + group) * max_len_) * D;
}

float* Decoder::cache_v(int64_t layer, int64_t row, int64_t group) const {
    const int64_t G = d_.kv_groups(), D = d_.head_dim();
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
    size(qkv_, d_.qkv_rows());
    size(ctx_, d_.heads * d_.head_dim());
    size(branch_, H);
    size(fc1_, d_.fc1_rows());
    size(act_, d_.ffn);
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
    const int64_t n = static_cast<int64_t>(entries.size()), H = d_.hidden, W = d_.qkv_rows();
    const int64_t F = d_.ffn, F1 = d_.fc1_rows();
    for (const Entry& e : entries)
        MWB_CHECK(e.pos < max_len_, "generation: row {} is full ({} tokens)", e.row, max_len_);
    ensure_scratch(n);
    const SingleThreadBelow small(n * weight_bytes_per_step() / 4, int64_t{1} << 21);
    float *x = x_.data(), *x2 = x2_.data(), *ln = ln_.data(), *qkv = qkv_.data(), *ctx = ctx_.data();
    float *branch = branch_.data(), *fc1 = fc1_.data(), *act = act_.data();

    // Embedding: word row plus (learned) position row.
    for (int64_t i = 0; i < n; ++i) {
        MWB_CHECK(ids[i] >= 0 && ids[i] < d_.vocab, "generation: token id {} is outside the vocabulary [0, {})", ids[i],
                  d_.vocab);
        std::memcpy(x + i * H, wte_.f32() + int64_t{ids[i]} * H, static_cast<std::size_t>(H) * sizeof(float));
        if (!wpe_.empty()) {
            const float* p = wpe_.f32() + entries[i].pos * H;
            for (int64_t h = 0; h < H; ++h) x[i * H + h] += p[h];
        }
    }
    const auto norm = [&](float* out, const float* in, const TensorView& w, const TensorView& b, int64_t rows) {
        if (d_.rmsnorm)
            ops::rmsnorm_forward(op_, host(out, {rows, H}), host(rstd_.data(), {rows}),
                                 host(const_cast<float*>(in), {rows, H}), w, d_.norm_eps);
        else
            ops::layernorm_forward(op_, host(out, {rows, H}), host(mean_.data(), {rows}), host(rstd_.data(), {rows}),
                                   host(const_cast<float*>(in), {rows, H}), w, b, d_.norm_eps);
    };
    AttentionParams ap;
    ap.num_heads = static_cast<int>(d_.heads);
    ap.num_query_groups = static_cast<int>(d_.kv_groups());
    ap.total_heads = ap.num_heads;
    ap.batch = 1;
    const int64_t half = d_.rotary_dim / 2, G = d_.kv_groups(), D = d_.head_dim(), per_group = W / G;

    for (int64_t l = 0; l < d_.layers; ++l) {
        const LayerParams& w = w_[static_cast<std::size_t>(l)];
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
                std::memcpy(cache_k(l, entries[i].row, g) + entries[i].pos * D, k, static_cast<std::size_t>(D) * 4);
                std::memcpy(cache_v(l, entries[i].row, g) + entries[i].pos * D, k + D, static_cast<std::size_t>(D) * 4);
            }
        }
        attention(entries, l, qkv, ctx);
        linear(branch, ctx, n, w.proj_w, w.proj_b);
        ops::add(op_, host(x2, {n, H}), host(x, {n, H}), host(branch, {n, H}));
        norm(ln, x2, w.ln2_w, w.ln2_b, n);
        linear(fc1, ln, n, w.fc1_w, w.fc1_b);
        if (d_.swiglu)
            ops::swiglu_forward(op_, host(act, {n, F}), host(fc1, {n, F1}));
        else
            ops::gelu_forward(op_, host(act, {n, F}), host(fc1, {n, F}));
        linear(branch, act, n, w.fc2_w, w.fc2_b);
        ops::add(op_, host(x, {n, H}), host(x2, {n, H}), host(branch, {n, H}));
    }
    for (const Entry& e : entries) lengths_[static_cast<std::size_t>(e.row)] = std::max(length(e.row), e.pos + 1);

    // Head: final norm and output layer, only for the rows whose logits are wanted.
    const int64_t m = static_cast<int64_t>(logit_rows.size());
    for (int64_t j = 0; j < m; ++j)
        std::memcpy(x2 + j * H, x + logit_rows[j] * H, static_cast<std::size_t>(H) * sizeof(float));
    norm(ln, x2, lnf_w_, lnf_b_, m);
    linear(logits, ln, m, out_w_, {});
}

void Decoder::attention(std::span<const Entry> entries, int64_t layer, const float* qkv, float* context) {
    // Causal attention of each token over its row's cache [0, pos]: one (token, head) pair per task.
    const int64_t n = static_cast<int64_t>(entries.size()), A = d_.heads, G = d_.kv_groups(), D = d_.head_dim();
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
