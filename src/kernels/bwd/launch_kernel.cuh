// Launch of one main bwd kernel configuration; explicitly instantiated once per configuration in
// the launch_hd*.cu files (one line each) so that configurations compile in parallel, and declared
// extern in launch.cu.
#pragma once

#include <cuda_runtime.h>

#include "kernels/bwd/kernel.cuh"
#include "kernels/bwd/traits.cuh"

namespace hopattn::kernels::bwd {

// Returns the launch error (cudaSuccess when queued). grid: 1-D, KV blocks x Hkv x B CTAs
// (BwdParams::order maps blockIdx.x to one).
template <class Traits>
cudaError_t launch_kernel(const BwdParams& params, dim3 grid, cudaStream_t stream) {
  const auto kernel = bwd_kernel<Traits>;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(Traits::kSmemAlloc));
  if (err != cudaSuccess) return err;
  kernel<<<grid, Traits::kThreads, Traits::kSmemAlloc, stream>>>(params);
  return cudaGetLastError();
}

// The configurations hopattn builds, bf16 and fp16 each, all with 64-row q tiles: (Dqk, Dv) =
// (64, 64) and (128, 128) split by keys (128-key KV blocks), (192, 128) and (256, 256) split by
// columns (64-key KV blocks); traits.cuh derives each one's registers and shared memory.
using BwdBf16Hd128 = BwdTraits<__nv_bfloat16, 128>;
using BwdFp16Hd128 = BwdTraits<__half, 128>;
using BwdBf16Hd64 = BwdTraits<__nv_bfloat16, 64>;
using BwdFp16Hd64 = BwdTraits<__half, 64>;
using BwdBf16Hd192x128 = BwdTraits<__nv_bfloat16, 192, 128>;
using BwdFp16Hd192x128 = BwdTraits<__half, 192, 128>;
using BwdBf16Hd256 = BwdTraits<__nv_bfloat16, 256>;
using BwdFp16Hd256 = BwdTraits<__half, 256>;

}  // namespace hopattn::kernels::bwd
