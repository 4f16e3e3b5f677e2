// The decode configurations' launch: the declaration of launch_for_head_dim (every q dtype and KV
// format of one row of configs.hpp's table), defined in launch_kernel.cuh and explicitly
// instantiated per row in hd<D>.cu; callers see the declaration only, so that no extern list
// repeats the table, and dispatch over the rows with configs.hpp's visit_head_dim.
#pragma once

#include <cuda_runtime.h>

#include "kernels/decode/configs.hpp"
#include "kernels/decode/schedule.cuh"

namespace hopattn::kernels::decode {

// Launches the kernel of head dim kHeadDim (a row of configs.hpp) for q in bf16 (else fp16) over
// a cache in `format`, with `ctas_per_sm` = 3 where that variant is built; returns the launch
// error (cudaSuccess when queued).
template <int kHeadDim>
cudaError_t launch_for_head_dim(const Params& p, bool bf16, KvFormat format, int ctas_per_sm,
                                dim3 grid, cudaStream_t stream);

// Launches decode_small_kernel (small_kernel.cuh) of head dim kHeadDim (64 or 128:
// small_kernel_head_dim) for q in bf16 (else fp16) over a cache in `format`, built for `ctas`
// CTAs an SM (2, or 3 over e4m3 / int8: small_kernel_max_ctas); defined in small_launch.cuh,
// instantiated per head dim in small_hd<D>.cu.
template <int kHeadDim>
cudaError_t launch_small_for_head_dim(const Params& p, bool bf16, KvFormat format, int ctas,
                                      dim3 grid, cudaStream_t stream);

// Launches decode_narrow_kernel (narrow_kernel.cuh) of head dim kHeadDim (64 or 128:
// narrow_kernel_head_dim) for q in bf16 (else fp16) over a cache of q's dtype; defined in
// narrow_launch.cuh, instantiated per head dim in narrow_hd<D>.cu.
template <int kHeadDim>
cudaError_t launch_narrow_for_head_dim(const Params& p, bool bf16, dim3 grid, cudaStream_t stream);

}  // namespace hopattn::kernels::decode
