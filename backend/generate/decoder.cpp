#include "backend/generate/decoder.h"

#include "backend/model/rope.h"
#include "backend/parallel/communicator.h"
#include "mwb/kernels/device_runtime.h"
#include "mwb/kernels/error.h"
#include "mwb/kernels/ops.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mwb::generate {

namespace {

/// Rows [r0, r1) of y (n, out) = x (n, in)·wᵀ + b: one single-threaded BLAS call (OpenBLAS runs
/// single-threaded inside a parallel region) on those contiguous rows of w; n = 1 is an sgemv.
void linear_rows(float* y, const float* x, int64_t n, const TensorView& w, const TensorView& b, int64_t r0,
                 int64_t r1) {
    if (r0 >= r1) return;
    const int64_t out = w.dim(0), in = w.dim(1);
    const float* W = w.f32();
    const auto rows = static_cast<blasint>(r1 - r0);
    if (n == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, static_cast<blasint>(in), 1.0f, W + r0 * in,
                    static_cast<blasint>(in), x, 1, 0.0f, y + r0, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(n), rows, static_cast<blasint>(in),
                    1.0f, x, static_cast<blasint>(in), W + r0 * in, static_cast<blasint>(in), 0.0f, y + r0,
                    static_cast<blasint>(out));
    if (b.empty()) return;
    const float* bias = b.f32();
    for (int64_t i = 0; i < n; ++i) {
        float* yi = y + i * out;
#pragma omp simd
        for (int64_t r = r0; r < r1; ++r) yi[r] += bias[r];
    }
}

/// Thread t's rows of a layer of `out` outputs split over `threads`: [first, last), 16-row aligned.
struct RowSlice {
    int64_t first, last;
};
RowSlice slice_of(int64_t out, int threads, int t) {
    const int64_t per = (out / threads + 15) / 16 * 16;
    const int64_t first = std::min(out, t * per);
    return {first, t + 1 == threads ? out : std::min(out, first + per)};
}

/// Threads of a linear layer of n rows through w: below ~256K multiply-adds not worth a hand-off, and
/// at least 64 output rows per thread.
int linear_threads(int64_t n, const TensorView& w, int threads) {
    return n * w.dim(0) * w.dim(1) >= (int64_t{1} << 18)
               ? static_cast<int>(std::clamp<int64_t>(w.dim(0) / 64, 1, threads))
               : 1;
}

/// Runs f on the team's first thread, then the team meets (no team: runs f).
template <class Member, class F>
void on_first(const Member& m, F&& f) {
    if (m.thread == 0) f();
    if (m.team) m.team->sync(m.threads);
}

/// Sets the OpenMP thread count for its lifetime (the ops read it), restoring it when it goes.
class OmpThreads {
public:
    explicit OmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(std::max(1, n)); }
    ~OmpThreads() { omp_set_num_threads(saved_); }
    OmpThreads(const OmpThreads&) = delete;
    OmpThreads& operator=(const OmpThreads&) = delete;

private:
    int saved_;
};

}  // namespace

Decoder::Decoder(const GptDims& d, const ParamLayout& layout, const TensorView& params, int64_t max_batch,
                 int64_t max_len, Device device)
    : Decoder(d, ModelPartition::whole(d), layout, params, {}, max_batch, max_len, device) {}

