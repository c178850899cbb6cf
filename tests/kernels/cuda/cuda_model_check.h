#pragma once
// The whole GPT (GptModel + AdamW) trained a few iterations on a device, shared by the Qt suite
// test_kernels_cuda_model and by mwb-gpu-check's "model" check (plain C++, no Qt, no MPI).
#include "cuda_op_checks.h"

#include "mwb/kernels/tensor.h"

#include <vector>

namespace mwb::test {

struct SmallGptRun {
    std::vector<double> losses, grad_norms;
    std::vector<float> weights;  ///< after the last step, read back to the host
};

/// 2 layers, hidden 64, 4 heads (head dim 16), seq 32, micro batch 2, vocabulary 256, dropout 0.1,
/// fp32, AdamW with clipping; `iterations` steps on random tokens (the same on every device).
SmallGptRun train_small_gpt(Device device, int iterations);

/// 4 iterations on the CPU and on the GPU: the worst relative loss difference (tolerance 1e-4).
CudaCheckResult check_model_against_cpu();

/// fp16 without accumulate_allreduce_grads_in_fp32 (Megatron-LM's default: main grads in fp16): 6 whole
/// TrainSteps of the cuda_graph check's tiny GPT (dropout, two micro-batches, a dynamic loss scale),
/// eagerly, on the GPU and on the CPU, both with an f16 gradient arena (checked): losses, gradient
/// norms and loss scales within 1e-2 relative (16-bit GEMMs summing in other orders).
CudaCheckResult check_model_fp16_gradients();

/// NcclCommunicator over a group of one (the device machine has one GPU and no MPI): every
/// collective and a grouped exchange with itself on device buffers, not blocking the host, ordered
/// with ops queued before and after on the compute stream; values bit for bit.
CudaCheckResult check_nccl_group_of_one();

/// NCCL's hang handling: a receive that nothing matches, on a communicator with a 2 s timeout, must
/// fail after about 2 s (not hang), naming the group, the operation and the world ranks, and leave the
/// communicator aborted and the CUDA context usable.
CudaCheckResult check_nccl_timeout();

/// The training step as a CUDA graph (runtime.enable_cuda_graph): 12 whole TrainSteps of a tiny GPT
/// with dropout 0.1 and two micro-batches, eagerly and captured after 2 eager steps then replayed,
/// same seed, fp16 (a loss scale that changes while replaying) and bf16, deterministic: the losses,
/// gradient norms and loss scales bit for bit, and the graph replayed on every step after its capture.
CudaCheckResult check_cuda_graph();

/// Generation (backend/generate/): the decoder on the GPU against the decoder on the CPU, same weights:
/// a GPT shape (learned positions, LayerNorm, GELU) and a Llama shape (RoPE, RMSNorm, SwiGLU, GQA), four
/// prompts of different lengths prefilled and decoded 12 steps greedily, the batch shrinking as rows
/// finish. The same tokens at every step, logits within 1e-4 normwise.
CudaCheckResult check_generation_against_cpu();

}  // namespace mwb::test
