// The own attention kernels on f16 tensors: the tensor-core kernels (fp16 fragments) and the CUDA-core ones (a device without the shared memory).
#include "attention_launch.cuh"

namespace mwb::cuda::attention {

MWB_ATTENTION_LAUNCHES(__half, __half)

}  // namespace mwb::cuda::attention
