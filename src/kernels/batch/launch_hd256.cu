// Explicit instantiations of the batch family's work-list fwd kernel, head dim 256.
#include "kernels/batch/launch_kernel.cuh"

namespace hopattn::kernels::fwd {

template cudaError_t launch_kernel<FwdBf16Hd256, batch::WorkListScheduler>(const FwdParams&, int,
                                                                           cudaStream_t);
template cudaError_t launch_kernel<FwdFp16Hd256, batch::WorkListScheduler>(const FwdParams&, int,
                                                                           cudaStream_t);

}  // namespace hopattn::kernels::fwd
