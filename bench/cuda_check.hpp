// The CLI's check of a CUDA runtime call (CUDA builds only: device_cuda.cpp, device_fill.cu): the
// library's throw_if_cuda_error, naming the CLI as the caller.
#pragma once

#include <cuda_runtime.h>

#include "kernels/common/cuda_host.hpp"

namespace hopattn::cli {

inline void check_cuda(cudaError_t status, const char* what) {
  kernels::throw_if_cuda_error(status, "hopattn CLI", what);
}

}  // namespace hopattn::cli
