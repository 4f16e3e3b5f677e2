// Configure-time device query (cmake/detect_gpu.cmake): prints the name of device 0 and exits 0
// when it is a Hopper (sm_90), the only GPU the sm_90a kernels run on; otherwise prints why not
// and exits 1. The same test as the CLI's gpu_info() (bench/device_cuda.cpp).
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    std::printf("no GPU found");  // no NVIDIA driver on this machine
    return 1;
  }
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorNoDevice || (status == cudaSuccess && count == 0)) {
    std::printf("no GPU found");
    return 1;
  }
  if (status != cudaSuccess) {
    std::printf("no usable GPU: %s", cudaGetErrorString(status));
    return 1;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::printf("no usable GPU: cudaGetDeviceProperties failed");
    return 1;
  }
  if (prop.major != 9) {
    std::printf("%s is sm_%d%d, not a Hopper (sm_90)", prop.name, prop.major, prop.minor);
    return 1;
  }
  std::printf("%s", prop.name);
  return 0;
}
