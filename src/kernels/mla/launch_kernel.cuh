// Definition of the MLA kernel's launch (declared in configs.cuh), for the files that instantiate
// it: kernel_*.cu, one row of configs.hpp each so that a 2-core build compiles them in parallel.
#pragma once

#include <cuda_runtime.h>

#include "kernels/common/programmatic_launch.cuh"
#include "kernels/mla/configs.cuh"
#include "kernels/mla/kernel.cuh"
#include "kernels/mla/narrow.cuh"
#include "kernels/mla/seesaw.cuh"
#include "kernels/mla/traits.cuh"

namespace hopattn::kernels::mla {

template <class Traits>
cudaError_t launch_kernel(const MlaParams& params, dim3 grid, cudaStream_t stream) {
  const auto kernel = [] {
    if constexpr (Traits::kSeesaw) {
      return mla_seesaw_kernel<Traits>;
    } else if constexpr (Traits::kNarrow) {
      return mla_narrow_kernel<Traits>;
    } else {
      return mla_kernel<Traits>;
    }
  }();
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(Traits::kSmemAlloc));
  if (err != cudaSuccess) return err;
  return launch_programmatic(kernel, grid, dim3(Traits::kThreads), Traits::kSmemAlloc, stream,
                             params);
}

}  // namespace hopattn::kernels::mla

// Instantiates the launch of the table's row (q dtype kQ, fp8 cache or not), its narrow
// schedule's, for a 16-bit row its seesaw schedule's and for an fp8 row the narrow schedule's of
// 32 rows (in namespace hopattn::kernels::mla).
#define HOPATTN_MLA_INSTANTIATE(kQ, kFp8Cache)                                                  \
  template cudaError_t launch_kernel<MlaBuilt<kQ, kFp8Cache>>(const MlaParams&, dim3,           \
                                                              cudaStream_t);                    \
  template cudaError_t launch_kernel<NarrowOf<MlaBuilt<kQ, kFp8Cache>>>(const MlaParams&, dim3, \
                                                                        cudaStream_t);          \
  HOPATTN_MLA_INSTANTIATE_BY_CACHE_##kFp8Cache(kQ)
#define HOPATTN_MLA_INSTANTIATE_BY_CACHE_false(kQ)                                          \
  template cudaError_t launch_kernel<SeesawOf<MlaBuilt<kQ, false>>>(const MlaParams&, dim3, \
                                                                    cudaStream_t)
// fp8: no seesaw schedule, and the narrow one for 17..32 rows as well.
#define HOPATTN_MLA_INSTANTIATE_BY_CACHE_true(kQ)                                              \
  template cudaError_t launch_kernel<NarrowOf<MlaBuilt<kQ, true>, plan::mla::kNarrowRowsFp8>>( \
      const MlaParams&, dim3, cudaStream_t)
