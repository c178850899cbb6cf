// Token (vocab-parallel) and learned position embeddings. The rows they write (out) or read (dout)
// may be 16-bit views (a 16-bit run's embedding output and its gradient): a template on their storage,
// loads widen, stores round once (storage.h); the tables are the weights' working copy (16-bit in
// 16-bit runs) and their gradients (f32, or f16 in fp16 runs without accumulate_allreduce_grads_in_fp32).
#include "cpu_ops.h"
#include "storage.h"

namespace mwb::cpu {

namespace {

/// O: storage of out; W: of the table (the weights' working copy: 16-bit in bf16/fp16 runs, widened
/// element by element as its rows are gathered).
template <DType O, DType W>
void embedding_forward_as(const TensorView& out, const TensorView& ids, const TensorView& table, int64_t vocab_start) {
    const int64_t rows = ids.numel(), h = table.dim(1), v = table.dim(0);
    const int32_t* id = ids.i32();
    const auto* t = elements<W>(table);
    auto* o = elements<O>(out);
    const auto zero = Storage<O>::store(0.0f);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t local = static_cast<int64_t>(id[r]) - vocab_start;
        auto* dst = o + r * h;
        if (local >= 0 && local < v) {
            const auto* src = t + local * h;
#pragma omp simd
            for (int64_t c = 0; c < h; ++c) dst[c] = Storage<O>::store(Storage<W>::load(src[c]));
        } else {
#pragma omp simd
            for (int64_t c = 0; c < h; ++c) dst[c] = zero;
        }
    }
}

template <DType D>
void embedding_backward_as(const TensorView& dtable, const TensorView& dout, const TensorView& ids,
                           int64_t vocab_start) {
    const int64_t rows = ids.numel(), h = dtable.dim(1), v = dtable.dim(0);
    const int32_t* id = ids.i32();
    const auto* d = elements<D>(dout);
    float* g = dtable.f32();
    // Threads own column ranges and walk the rows in order: no races, and a fixed summation order.
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (h + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t c0 = blk * kBlock, c1 = std::min(h, c0 + kBlock);
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t local = static_cast<int64_t>(id[r]) - vocab_start;
            if (local < 0 || local >= v) continue;
            float* dst = g + local * h;
            const auto* src = d + r * h;
#pragma omp simd
            for (int64_t c = c0; c < c1; ++c) dst[c] += Storage<D>::load(src[c]);
        }
    }
}

template <DType O, DType W>
void position_embedding_forward_as(const TensorView& out, const TensorView& wpe, int64_t position_offset) {
    const int64_t s_len = out.dim(0), b_len = out.dim(1), h = out.dim(2);
    auto* o = elements<O>(out);
    const auto* w = elements<W>(wpe);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < s_len; ++s) {
        const auto* src = w + (s + position_offset) * h;
        for (int64_t b = 0; b < b_len; ++b) {
            auto* dst = o + (s * b_len + b) * h;
#pragma omp simd
            for (int64_t c = 0; c < h; ++c)
                dst[c] = Storage<O>::store(Storage<O>::load(dst[c]) + Storage<W>::load(src[c]));
        }
    }
}

template <DType D>
void position_embedding_backward_as(const TensorView& dwpe, const TensorView& dout, int64_t position_offset) {
    const int64_t s_len = dout.dim(0), b_len = dout.dim(1), h = dout.dim(2);
    const auto* d = elements<D>(dout);
    float* g = dwpe.f32();
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < s_len; ++s) {
        float* dst = g + (s + position_offset) * h;
        for (int64_t b = 0; b < b_len; ++b) {
            const auto* src = d + (s * b_len + b) * h;
#pragma omp simd
            for (int64_t c = 0; c < h; ++c) dst[c] += Storage<D>::load(src[c]);
        }
    }
}

}  // namespace

void embedding_forward(OpContext&, TensorView out, TensorView ids, TensorView table, int64_t vocab_start) {
    with_storages(out.dtype, table.dtype, [&](auto o, auto w) {
        embedding_forward_as<decltype(o)::value, decltype(w)::value>(out, ids, table, vocab_start);
    });
}

// An f16 dtable or dwpe (the f16 gradient arena) is widened, accumulated in fp32 and rounded once.
void embedding_backward(OpContext&, TensorView dtable, TensorView dout, TensorView ids, int64_t vocab_start) {
    const TensorView d32 = widened(dtable, Scratch::Grad);
    with_storage(dout.dtype, [&](auto t) { embedding_backward_as<decltype(t)::value>(d32, dout, ids, vocab_start); });
    narrow(dtable, d32);
}

void position_embedding_forward(OpContext&, TensorView out, TensorView wpe, int64_t position_offset) {
    with_storages(out.dtype, wpe.dtype, [&](auto o, auto w) {
        position_embedding_forward_as<decltype(o)::value, decltype(w)::value>(out, wpe, position_offset);
    });
}

void position_embedding_backward(OpContext&, TensorView dwpe, TensorView dout, int64_t position_offset) {
    const TensorView d32 = widened(dwpe, Scratch::Grad);
    with_storage(dout.dtype,
                 [&](auto t) { position_embedding_backward_as<decltype(t)::value>(d32, dout, position_offset); });
    narrow(dwpe, d32);
}

}  // namespace mwb::cpu
