// The CLI's check of a CUDA runtime call (CUDA builds only: device_cuda.cpp, device_fill.cu): a
// failure raises hopattn::Error of kind kRuntime with the call's name and CUDA's error string.
#pragma once

#include <cuda_runtime.h>

#include "hopattn/error.hpp"

namespace hopattn::cli {

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(ErrorKind::kRuntime, detail::concat(what, " failed: ", cudaGetErrorName(status),
                                                    ": ", cudaGetErrorString(status)));
  }
}

}  // namespace hopattn::cli
