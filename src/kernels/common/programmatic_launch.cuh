// A kernel launch that may overlap the tail of the kernel ahead of it in the stream (programmatic
// dependent launch: ptx/grid_dependency.cuh), so that its launch latency and CTA start-up hide
// behind that kernel's last CTAs. The kernel must call ptx::wait_for_prior_grids() before it
// reads anything an earlier kernel may have written (inputs, caches, lengths, workspace).
#pragma once

#include <cuda_runtime.h>

namespace hopattn::kernels {

// Launches kernel<<<grid, block, smem, stream>>>(param) with
// cudaLaunchAttributeProgrammaticStreamSerialization (captured into a CUDA graph as a
// programmatic edge).
template <class Param>
cudaError_t launch_programmatic(void (*kernel)(Param), dim3 grid, dim3 block, size_t smem,
                                cudaStream_t stream, const Param& param) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, param);
}

}  // namespace hopattn::kernels
