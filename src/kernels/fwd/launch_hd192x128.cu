// Explicit instantiations of the fwd kernel, head dims (Dqk 192, Dv 128).
#include "kernels/fwd/launch_kernel.cuh"

namespace hopattn::kernels::fwd {

template cudaError_t launch_kernel<FwdBf16Hd192x128>(const FwdParams&, int, cudaStream_t);
template cudaError_t launch_kernel<FwdFp16Hd192x128>(const FwdParams&, int, cudaStream_t);

}  // namespace hopattn::kernels::fwd
