// Definition of the main bwd kernel's launch (declared in configs.cuh), for the files that
// instantiate it: launch_hd*.cu, one row of ../fwd/configs.hpp each so that configurations
// compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include "kernels/bwd/configs.cuh"
#include "kernels/bwd/kernel.cuh"
#include "kernels/bwd/traits.cuh"

namespace hopattn::kernels::bwd {

template <class Traits>
cudaError_t launch_kernel(const BwdParams& params, dim3 grid, cudaStream_t stream) {
  // One kernel per mode (kernel.cuh): the deterministic one stages dQ in two sets for two writers.
  const bool deterministic = params.ws.semaphore != nullptr;
  const auto kernel = deterministic ? bwd_kernel<Traits, true> : bwd_kernel<Traits, false>;
  const uint32_t smem = Traits::smem_alloc(deterministic);
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  kernel<<<grid, Traits::kThreads, smem, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace hopattn::kernels::bwd

// Instantiates the launch of the table's row (kDqk, kDv) in bf16 and fp16 (in namespace
// hopattn::kernels::bwd). The rows, bf16 and fp16 each, all with 64-row q tiles: (64, 64) and
// (128, 128) split by keys (128-key KV blocks), (192, 128) and (256, 256) split by columns (64-key
// KV blocks); traits.cuh derives each one's registers and shared memory.
#define HOPATTN_BWD_INSTANTIATE(kDqk, kDv)                                                       \
  template cudaError_t launch_kernel<BwdBuilt<__nv_bfloat16, kDqk, kDv>>(const BwdParams&, dim3, \
                                                                         cudaStream_t);          \
  template cudaError_t launch_kernel<BwdBuilt<__half, kDqk, kDv>>(const BwdParams&, dim3,        \
                                                                  cudaStream_t)
