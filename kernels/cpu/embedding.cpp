// Token (vocab-parallel) and learned position embeddings.
#include "cpu_ops.h"
#include "storage.h"

namespace mwb::cpu {

void embedding_forward(OpContext&, TensorView out, TensorView ids, TensorView table, int64_t vocab_start) {
    const int64_t rows = ids.numel(), h = table.dim(1), v = table.dim(0);
    const int32_t* id = ids.i32();
    float* o = out.f32();
    // The table is the weights' working copy: 16-bit in bf16/fp16 runs, widened row by row as gathered.
    with_storage(table.dtype, [&](auto tag) {
        using S = Storage<decltype(tag)::value>;
        const auto* t = elements<decltype(tag)::value>(table);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t local = static_cast<int64_t>(id[r]) - vocab_start;
            float* dst = o + r * h;
            if (local >= 0 && local < v) {
                const auto* src = t + local * h;
#pragma omp simd
                for (int64_t c = 0; c < h; ++c) dst[c] = S::load(src[c]);
            } else {
#pragma omp simd
                for (int64_t c = 0; c < h; ++c) dst[c] = 0.0f;
            }
        }
    });
}

void embedding_backward(OpContext&, TensorView dtable, TensorView dout, TensorView ids, int64_t vocab_start) {
    const int64_t rows = ids.numel(), h = dtable.dim(1), v = dtable.dim(0);
    const int32_t* id = ids.i32();
    const float* d = dout.f32();
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
            const float* src = d + r * h;
#pragma omp simd
            for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
        }
    }
}

void position_embedding_forward(OpContext&, TensorView out, TensorView wpe, int64_t position_offset) {
    const int64_t s_len = out.dim(0), b_len = out.dim(1), h = out.dim(2);
    float* o = out.f32();
    with_storage(wpe.dtype, [&](auto tag) {  // 16-bit in bf16/fp16 runs, as the word embedding
        using S = Storage<decltype(tag)::value>;
        const auto* w = elements<decltype(tag)::value>(wpe);
#pragma omp parallel for schedule(static)
        for (int64_t s = 0; s < s_len; ++s) {
            const auto* src = w + (s + position_offset) * h;
            for (int64_t b = 0; b < b_len; ++b) {
                float* dst = o + (s * b_len + b) * h;
#pragma omp simd
                for (int64_t c = 0; c < h; ++c) dst[c] += S::load(src[c]);
            }
        }
    });
}

void position_embedding_backward(OpContext&, TensorView dwpe, TensorView dout, int64_t position_offset) {
    const int64_t s_len = dout.dim(0), b_len = dout.dim(1), h = dout.dim(2);
    const float* d = dout.f32();
    float* g = dwpe.f32();
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < s_len; ++s) {
        float* dst = g + (s + position_offset) * h;
        for (int64_t b = 0; b < b_len; ++b) {
            const float* src = d + (s * b_len + b) * h;
#pragma omp simd
            for (int64_t c = 0; c < h; ++c) dst[c] += src[c];
        }
    }
}

}  // namespace mwb::cpu
