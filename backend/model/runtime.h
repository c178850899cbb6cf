#pragma once
// What the model's forward and backward run with: the op context, the tracked allocator, the
// storage precision, and the dropout stream of the current micro-batch.
#include "backend/core/memory.h"
#include "mwb/kernels/ops.h"

#include <cstdint>

namespace mwb {

/// Dropout sites of the model; each (micro-batch, layer, site) draws an independent stream.
enum class DropoutSite : uint64_t { Embedding = 0, Attention = 1, AttentionOutput = 2, MlpOutput = 3 };

/// What stored activations are held as in a run of storage dtype `storage` (ModelRuntime): the storage
/// dtype on both devices, whose kernels read and write 16-bit tensors (docs/numerics.md).
inline DType stored_dtype(Device /*device: the same on both*/, DType storage) {
    return storage;
}

struct ModelRuntime {
    OpContext& ctx;
    Allocator& alloc;
    DType storage = DType::F32;  ///< what activations are stored as (16-bit emulated on the CPU)
    uint64_t seed = 0;
    uint64_t stream_base = 0;    ///< micro_batch_stream() of the micro-batch being run (without `iteration`)
    bool training = true;        ///< false: no dropout
    /// With it, the dropout streams are derived where they are drawn from the iteration in this
    /// memory (the step block's step_params::Iteration) and `micro_batch` (RngStream).
    const double* iteration = nullptr;
    int64_t micro_batch = 0;     ///< the global micro-batch (with `iteration`)

    Buffer activation(int64_t numel) const { return Buffer(alloc, MemCategory::Activations, numel); }
    /// The dtype of stored activations: a layer's intermediates (qkv, context, fc1, activation output),
    /// the residual stream (embedding output, each layer's input, x2 and output), the norm outputs and
    /// the gradients of all of these: the storage dtype on both devices (docs/numerics.md).
    DType stored_dtype() const { return mwb::stored_dtype(ctx.device, storage); }
    Buffer stored_activation(int64_t numel) const {
        return Buffer(alloc, MemCategory::Activations, numel, stored_dtype());
    }
    /// A temporary stored like the activations: the gradient of a stored tensor, a gathered norm output.
    Buffer stored_workspace(int64_t numel) const {
        return Buffer(alloc, MemCategory::Workspace, numel, stored_dtype());
    }
    Buffer workspace(int64_t numel) const { return Buffer(alloc, MemCategory::Workspace, numel); }
    /// Rounds an f32 tensor to the storage precision, as a 16-bit store would (no-op in fp32 runs, and
    /// for 16-bit tensors, which the op that wrote them has rounded already). Still needed where an f32
    /// array holds a stored value: on CUDA, and the sums kept in f32 for a tensor-parallel reduction.
    void store(const TensorView& v) const {
        if (storage != DType::F32 && v.dtype == DType::F32) ops::round_to(ctx, v, storage);
    }
    RngStream rng(int64_t layer, DropoutSite site) const {
        const uint64_t key = static_cast<uint64_t>(layer) * 8 + static_cast<uint64_t>(site);
        if (iteration) return RngStream{seed, 0, iteration, micro_batch, key};
        return RngStream{seed, site_stream(stream_base, key)};
    }
    float dropout(float p) const { return training ? p : 0.0f; }
};

}  // namespace mwb
