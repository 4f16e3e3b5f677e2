// Host launch of one decode kernel instantiation, and the dispatch over q dtype and KV format of
// one head dim (declared in configs.cuh), for the files that instantiate it: hd<D>.cu, one row of
// configs.hpp each so that two cores build them in parallel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels/common/programmatic_launch.cuh"
#include "kernels/decode/configs.cuh"
#include "kernels/decode/kernel.cuh"

namespace hopattn::kernels::decode {

// Raises kKernel's dynamic shared-memory limit to `bytes`, once per device (a cudaFuncSetAttribute
// per launch would cost every call a driver round trip).
template <auto kKernel>
cudaError_t allow_dynamic_smem_once(int bytes) {
  static std::atomic<uint64_t> configured{0};  // bit d: device d done
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit == 0 || (configured.load(std::memory_order_relaxed) & bit) == 0) {
    status = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (status != cudaSuccess) return status;
    configured.fetch_or(bit, std::memory_order_relaxed);
  }
  return cudaSuccess;
}

// Launches one instantiation.
template <int kHeadDim, class Elt, KvFormat kFormat, int kCtasPerSm = 2>
cudaError_t launch_variant(const Params& p, dim3 grid, cudaStream_t stream) {
  using T = Traits<kHeadDim, kv_format_bytes(kFormat), kCtasPerSm>;
  constexpr auto kernel = &decode_kernel<kHeadDim, Elt, kFormat, kCtasPerSm>;
  const cudaError_t status = allow_dynamic_smem_once<kernel>(T::smem_bytes(T::kMaxRows));
  if (status != cudaSuccess) return status;
  return launch_programmatic(kernel, grid, dim3(kThreads), T::smem_bytes(p.rows_per_cta), stream,
                             p);
}

// The kernel of `format` (a row of kKvFormats): the three-CTA one where it is built and asked for.
template <int kHeadDim, class Elt>
cudaError_t launch_for_format(const Params& p, KvFormat format, dim3 grid, cudaStream_t stream,
                              int ctas_per_sm) {
  cudaError_t status = cudaErrorInvalidValue;
  visit_kv_format(format, [&](auto f) {
    constexpr KvFormat kFormat = decltype(f)::value;
    if constexpr (has_three_cta_variant(kHeadDim, std::is_same_v<Elt, __nv_bfloat16>, kFormat)) {
      if (ctas_per_sm == 3) {
        status = launch_variant<kHeadDim, Elt, kFormat, 3>(p, grid, stream);
        return;
      }
    }
    status = launch_variant<kHeadDim, Elt, kFormat>(p, grid, stream);
  });
  return status;
}

template <int kHeadDim>
cudaError_t launch_for_head_dim(const Params& p, bool bf16, KvFormat format, int ctas_per_sm,
                                dim3 grid, cudaStream_t stream) {
  return bf16 ? launch_for_format<kHeadDim, __nv_bfloat16>(p, format, grid, stream, ctas_per_sm)
              : launch_for_format<kHeadDim, __half>(p, format, grid, stream, ctas_per_sm);
}

}  // namespace hopattn::kernels::decode

// Instantiates every kernel of the table's head dim kHeadDim (in namespace
// hopattn::kernels::decode).
#define HOPATTN_DECODE_INSTANTIATE(kHeadDim)                                                   \
  static_assert(built_head_dim(kHeadDim), "not a row of decode/configs.hpp");                  \
  template cudaError_t launch_for_head_dim<kHeadDim>(const Params&, bool, KvFormat, int, dim3, \
                                                     cudaStream_t)
