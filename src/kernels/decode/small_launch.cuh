// Host launch of the small-grid decode kernel (small_kernel.cuh) over q dtype and KV format, for
// the files that instantiate it: small_hd<D>.cu, one head dim each so that two cores build them
// in parallel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/common/programmatic_launch.cuh"
#include "kernels/decode/configs.cuh"
#include "kernels/decode/launch_kernel.cuh"
#include "kernels/decode/small_kernel.cuh"

namespace hopattn::kernels::decode {

template <int kHeadDim, class Elt, KvFormat kFormat, int kCtas>
cudaError_t launch_small_variant(const Params& p, dim3 grid, cudaStream_t stream) {
  using T = SmallTraits<kHeadDim, kv_format_bytes(kFormat), kCtas>;
  constexpr auto kernel = &decode_small_kernel<kHeadDim, Elt, kFormat, kCtas>;
  const cudaError_t status = allow_dynamic_smem_once<kernel>(T::smem_bytes());
  if (status != cudaSuccess) return status;
  return launch_programmatic(kernel, grid, dim3(kThreads), T::smem_bytes(), stream, p);
}

// `ctas`: CTAs an SM of the instance (LaunchPlan::config): 2, or 3 over an e4m3 / int8 cache
// (3 over any other format is refused: the plan never asks for it).
template <int kHeadDim>
cudaError_t launch_small_for_head_dim(const Params& p, bool bf16, KvFormat format, int ctas,
                                      dim3 grid, cudaStream_t stream) {
  static_assert(small_kernel_head_dim(kHeadDim), "a head dim of the small-grid kernel");
  cudaError_t status = cudaErrorInvalidValue;
  visit_kv_format(format, [&](auto f) {
    constexpr KvFormat kFormat = decltype(f)::value;
    if (ctas == 3) {  // a format without that instance leaves cudaErrorInvalidValue
      if constexpr (small_kernel_max_ctas(kFormat) == 3) {
        status = bf16 ? launch_small_variant<kHeadDim, __nv_bfloat16, kFormat, 3>(p, grid, stream)
                      : launch_small_variant<kHeadDim, __half, kFormat, 3>(p, grid, stream);
      }
      return;
    }
    status = bf16 ? launch_small_variant<kHeadDim, __nv_bfloat16, kFormat, 2>(p, grid, stream)
                  : launch_small_variant<kHeadDim, __half, kFormat, 2>(p, grid, stream);
  });
  return status;
}

}  // namespace hopattn::kernels::decode

// Instantiates the small-grid kernels of head dim kHeadDim (in namespace
// hopattn::kernels::decode).
#define HOPATTN_DECODE_SMALL_INSTANTIATE(kHeadDim)                                             \
  template cudaError_t launch_small_for_head_dim<kHeadDim>(const Params&, bool, KvFormat, int, \
                                                           dim3, cudaStream_t)
