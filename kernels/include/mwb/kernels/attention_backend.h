#pragma once
// Which kernels run causal attention on a GPU. The CPU has one implementation and ignores the choice.
#include <string>

namespace mwb {

/// Own: this project's flash-style kernels (kernels/cuda/attention*_kernels.cuh), the reference of the
/// op checks, bit-identical run to run, the CPU's dropout masks. Cudnn: cuDNN 9's fused scaled-dot-
/// product attention (loaded at run time, kernels/cuda/cudnn_sdpa.cpp), bf16 runs only, its own
/// Philox stream for dropout.
enum class AttentionBackend { Own, Cudnn };

const char* attention_backend_name(AttentionBackend b);

/// The backend a run asks for ("auto", "cudnn" or "own", runtime.attention_backend) resolved on the
/// current GPU, with the reason in words (one log line). auto and cudnn take cuDNN for a bf16 or fp16
/// run (`sixteen_bit`: 16-bit stored tensors) when the library loads, its version is 9 or newer and the GPU is
/// sm_80+, else the own kernels; `deterministic` (bit-identical reruns with the CPU's dropout masks)
/// always takes the own kernels. Never throws.
struct AttentionBackendChoice {
    AttentionBackend backend = AttentionBackend::Own;
    std::string reason;
};
AttentionBackendChoice resolve_attention_backend(const std::string& requested, bool deterministic, bool sixteen_bit);

/// The attention shapes cuDNN refused so far in this process, one "shape: why" line each (empty when
/// none): those calls ran on the own kernels (each said so once on stderr).
std::string cudnn_attention_refusals();

}  // namespace mwb
