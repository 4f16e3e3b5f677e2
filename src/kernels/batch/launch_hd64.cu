// Explicit instantiations of the batch family's work-list fwd kernel, head dim 64.
#include "kernels/batch/launch_kernel.cuh"

namespace hopattn::kernels::fwd {

template cudaError_t launch_kernel<FwdBf16Hd64, batch::WorkListScheduler>(const FwdParams&, int,
                                                                          cudaStream_t);
template cudaError_t launch_kernel<FwdFp16Hd64, batch::WorkListScheduler>(const FwdParams&, int,
                                                                          cudaStream_t);

}  // namespace hopattn::kernels::fwd
