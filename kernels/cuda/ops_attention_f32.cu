// The own attention kernels on fp32 arrays: the CUDA-core kernels (fp32 runs, fp16 runs before 16-bit storage) and the tensor cores on bf16 values (bf16 runs).
#include "attention_launch.cuh"

namespace mwb::cuda::attention {

MWB_ATTENTION_LAUNCHES(float, __nv_bfloat16)
MWB_ATTENTION_LAUNCHES(float, int)

}  // namespace mwb::cuda::attention
