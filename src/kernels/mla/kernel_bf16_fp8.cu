#include "kernels/mla/launch_kernel.cuh"

namespace hopattn::kernels::mla {
template cudaError_t launch_kernel<MlaBf16Fp8>(const MlaParams&, dim3, cudaStream_t);
}  // namespace hopattn::kernels::mla
