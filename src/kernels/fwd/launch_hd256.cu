// Explicit instantiations of the fwd kernel, head dim 256.
#include "kernels/fwd/launch_kernel.cuh"

namespace hopattn::kernels::fwd {

template cudaError_t launch_kernel<FwdBf16Hd256>(const FwdParams&, int, cudaStream_t);
template cudaError_t launch_kernel<FwdFp16Hd256>(const FwdParams&, int, cudaStream_t);

}  // namespace hopattn::kernels::fwd