Decoder::Decoder(const GptDims& d, const ModelPartition& partition, const ParamLayout& layout, const TensorView& params,
                 DecoderGroups groups, int64_t max_batch, int64_t max_len, Device device)
    : d_(d),
      partition_(partition),
      groups_(groups),
      op_{device, nullptr},
      alloc_(device),
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
              "generation reads fp32 weights from host memory (got {})", params.describe());
    MWB_CHECK(device == Device::CPU || (!groups_.tp && !groups_.pp),
              "generation on CUDA runs the whole model in one process ({} tensor- x {} pipeline-parallel ranks here)",
              tp_size_, pp_size_);
    MWB_CHECK(max_len < (int64_t{1} << 31) && max_batch < (int64_t{1} << 31), "generation: {} rows of {} tokens",
              max_batch, max_len);
    TensorView arena = params;
    if (device == Device::CUDA) {
        device_weights_ = Buffer(alloc_, MemCategory::Weights, params.numel());
        device::copy_to_device(device_weights_.data(), params.data, params.numel() * 4);
        arena = device_weights_.view();
    }
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
    const auto view = [&](const char* name) { return layout.view(arena, layout.index_of(name)); };
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
            w_.push_back(TransformerLayer::params(layout, arena, l, d));
        chunk_end_.push_back(w_.size());
    }
    if (d.positions == GptDims::Positions::Rope) {
        const int64_t half = d.rotary_dim / 2;
        std::vector<float> cos(static_cast<std::size_t>(max_len * half)), sin(cos.size());
        rotary_tables(d, max_len, cos.data(), sin.data());
        rope_cos_ = Buffer(alloc_, MemCategory::Workspace, max_len * half);
        rope_sin_ = Buffer(alloc_, MemCategory::Workspace, max_len * half);
        if (device == Device::CUDA) {
            device::copy_to_device(rope_cos_.data(), cos.data(), rope_cos_.bytes());
            device::copy_to_device(rope_sin_.data(), sin.data(), rope_sin_.bytes());
        } else {
            std::copy(cos.begin(), cos.end(), rope_cos_.f32());
            std::copy(sin.begin(), sin.end(), rope_sin_.f32());
        }
    }
    // Only positions a row has reached are ever read, so the cache needs no initialisation.
    const int64_t per_layer = max_batch * kv_groups_ * max_len * d.head_dim();
    k_cache_ = Buffer(alloc_, MemCategory::Activations, per_layer * static_cast<int64_t>(w_.size()));
    v_cache_ = Buffer(alloc_, MemCategory::Activations, per_layer * static_cast<int64_t>(w_.size()));
    // A forward returns the logits of at most max_batch rows (decode) or one (prefill).
    if (device == Device::CUDA) logits_ = Buffer(alloc_, MemCategory::Activations, max_batch * d.vocab);
}

