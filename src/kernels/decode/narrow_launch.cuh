// Host launch of the narrow decode kernel (narrow_kernel.cuh) over q dtype, for the files that
// instantiate it: narrow_hd<D>.cu, one head dim each so that two cores build them in parallel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/common/programmatic_launch.cuh"
#include "kernels/decode/configs.cuh"
#include "kernels/decode/launch_kernel.cuh"
#include "kernels/decode/narrow_kernel.cuh"

namespace hopattn::kernels::decode {

template <int kHeadDim, class Elt>
cudaError_t launch_narrow_variant(const Params& p, dim3 grid, cudaStream_t stream) {
  using T = NarrowTraits<kHeadDim>;
  constexpr auto kernel = &decode_narrow_kernel<kHeadDim, Elt>;
  const cudaError_t status = allow_dynamic_smem_once<kernel>(T::smem_bytes());
  if (status != cudaSuccess) return status;
  return launch_programmatic(kernel, grid, dim3(kThreads), T::smem_bytes(), stream, p);
}

template <int kHeadDim>
cudaError_t launch_narrow_for_head_dim(const Params& p, bool bf16, dim3 grid, cudaStream_t stream) {
  static_assert(narrow_kernel_head_dim(kHeadDim), "a head dim of the narrow kernel");
  return bf16 ? launch_narrow_variant<kHeadDim, __nv_bfloat16>(p, grid, stream)
              : launch_narrow_variant<kHeadDim, __half>(p, grid, stream);
}

}  // namespace hopattn::kernels::decode

// Instantiates the narrow kernels of head dim kHeadDim (in namespace hopattn::kernels::decode).
#define HOPATTN_DECODE_NARROW_INSTANTIATE(kHeadDim) \
  template cudaError_t launch_narrow_for_head_dim<kHeadDim>(const Params&, bool, dim3, cudaStream_t)
