// device.hpp's flush_l2: evicts the L2 before a timed call, by writing or by reading a buffer
// twice its size. Writing (the tables' method) leaves the L2 full of dirty lines, which the timed
// call's first misses must write back to HBM; reading leaves clean lines, as in a model whose
// kernels before the attention mostly read weights. The difference between the two is what the
// dirty lines cost a call.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_check.hpp"
#include "device.hpp"

namespace hopattn::cli {
namespace {

// Reads every 16-byte word once through the L2 (default caching); the sum lands in `sink` only
// when it equals a value no fill makes, so the loads are not dead code and nothing is written.
__global__ void read_through_l2(const uint4* data, int64_t words, unsigned* sink) {
  unsigned acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += stride) {
    const uint4 w = data[i];
    acc ^= w.x ^ w.y ^ w.z ^ w.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

// A buffer twice the L2's size (zeros: the read flush's sum is then 0, its sink never written),
// the read flush's sink and the grid that covers the card.
struct FlushBuffers {
  DeviceMemory data;
  DeviceMemory sink{sizeof(unsigned)};
  int sms = 0;

  FlushBuffers() {
    int l2 = 0;
    check_cuda(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0), "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0),
               "cudaDeviceGetAttribute");
    data = DeviceMemory(2 * static_cast<size_t>(l2 > 0 ? l2 : 64 << 20));
    fill_device_bytes(data.data(), 0, data.bytes());
  }
};

}  // namespace

void flush_l2(L2Flush how) {
  if (how == L2Flush::kNone) return;
  static FlushBuffers buffers;
  if (how == L2Flush::kWrite) {
    check_cuda(cudaMemsetAsync(buffers.data.data(), 0, buffers.data.bytes(), nullptr),
               "cudaMemsetAsync");
    return;
  }
  read_through_l2<<<4 * buffers.sms, 512>>>(static_cast<const uint4*>(buffers.data.data()),
                                            static_cast<int64_t>(buffers.data.bytes() / 16),
                                            static_cast<unsigned*>(buffers.sink.data()));
  check_cuda(cudaGetLastError(), "read_through_l2 launch");
}

}  // namespace hopattn::cli
