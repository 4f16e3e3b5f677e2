// Explicit instantiations of the main bwd kernel, head dim 256.
#include "kernels/bwd/launch_kernel.cuh"

namespace hopattn::kernels::bwd {

template cudaError_t launch_kernel<BwdBf16Hd256>(const BwdParams&, dim3, cudaStream_t);
template cudaError_t launch_kernel<BwdFp16Hd256>(const BwdParams&, dim3, cudaStream_t);

}  // namespace hopattn::kernels::bwd
