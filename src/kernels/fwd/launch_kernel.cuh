// Launch of one fwd kernel configuration; explicitly instantiated once per configuration in the
// launch_hd*.cu files (one line each) so that configurations compile in parallel, and declared
// extern in launch.cu.
#pragma once

#include <cuda_runtime.h>

#include "kernels/fwd/kernel.cuh"
#include "kernels/fwd/traits.cuh"

namespace hopattn::kernels::fwd {

// Returns the launch error (cudaSuccess when queued).
template <class Traits, class Scheduler = LptTileScheduler>
cudaError_t launch_kernel(const FwdParams& params, int grid, cudaStream_t stream) {
  const auto kernel = fwd_kernel<Traits, Scheduler>;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(Traits::kSmemAlloc));
  if (err != cudaSuccess) return err;
  kernel<<<grid, Traits::kThreads, Traits::kSmemAlloc, stream>>>(params);
  return cudaGetLastError();
}

// The configurations hopattn builds, bf16 and fp16 each. KV tiles are as long as the 227 KB of
// shared memory allow with two stages: 128 keys up to head dim 128 and 112 for (Dqk 192, Dv 128),
// with a separate output staging buffer; 80 for 256, whose O is staged in Q's buffer (kOInQ; a
// separate 64 KB buffer would leave room for 48 keys only).
using FwdBf16Hd64 = FwdTraits<__nv_bfloat16, 64>;
using FwdFp16Hd64 = FwdTraits<__half, 64>;
using FwdBf16Hd128 = FwdTraits<__nv_bfloat16, 128>;
using FwdFp16Hd128 = FwdTraits<__half, 128>;
using FwdBf16Hd192x128 = FwdTraits<__nv_bfloat16, 192, 128, 112>;
using FwdFp16Hd192x128 = FwdTraits<__half, 192, 128, 112>;
using FwdBf16Hd256 = FwdTraits<__nv_bfloat16, 256, 256, 80, 2, true>;
using FwdFp16Hd256 = FwdTraits<__half, 256, 256, 80, 2, true>;

}  // namespace hopattn::kernels::fwd
