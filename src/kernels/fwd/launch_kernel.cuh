// Definition of the fwd kernel's launch (declared in configs.cuh), for the files that
// instantiate it: launch_hd*.cu, one head dim each so that configurations compile in parallel,
// and batch/launch_hd*.cu.
#pragma once

#include <cuda_runtime.h>

#include "kernels/fwd/configs.cuh"
#include "kernels/fwd/kernel.cuh"
#include "kernels/fwd/traits.cuh"

namespace hopattn::kernels::fwd {

template <class Traits, class Scheduler>
cudaError_t launch_kernel(const FwdParams& params, int grid, cudaStream_t stream) {
  const auto kernel = fwd_kernel<Traits, Scheduler>;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(Traits::kSmemAlloc));
  if (err != cudaSuccess) return err;
  kernel<<<grid, Traits::kThreads, Traits::kSmemAlloc, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace hopattn::kernels::fwd

// Instantiates the launch of the table's row (kDqk, kDv) in bf16 and fp16 over Scheduler (in
// namespace hopattn::kernels::fwd); kFp8KV: the instances over an fp8 e4m3 cache.
#define HOPATTN_FWD_INSTANTIATE_KV(kDqk, kDv, Scheduler, kFp8KV)                             \
  template cudaError_t launch_kernel<FwdBuilt<__nv_bfloat16, kDqk, kDv, kFp8KV>, Scheduler>( \
      const FwdParams&, int, cudaStream_t);                                                  \
  template cudaError_t launch_kernel<FwdBuilt<__half, kDqk, kDv, kFp8KV>, Scheduler>(        \
      const FwdParams&, int, cudaStream_t)
#define HOPATTN_FWD_INSTANTIATE(kDqk, kDv, Scheduler) \
  HOPATTN_FWD_INSTANTIATE_KV(kDqk, kDv, Scheduler, false)
// The wide-tile instances of the row (kDqk, kDv) of kFwdWideConfigs, bf16 and fp16.
#define HOPATTN_FWD_INSTANTIATE_WIDE(kDqk, kDv, Scheduler)                               \
  template cudaError_t launch_kernel<FwdWideBuilt<__nv_bfloat16, kDqk, kDv>, Scheduler>( \
      const FwdParams&, int, cudaStream_t);                                              \
  template cudaError_t launch_kernel<FwdWideBuilt<__half, kDqk, kDv>, Scheduler>(        \
      const FwdParams&, int, cudaStream_t)
