// The own attention kernels on bf16 tensors: the tensor-core kernels (bf16 fragments) and the CUDA-core ones (a device without the shared memory).
#include "attention_launch.cuh"

namespace mwb::cuda::attention {

MWB_ATTENTION_LAUNCHES(__nv_bfloat16, __nv_bfloat16)

}  // namespace mwb::cuda::attention