TensorView Decoder::on_device(float* p, std::initializer_list<int64_t> shape) const {
    return make_view(p, DType::F32, shape, op_.device);
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
    const auto size = [&](Buffer& b, int64_t per_row, DType dtype = DType::F32) {
        b = Buffer(alloc_, MemCategory::Activations, n * per_row, dtype);
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
    if (op_.device == Device::CUDA) {
        size(ids_dev_, 1, DType::I32);
        size(rows_dev_, 1, DType::I32);
        size(positions_dev_, 1, DType::I32);
    }
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
    const bool cuda = op_.device == Device::CUDA;
    // CPU threads. Waking a thread costs tens of microseconds under OMP_WAIT_POLICY=PASSIVE (a futex
    // wake per parallel region, and a barrier at its end), more than the work of an op on a few rows: a
    // small model's step runs on one thread; otherwise the linear layers split their rows over the
    // threads, and the ops between them (norms, residual adds, activations, RoPE) run on this thread
    // unless the step holds enough rows (a prefill) to pay for the hand-off. (An op called inside a
    // parallel region would open a nested one, which costs as much: docs/performance.md.)
    linear_threads_ =
        cuda || n * weight_bytes_per_step() / 4 < (int64_t{1} << 21) ? 1 : std::max(1, omp_get_max_threads());
    const bool threaded_ops = cuda || n * ffn_ >= (int64_t{1} << 16);
    const OmpThreads step(threaded_ops ? linear_threads_ : 1);
    stage_indices(entries, ids);

    // A decode step of one process: one parallel region for all of it (a StepTeam, decoder.h), instead
    // of one per linear layer. Results are those of the regions: the same rows per thread, the same ops.
    if (!threaded_ops && linear_threads_ > 1 && !groups_.tp && !groups_.pp &&
        (step_threads_ == StepThreads::Team ||
         (step_threads_ == StepThreads::Auto && StepTeam::cpus_free_for(linear_threads_)))) {
        embed(entries, ids, x_.f32());
        StepTeam team;
#pragma omp parallel num_threads(linear_threads_)
        {
            const Member m{&team, omp_get_thread_num(), omp_get_num_threads()};
            for (std::size_t slot = 0; slot < w_.size(); ++slot) layer(entries, static_cast<int64_t>(slot), m);
            if (partition_.head) head(logit_rows, logits, m);
        }
        for (const Entry& e : entries) lengths_[static_cast<std::size_t>(e.row)] = std::max(length(e.row), e.pos + 1);
        return;
    }

    // Virtual stage k (chunk k / P of stage k % P) runs after stage k - 1 and hands its residual
    // stream to stage k + 1; with one stage that is just chunk after chunk.
    const int64_t P = pp_size_, stages = static_cast<int64_t>(chunk_end_.size()) * P;
    for (int64_t k = 0; k < stages; ++k) {
        if (k % P != pp_rank_) continue;
        const auto peer = [&](int64_t stage) { return static_cast<int>(stage % P); };
        if (k == 0)
            embed(entries, ids, x_.f32());
        else if (P > 1) {
            const Message in{x_.f32(), n * H, peer(k - 1), static_cast<int>(k)};
            groups_.pp->exchange({}, std::span<const Message>(&in, 1));
        }
        const std::size_t c = static_cast<std::size_t>(k / P);
        for (std::size_t slot = c == 0 ? 0 : chunk_end_[c - 1]; slot < chunk_end_[c]; ++slot)
            layer(entries, static_cast<int64_t>(slot));
        if (k + 1 < stages && P > 1) {
            const Message out{x_.f32(), n * H, peer(k + 1), static_cast<int>(k + 1)};
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
        ops::rmsnorm_forward(op_, on_device(out, {rows, H}), rstd_.view({rows}),
                             on_device(const_cast<float*>(in), {rows, H}), w, d_.norm_eps);
    else
        ops::layernorm_forward(op_, on_device(out, {rows, H}), mean_.view({rows}), rstd_.view({rows}),
                               on_device(const_cast<float*>(in), {rows, H}), w, b, d_.norm_eps);
}

void Decoder::embed(std::span<const Entry> entries, std::span<const int32_t> ids, float* x) {
    // Word row plus (learned) position row. A vocabulary-parallel embedding: each rank has the rows
    // of its ids, zeros for the others, and the sum over the ranks is every token's row.
    const int64_t n = static_cast<int64_t>(entries.size()), H = d_.hidden;
    if (op_.device == Device::CUDA) {
        ops::embedding_forward(op_, on_device(x, {n, H}), ids_dev_.view({n}), wte_, 0);
        if (wpe_.empty()) return;
        // Prefill rows hold consecutive positions of one row: one call; decode rows each their own.
        const bool consecutive = std::all_of(entries.begin(), entries.end(), [&](const Entry& e) {
            return e.pos == entries[0].pos + (&e - entries.data());
        });
        if (consecutive) return ops::position_embedding_forward(op_, on_device(x, {n, 1, H}), wpe_, entries[0].pos);
        for (int64_t i = 0; i < n; ++i)
            ops::position_embedding_forward(op_, on_device(x + i * H, {1, 1, H}), wpe_, entries[i].pos);
        return;
    }
    // A few rows: copies on this thread (an op would wake the thread pool for microseconds of work).
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
#pragma omp simd
            for (int64_t h = 0; h < H; ++h) x[i * H + h] += p[h];
        }
}

void Decoder::linear(float* y, const float* x, int64_t n, const TensorView& w, const TensorView& b, const Member& m) {
    if (op_.device == Device::CUDA)
        return ops::linear_forward(op_, on_device(y, {n, w.dim(0)}), on_device(const_cast<float*>(x), {n, w.dim(1)}), w,
                                   b);
    // The output rows over the threads: each thread one single-threaded BLAS call on its contiguous rows
    // of w (in a team the threads are already running; otherwise one parallel region).
    const int64_t out = w.dim(0);
    if (m.team) {
        const int threads = linear_threads(n, w, m.threads);
        if (m.thread < threads) {
            const RowSlice s = slice_of(out, threads, m.thread);
            linear_rows(y, x, n, w, b, s.first, s.last);
        }
        return m.team->sync(m.threads);
    }
    const int threads = linear_threads(n, w, linear_threads_);
    if (threads == 1) return linear_rows(y, x, n, w, b, 0, out);
#pragma omp parallel num_threads(threads)
    {
        const RowSlice s = slice_of(out, threads, omp_get_thread_num());
        linear_rows(y, x, n, w, b, s.first, s.last);
    }
}

void Decoder::stage_indices(std::span<const Entry> entries, std::span<const int32_t> ids) {
    const std::size_t n = entries.size();
    ids_.assign(ids.begin(), ids.end());
    rows_.resize(n);
    positions_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        rows_[i] = static_cast<int32_t>(entries[i].row);
        positions_[i] = static_cast<int32_t>(entries[i].pos);
    }
    if (op_.device != Device::CUDA) return;
    const auto bytes = static_cast<int64_t>(n * sizeof(int32_t));
    device::copy_to_device(ids_dev_.data(), ids_.data(), bytes);
    device::copy_to_device(rows_dev_.data(), rows_.data(), bytes);
    device::copy_to_device(positions_dev_.data(), positions_.data(), bytes);
}

void Decoder::row_parallel(float* y, const float* x, int64_t n, const TensorView& w, const TensorView& b,
                           const Member& m) {
    if (!groups_.tp) return linear(y, x, n, w, b, m);
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

void Decoder::layer(std::span<const Entry> entries, int64_t slot, const Member& m) {
    // In a team the first thread runs the small ops and every thread meets after each op (on_first,
    // linear); the final residual add needs no meeting: the next layer's norm runs on the same thread.
    const int64_t n = static_cast<int64_t>(entries.size()), H = d_.hidden;
    float *x = x_.f32(), *x2 = x2_.f32(), *ln = ln_.f32(), *qkv = qkv_.f32(), *ctx = ctx_.f32();
    float *branch = branch_.f32(), *fc1 = fc1_.f32(), *act = act_.f32();
    const LayerParams& w = w_[static_cast<std::size_t>(slot)];
    on_first(m, [&] { norm(ln, x, w.ln1_w, w.ln1_b, n); });
    linear(qkv, ln, n, w.qkv_w, w.qkv_b, m);
    attention(entries, slot, m);
    row_parallel(branch, ctx, n, w.proj_w, w.proj_b, m);
    on_first(m, [&] {
        ops::add(op_, on_device(x2, {n, H}), on_device(x, {n, H}), on_device(branch, {n, H}));
        norm(ln, x2, w.ln2_w, w.ln2_b, n);
    });
    linear(fc1, ln, n, w.fc1_w, w.fc1_b, m);
    on_first(m, [&] {
        if (d_.swiglu)
            ops::swiglu_forward(op_, on_device(act, {n, ffn_}), on_device(fc1, {n, fc1_rows_}));
        else
            ops::gelu_forward(op_, on_device(act, {n, ffn_}), on_device(fc1, {n, ffn_}));
    });
    row_parallel(branch, act, n, w.fc2_w, w.fc2_b, m);
    if (m.thread == 0) ops::add(op_, on_device(x, {n, H}), on_device(x2, {n, H}), on_device(branch, {n, H}));
}

void Decoder::attention(std::span<const Entry> entries, int64_t slot, const Member& m) {
    const int64_t n = static_cast<int64_t>(entries.size()), W = qkv_rows_, G = kv_groups_, D = d_.head_dim(),
                  half = d_.rotary_dim / 2, per_layer = max_batch_ * G * max_len_ * D;
    float *qkv = qkv_.f32(), *ctx = ctx_.f32();
    float *k_cache = k_cache_.f32() + slot * per_layer, *v_cache = v_cache_.f32() + slot * per_layer;
    const bool cuda = op_.device == Device::CUDA;
    AttentionParams ap;
    ap.num_heads = static_cast<int>(heads_);
    ap.num_query_groups = static_cast<int>(kv_groups_);
    ap.total_heads = static_cast<int>(d_.heads);
    ap.batch = 1;
    ap.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d_.head_dim()));
    const auto rope = [&](float* q, int64_t width, const AttentionParams& p, int64_t pos) {
        ops::rope_forward(op_, on_device(q, {1, 1, width}), rope_cos_.view({max_len_, half}),
                          rope_sin_.view({max_len_, half}), p, static_cast<int>(d_.rotary_dim), d_.rotary_interleaved,
                          pos);
    };
    if (!m.team) {
        if (!rope_cos_.empty())
            for (int64_t i = 0; i < n; ++i) rope(qkv + i * W, W, ap, entries[static_cast<std::size_t>(i)].pos);
        // The op threads itself when the rows' cache is long enough to pay for it.
        const OmpThreads attention_threads(cuda ? 1 : linear_threads_);
        const TensorView rows = cuda ? rows_dev_.view({n}) : make_view(rows_.data(), DType::I32, {n});
        const TensorView positions = cuda ? positions_dev_.view({n}) : make_view(positions_.data(), DType::I32, {n});
        ops::cached_attention_forward(
            op_, on_device(ctx, {n, heads_ * D}), on_device(k_cache, {max_batch_, G, max_len_, D}),
            on_device(v_cache, {max_batch_, G, max_len_, D}), on_device(qkv, {n, W}), rows, positions, ap);
        return;
    }
    // A team: each thread rotates and attends with its key/value groups [g0, g1) of every token, through
    // views of just those groups (qkv and ctx hold a token's groups side by side, the cache a row's):
    // each (token, head) pair is computed as the whole op computes it.
    const int64_t g0 = G * m.thread / m.threads, g1 = G * (m.thread + 1) / m.threads, per_group = heads_ / G;
    if (g0 < g1) {
        AttentionParams part = ap;
        part.num_heads = static_cast<int>((g1 - g0) * per_group);
        part.num_query_groups = static_cast<int>(g1 - g0);
        const int64_t width = (g1 - g0) * (per_group + 2) * D;
        int32_t first_row = 0;  // the views start at the token's row
        for (int64_t i = 0; i < n; ++i) {
            const Entry& e = entries[static_cast<std::size_t>(i)];
            float* q = qkv + i * W + g0 * (per_group + 2) * D;
            if (!rope_cos_.empty()) rope(q, width, part, e.pos);
            const int64_t at = (e.row * G + g0) * max_len_ * D;
            ops::cached_attention_forward(
                op_, on_device(ctx + (i * heads_ + g0 * per_group) * D, {1, part.num_heads * D}),
                on_device(k_cache + at, {1, g1 - g0, max_len_, D}), on_device(v_cache + at, {1, g1 - g0, max_len_, D}),
                on_device(q, {1, width}), make_view(&first_row, DType::I32, {1}),
                make_view(&positions_[static_cast<std::size_t>(i)], DType::I32, {1}), part);
        }
    }
    m.team->sync(m.threads);
}

