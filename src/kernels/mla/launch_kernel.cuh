// Launch of one MLA kernel configuration; explicitly instantiated in the kernel_*.cu files (one
// configuration each, so that a 2-core build compiles them in parallel) and declared extern in
// launch.cu.
#pragma once

#include <cuda_runtime.h>

#include "kernels/mla/kernel.cuh"
#include "kernels/mla/traits.cuh"

namespace hopattn::kernels::mla {

// Returns the launch error (cudaSuccess when queued).
template <class Traits>
cudaError_t launch_kernel(const MlaParams& params, dim3 grid, cudaStream_t stream) {
  const auto kernel = mla_kernel<Traits>;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(Traits::kSmemAlloc));
  if (err != cudaSuccess) return err;
  kernel<<<grid, Traits::kThreads, Traits::kSmemAlloc, stream>>>(params);
  return cudaGetLastError();
}

using MlaBf16 = MlaTraits<__nv_bfloat16>;
using MlaFp16 = MlaTraits<__half>;
using MlaBf16Fp8 = MlaTraits<__nv_bfloat16, true>;
using MlaFp16Fp8 = MlaTraits<__half, true>;

}  // namespace hopattn::kernels::mla
