#include "backend/model/init.h"

#include "backend/model/runtime.h"
#include "mwb/kernels/error.h"
#include "mwb/kernels/philox.h"

#include <cmath>
#include <numbers>

namespace mwb {

uint64_t tensor_stream(std::string_view name) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
    return mix64(h);
}

void normal_init(const TensorView& out, uint64_t seed, uint64_t stream, float std, int64_t first_index) {
    float* p = out.f32();
    const int64_t n = out.numel();
    const RngStream rng{seed, stream};
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t index = static_cast<uint64_t>(first_index + i);
        const Philox4 r = philox_draw(rng, index >> 2);
        const int pair = static_cast<int>(index & 3) >> 1;
        // Uniforms in (0, 1]: never log(0).
        const double u1 = (static_cast<double>(r.v[2 * pair]) + 1.0) / 4294967296.0;
        const double u2 = static_cast<double>(r.v[2 * pair + 1]) / 4294967296.0;
        const double radius = std::sqrt(-2.0 * std::log(u1));
        const double angle = 2.0 * std::numbers::pi * u2;
        const double z = (index & 1) ? radius * std::sin(angle) : radius * std::cos(angle);
        p[i] = static_cast<float>(std * z);
    }
}

}  // namespace mwb

namespace mwb {

void normal_init_slice(const TensorView& local, const ParamInfo& p, uint64_t seed, float std) {
    const uint64_t stream = tensor_stream(p.name);
    if (p.split_dim <= 0) {  // replicated, or rows [split_begin, ...) of each block: contiguous global ranges
        const int64_t row = p.shape.size() == 2 ? p.shape[1] : 1;
        const int64_t block_rows = p.shape[0] / p.split_blocks, block_global = p.global_shape[0] / p.split_blocks;
        for (int k = 0; k < p.split_blocks; ++k)
            normal_init(make_view(local.f32() + k * block_rows * row, DType::F32, {block_rows * row}), seed, stream,
                        std, (k * block_global + p.split_begin) * row);
        return;
    }
    MWB_CHECK(p.split_blocks == 1, "parameter {}: blocks are only split along dimension 0", p.name);
    const int64_t rows = p.shape[0], cols = p.shape[1], global_cols = p.global_shape[1];
    for (int64_t r = 0; r < rows; ++r)
        normal_init(make_view(local.f32() + r * cols, DType::F32, {cols}), seed, stream, std,
                    r * global_cols + p.split_begin);
}

}  // namespace mwb