void Decoder::head(std::span<const int64_t> logit_rows, float* logits, const Member& member) {
    // Final norm and output layer, only for the rows whose logits are wanted.
    const int64_t m = static_cast<int64_t>(logit_rows.size()), H = d_.hidden, V = d_.vocab, Vt = vocab_rows_;
    float *x = x_.f32(), *x2 = x2_.f32(), *ln = ln_.f32();
    bool all_rows = true;  // decode (and a one-token prefill): the wanted rows are x's first m
    for (int64_t j = 0; j < m; ++j) all_rows = all_rows && logit_rows[static_cast<std::size_t>(j)] == j;
    on_first(member, [&] {
        if (!all_rows)
            for (int64_t j = 0; j < m; ++j)
                ops::copy(op_, on_device(x2 + j * H, {H}),
                          on_device(x + logit_rows[static_cast<std::size_t>(j)] * H, {H}));
        norm(ln, all_rows ? x : x2, lnf_w_, lnf_b_, m);
    });
    if (op_.device == Device::CUDA) {
        linear(logits_.f32(), ln, m, out_w_, {});
        device::copy_to_host(logits, logits_.data(), m * V * 4);
        return;
    }
    if (!groups_.tp) return linear(logits, ln, m, out_w_, {}, member);
    // Each rank's vocabulary rows for the m rows, gathered as (t, m, V/t), laid out as (m, V).
    local_logits_.resize(static_cast<std::size_t>(m * Vt));
    shards_.resize(static_cast<std::size_t>(m * V));
    linear(local_logits_.data(), ln, m, out_w_, {});
    groups_.tp->all_gather(local_logits_.data(), shards_.data(), m * Vt);
    for (int64_t r = 0; r < tp_size_; ++r)
        for (int64_t j = 0; j < m; ++j)
            std::memcpy(logits + j * V + r * Vt, shards_.data() + (r * m + j) * Vt, static_cast<std::size_t>(Vt) * 4);
}

}  // namespace mwb::generate
