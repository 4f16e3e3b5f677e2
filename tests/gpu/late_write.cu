#include "late_write.hpp"
#include "ptx/grid_dependency.cuh"

namespace hopattn::testing {
namespace {

__global__ void late_copy_kernel(uint8_t* dst, const uint8_t* src, size_t bytes, long long cycles) {
  ptx::allow_dependent_launch();
  if (threadIdx.x == 0) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
  }
  __syncthreads();
  for (size_t i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

void launch_late_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream,
                      long long cycles) {
  late_copy_kernel<<<1, 256, 0, stream>>>(static_cast<uint8_t*>(dst),
                                          static_cast<const uint8_t*>(src), bytes, cycles);
  check_cuda(cudaGetLastError(), "late_copy_kernel");
}

}  // namespace hopattn::testing
