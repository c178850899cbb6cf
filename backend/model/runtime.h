#pragma once
// What the model's forward and backward run with: the op context, the tracked allocator, the
// storage precision, and the dropout stream of the current micro-batch.
#include "backend/core/memory.h"
#include "mwb/kernels/ops.h"

#include <cstdint>

namespace mwb {

/// Dropout sites of the model; each (micro-batch, layer, site) draws an independent stream.
enum class DropoutSite : uint64_t { Embedding = 0, Attention = 1, AttentionOutput = 2, MlpOutput = 3 };

/// splitmix64: a bijective 64-bit mix used to derive stream ids.
inline uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/// Stream base of one micro-batch of one iteration (iterations count from 1).
inline uint64_t micro_batch_stream(int64_t iteration, int64_t micro_batch) {
    return mix64(mix64(static_cast<uint64_t>(iteration)) ^ static_cast<uint64_t>(micro_batch));
}

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
    uint64_t stream_base = 0;    ///< micro_batch_stream() of the micro-batch being run
    bool training = true;        ///< false: no dropout

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
        return RngStream{seed, mix64(stream_base ^ mix64(static_cast<uint64_t>(layer) * 8 + static_cast<uint64_t>(site)))};
    }
    float dropout(float p) const { return training ? p : 0.0f; }
};

}  // namespace mwb
